/**
 * The race simulator's harness: a simulated clock, a world that moves (also
 * between the lists of a run), a cleaner that runs on a cron cadence, API
 * faults in an active phase, then a quiet phase in which every true orphan must
 * be reclaimed within grace + 2 x interval. Safety is checked on every write
 * the cleaner makes.
 */

import type { AnyFunction } from '../../shared/contract/index.ts';
import type { Policy } from '../../shared/engine/types.ts';
import { emptyState, type State } from '../../shared/engine/types.ts';
import { createLogger } from '../../shared/log/logger.ts';
import { run } from '../../shared/runtime/run.ts';
import type { Lock, StateStore } from '../../shared/state/store.ts';
import { MemoryTombstones } from '../../shared/state/tombstones.ts';
import { instantTime } from '../../shared/time.ts';
import { Rng } from './rng.ts';

export { MINUTE as MIN } from '../../shared/contract/index.ts';

import { MINUTE as MIN } from '../../shared/contract/index.ts';
import { parsed } from '../helpers/settings.ts';

export interface World {
  /** One random event of the world (pods come and go, CNI ADD/DEL, node loss...). */
  step(rng: Rng, now: number): void;
  /** Events that complete on their own (delayed DanmEp creation etc.). */
  tick(now: number): void;
  /** Completes every pending event at once (the quiet phase starts from a settled world). */
  settle(now: number): void;
  /** The keys of the true orphans right now, with their kind. */
  orphans(): Map<string, string>;
  /** Safety violations seen so far. */
  violations: string[];
  /** Read faults on or off. */
  setFaults(rate: number, rng: Rng): void;
  /** The world may move: `f` runs before each list call; `onWrite` (default `f`) before each write of the cleaner. */
  setInterleave(f: (() => void) | undefined, onWrite?: (() => void) | undefined): void;
}

export interface Cleaner {
  name: string;
  run(now: number): Promise<void>;
}

export type ScheduleOptions = Readonly<{
  seed: number;
  activeMinutes: number;
  intervalMinutes: number;
  eventsPerMinute: number;
  faultRate: number;
  interleave: number;
  /** How long after the quiet phase starts (or after it became an orphan) each kind must be reclaimed. */
  boundByKind: Readonly<Record<string, number>>;
}>;

export type ScheduleResult = {
  seed: number;
  steps: number;
  violations: string[];
  orphans: number;
  reclaimed: number;
  unreclaimed: string[];
  worstLatencyMs: number;
};

/** State in memory (the simulator's and the rule properties' store). */
export class MemStore implements StateStore {
  readonly description = 'memory';
  readonly tombstones = new MemoryTombstones();
  private state: State | undefined;
  private v = 0;
  async load(fn: string) {
    return this.state ? { state: this.state, version: String(this.v) } : { state: emptyState(fn) };
  }
  async save(_fn: string, s: State) {
    this.state = s;
    this.v++;
    return String(this.v);
  }
  async reset() {
    this.state = undefined;
    return true;
  }
}

export const noLock: Lock = {
  description: 'none',
  acquire: async () => ({ lost: new AbortController().signal, release: async () => {} }),
};
export const silent = createLogger({ output: 'json', level: 'silent' });

/** twopass itself: the real run() with the real function, on the simulated clock. */
export function twopassCleaner<R, W>(
  fn: AnyFunction,
  reader: R,
  writer: W,
  clock: () => number,
  policy: Policy,
  settings: Record<string, unknown> = {},
): Cleaner {
  const store = new MemStore();
  let n = 0;
  return {
    name: 'twopass',
    run: async () => {
      await run(
        {
          fn,
          reader,
          writer,
          store,
          lock: noLock,
          time: instantTime(clock),
          log: silent,
          newId: () => `sim-${++n}`,
        },
        {
          apply: true,
          record: false,
          policy,
          settings: parsed(fn, settings),
          deadlineMs: 60_000,
          concurrency: 4,
        },
      );
    },
  };
}

export async function runSchedule(
  world: World,
  cleaner: Cleaner,
  clock: { now: number },
  o: ScheduleOptions,
): Promise<ScheduleResult> {
  const rng = new Rng(o.seed);
  let steps = 0;
  const since = new Map<string, { at: number; kind: string }>();
  const latencies: number[] = [];
  const late: string[] = [];
  let reclaimed = 0;
  let quietFrom = Number.POSITIVE_INFINITY;
  const track = () => {
    const now = world.orphans();
    for (const [k, kind] of now) if (!since.has(k)) since.set(k, { at: clock.now, kind });
    for (const [k, s] of [...since]) {
      if (!now.has(k)) {
        reclaimed++;
        const lat = clock.now - Math.max(s.at, quietFrom);
        if (clock.now >= quietFrom) {
          latencies.push(lat);
          const bound = o.boundByKind[s.kind] ?? 0;
          if (lat > bound)
            late.push(`${s.kind} ${k} reclaimed after ${lat / MIN} min (bound ${bound / MIN})`);
        }
        since.delete(k);
      }
    }
  };
  world.setInterleave(() => {
    if (clock.now < quietFrom && rng.chance(o.interleave)) {
      world.step(rng, clock.now);
      steps++;
    }
  });
  const total = o.activeMinutes + Math.max(...Object.values(o.boundByKind)) / MIN + 1;
  for (let minute = 0; minute <= total; minute++) {
    clock.now += MIN;
    const active = minute < o.activeMinutes;
    if (!active && quietFrom === Number.POSITIVE_INFINITY) {
      quietFrom = clock.now;
      world.setFaults(0, rng);
      world.settle(clock.now);
    } else if (active) world.setFaults(o.faultRate, rng);
    world.tick(clock.now);
    if (active) {
      const n = rng.int(0, o.eventsPerMinute);
      for (let i = 0; i < n; i++) {
        world.step(rng, clock.now);
        steps++;
      }
    }
    track();
    if (minute % o.intervalMinutes === 0) {
      await cleaner.run(clock.now);
      steps++;
      track();
    }
  }
  const unreclaimed: string[] = [];
  for (const [k, s] of since) {
    const bound = o.boundByKind[s.kind] ?? 0;
    if (clock.now - Math.max(s.at, quietFrom) > bound)
      unreclaimed.push(
        `${s.kind} ${k} orphaned since ${Math.round((s.at - quietFrom) / MIN)} min after quiet`,
      );
  }
  const worst = latencies.length ? Math.max(...latencies) : 0;
  return {
    seed: o.seed,
    steps,
    violations: world.violations,
    orphans: reclaimed + since.size,
    reclaimed,
    unreclaimed: [...unreclaimed, ...late],
    worstLatencyMs: worst,
  };
}

/** A simulator policy: the grace given, no blast-radius limits (the simulator checks safety itself). */
export const simPolicy = (graceMs: number): Policy => ({
  graceMs,
  maxDeletions: 1000,
  maxDeletionPercent: 100,
  maxEvidenceDropPercent: 100,
});
