/** Runs danm-endpoints against a KubeTarget on a simulated clock, capturing the diff log. */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { danmEndpoints } from '../../functions/danm-endpoints/index.ts';
import { type FileConfig, resolveConfig } from '../../shared/config.ts';
import type { KubeClientOptions } from '../../shared/kube/client.ts';
import type { RunResult } from '../../shared/runtime/run.ts';
import { runFunction } from '../../shared/runtime/wire.ts';
import { captureLog } from './memfn.ts';

export type DanmRunner = {
  now: number;
  lines: Record<string, unknown>[];
  run: (apply?: boolean, record?: boolean) => Promise<RunResult>;
  events: (name: string, since?: number) => Record<string, unknown>[];
  mark: () => number;
};

export function danmRunner(
  options: KubeClientOptions,
  namespaces: string[],
  start: number,
  extra: FileConfig['functions'] = {},
): DanmRunner {
  const dir = mkdtempSync(join(tmpdir(), 'twopass-danm-'));
  const r: DanmRunner = {
    now: start,
    lines: [],
    run: async (apply = true, record = false) => {
      const cap = captureLog(() => r.now);
      // Small test worlds: the percentage guard would refuse one deletion in three targets.
      const fn = { settings: { namespaces }, maxDeletionPercent: 100, ...(extra?.['danm-endpoints'] ?? {}) };
      const cfg = resolveConfig({ functions: { ...extra, 'danm-endpoints': fn } }, 'test', {
        state: `file:${dir}`,
      });
      const result = await runFunction(
        danmEndpoints,
        cfg,
        { clock: () => r.now, log: cap.log, kubeOptions: options },
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
