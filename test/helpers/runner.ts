/** Runs a function against a KubeTarget on a simulated clock, capturing the diff log. */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type FileConfig, resolveConfig } from '../../shared/config.ts';
import type { AnyFunction } from '../../shared/contract/index.ts';
import type { KubeClientOptions } from '../../shared/kube/client.ts';
import type { KubeClient } from '../../shared/kube/ports.ts';
import type { RunResult } from '../../shared/runtime/run.ts';
import { runFunction } from '../../shared/runtime/wire.ts';
import { captureLog } from './memfn.ts';
import { testTime } from './time.ts';

export type Runner = {
  now: number;
  lines: Record<string, unknown>[];
  run: (apply?: boolean, record?: boolean) => Promise<RunResult>;
  events: (name: string, since?: number) => Record<string, unknown>[];
  mark: () => number;
  /** Wraps the run's Kubernetes client (an interceptor that counts or injects faults). */
  intercept?: (kube: KubeClient) => KubeClient;
  /** The state directory (file store): its tombstones are `<fn>.tombstones.json.gz`. */
  dir: string;
};

type FnConfig = NonNullable<FileConfig['functions']>[string];

export function runner(
  fn: AnyFunction,
  options: Omit<KubeClientOptions, 'time'>,
  namespaces: string[],
  start: number,
  extra: FnConfig = {},
  processEnv: Record<string, string> = {},
  /** Top-level configuration beside the function's (eventNamespace, ...). */
  top: Omit<FileConfig, 'functions'> = {},
): Runner {
  const dir = mkdtempSync(join(tmpdir(), `twopass-${fn.name}-`));
  const shape = (fn.settingsSchema as { shape?: Record<string, unknown> } | undefined)?.shape;
  const scoped = !shape || 'namespaces' in shape;
  const r: Runner = {
    dir,
    now: start,
    lines: [],
    run: async (apply = true, record = false) => {
      const cap = captureLog(() => r.now);
      // Small test worlds: the percentage guard would refuse one deletion in three targets.
      const fc: FnConfig = {
        maxDeletionPercent: 100,
        ...extra,
        // only functions that have a namespace scope take one (settings are strict)
        settings: { ...(scoped ? { namespaces } : {}), ...(extra.settings ?? {}) },
      };
      const cfg = resolveConfig({ ...top, functions: { [fn.name]: fc } }, 'test', { state: `file:${dir}` });
      const result = await runFunction(
        fn,
        cfg,
        {
          time: testTime(() => r.now),
          log: cap.log,
          kubeOptions: options,
          processEnv,
          ...(r.intercept ? { intercept: r.intercept } : {}),
        },
        { apply, record },
      );
      r.lines.push(...cap.lines);
      return result;
    },
    events: (name, since = 0) => r.lines.slice(since).filter((l) => l.event === name),
    mark: () => r.lines.length,
  };
  return r;
}
