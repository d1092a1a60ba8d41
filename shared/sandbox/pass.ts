/** A sandbox scene's context, and one pass of it: a heading, then one applying run of the function. */
import type { Config } from '../config.ts';
import type { AnyFunction } from '../contract/index.ts';
import type { KubeClient } from '../kube/ports.ts';
import type { Logger } from '../log/logger.ts';
import type { RunResult } from '../runtime/run.ts';
import { type Environment, runFunction } from '../runtime/wire.ts';
import { instantTime } from '../time.ts';

/** What the sandbox gives each scene: its fake cluster, config, simulated clock, log and output. */
export type Scene = Readonly<{
  kube: KubeClient;
  cfg: Config;
  /** The sandbox's state directory (removed when the demo ends). */
  stateDir: string;
  clock: () => number;
  advance: (ms: number) => void;
  log: Logger;
  /** The fake API server's URL. */
  server: string;
  say: (s: string) => void;
}>;

export function passes(
  fn: AnyFunction,
  cfg: Config,
  env: Environment,
  say: (s: string) => void,
  runs: RunResult[],
): (label: string) => Promise<RunResult> {
  return async (label) => {
    say('');
    say(`── ${label} ${'─'.repeat(Math.max(0, 90 - label.length))}`);
    const r = await runFunction(fn, cfg, env, { apply: true });
    runs.push(r);
    return r;
  };
}

/** The start of a scene of `fn`: the runs and problems it collects, and its pass. */
export function startScene(
  fn: AnyFunction,
  s: Scene,
  opts: { cfg?: Config; processEnv?: Record<string, string> } = {},
): { runs: RunResult[]; problems: string[]; pass: (label: string) => Promise<RunResult> } {
  const runs: RunResult[] = [];
  const env: Environment = {
    time: instantTime(s.clock),
    log: s.log,
    kubeOptions: { server: s.server },
    ...(opts.processEnv ? { processEnv: opts.processEnv } : {}),
  };
  return { runs, problems: [], pass: passes(fn, opts.cfg ?? s.cfg, env, s.say, runs) };
}
