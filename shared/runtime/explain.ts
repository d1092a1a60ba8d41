/**
 * `explain`'s pass: the run's own front (load, observe, decide) on clients built from the
 * config, in a read-only scope. Nothing is written, no lock is taken.
 */
import { type Config, functionConfig } from '../config.ts';
import type { AnyFunction } from '../contract/index.ts';
import type { Decision, Policy, Snapshot, State } from '../engine/types.ts';
import { createLogger } from '../log/logger.ts';
import type { RunRecord } from '../state/history.ts';
import { front, type Scope, Stop } from './phases.ts';
import { checkKindGrace, validateSettings } from './settings.ts';
import { connectKube, connectPorts, type Environment, stateFor } from './wire.ts';

/**
 * One read-only pass of the pipeline, as a run would make it: the stored state, a fresh
 * complete snapshot and the decision on it. Nothing is written, no lock is taken (`explain`).
 */
export async function observeAndDecide(
  fn: AnyFunction,
  cfg: Config,
  env: Pick<Environment, 'time' | 'processEnv'>,
): Promise<{ state: State; snapshot: Snapshot; decision: Decision; policy: Policy; runs: RunRecord[] }> {
  const fc = functionConfig(cfg, fn.name, fn.defaults);
  checkKindGrace(fn, cfg.functions[fn.name]?.kindGrace, `config ${cfg.source}`);
  const settings = validateSettings(fn, { pageSize: cfg.pageSize, ...fc.settings }, `config ${cfg.source}`);
  const kube = await connectKube(cfg, { time: env.time, log: createLogger({ output: 'json' }) });
  try {
    const { store } = stateFor(cfg, kube, env.time);
    const ports = await connectPorts(fn, kube, cfg, settings, env.processEnv ?? {}, env.time);
    // the run's own front (load, observe, decide) in a read-only scope: the store is only
    // loaded from, nothing is logged, and what would end a run is thrown as it was
    const x: Scope = {
      log: createLogger({ output: 'json', level: 'silent' }),
      signal: env.time.timeout(cfg.deadlineMs),
      side: () => undefined,
    };
    const ahead = await front(
      fn,
      ports.reader,
      { load: (name, signal) => store.load(name, signal) },
      x,
      env.time,
      {
        snapshotId: 'explain',
        settings,
        policy: fc.policy,
        dryRun: true,
      },
    )
      .catch((err: unknown) => {
        throw err instanceof Stop ? (err.cause ?? new Error(err.finish.error)) : err;
      })
      .finally(() => ports.close());
    // the history is a pointer for the reader: one that cannot be read is no history
    const runs = (await store.history?.list(fn.name).catch(() => undefined)) ?? [];
    return {
      state: ahead.loaded.state,
      snapshot: ahead.snapshot,
      decision: ahead.decision,
      policy: fc.policy,
      runs,
    };
  } finally {
    await kube.close();
  }
}
