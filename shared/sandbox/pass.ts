/** One pass of a sandbox scene: a heading, then one applying run of the function. */
import type { Config } from '../config.ts';
import type { AnyFunction } from '../contract/index.ts';
import type { RunResult } from '../runtime/run.ts';
import { type Environment, runFunction } from '../runtime/wire.ts';

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
