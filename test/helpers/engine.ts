/** Builders for engine tests: targets, snapshots and policies. */

import { decide } from '../../shared/engine/decide.ts';
import type { Policy, Snapshot, SourceMeta, State, Target } from '../../shared/engine/types.ts';
import { emptyState } from '../../shared/engine/types.ts';
import type { StateStore } from '../../shared/state/store.ts';

export { MINUTE as MIN } from '../../shared/contract/index.ts';

import { MINUTE as MIN } from '../../shared/contract/index.ts';

export const FN = 'test-fn';
export function target(key: string, over: Partial<Target> = {}): Target {
  return { key, kind: 'Thing', fingerprint: `${key}@1`, name: `thing ${key}`, keep: false, ...over };
}

export function policy(over: Partial<Policy> = {}): Policy {
  return {
    graceMs: 10 * MIN,
    maxDeletions: 1000,
    maxDeletionPercent: 100,
    maxEvidenceDropPercent: 100,
    ...over,
  };
}

export function sources(targets: number, evidence: number, complete = true): SourceMeta[] {
  return [
    { name: 'things', role: 'target', count: targets, complete: true },
    {
      name: 'users',
      role: 'evidence',
      count: evidence,
      complete,
      ...(complete ? {} : { reason: 'injected' }),
    },
  ];
}

export function snapshot(
  at: number,
  targets: Target[],
  used: string[] = [],
  over: Partial<Snapshot> = {},
): Snapshot {
  return {
    id: `snap-${at}`,
    function: FN,
    takenAt: at,
    sources: sources(targets.length, used.length + 100),
    targets,
    used,
    indeterminate: [],
    ...over,
  };
}

export function state(): State {
  return emptyState(FN);
}

export function deepFreeze<T>(o: T): T {
  if (o && typeof o === 'object' && !Object.isFrozen(o)) {
    Object.freeze(o);
    for (const v of Object.values(o)) deepFreeze(v);
  }
  return o;
}

/**
 * The evidence guard's acceptance window through a store: four refused runs with a lower
 * evidence count, each saving and loading its state, then one past `acceptEvidenceDropAfter`
 * that accepts the drop on its own. Returns what a test asserts on.
 */
export async function evidenceWindowThroughStore(
  store: StateStore,
): Promise<{ held: (number | undefined)[]; final: string; storedDrop: unknown }> {
  const T = 1_800_000_000_000;
  const ts = [target('a')];
  const p = policy({ maxEvidenceDropPercent: 30, acceptEvidenceDropAfterMs: 40_000 });
  const at = (ms: number, users: number) =>
    snapshot(T + ms, ts, ['a'], {
      sources: [
        { name: 'things', role: 'target', count: 1, complete: true },
        { name: 'pods', role: 'evidence', count: users, complete: true },
      ],
    });
  const step = async (ms: number, users: number) => {
    const loaded = await store.load(FN);
    const d = decide(loaded.state, at(ms, users), p, T + ms);
    await store.save(FN, d.nextState, loaded.version);
    return d;
  };
  await step(0, 6);
  const held: (number | undefined)[] = [];
  for (const ms of [10_000, 20_000, 30_000, 40_000]) {
    const d = await step(ms, 3);
    if (d.diff.outcome !== 'refused') return { held, final: d.diff.outcome, storedDrop: undefined };
    held.push(d.nextState.evidenceDrop?.firstSeenAt);
  }
  const storedDrop = (await store.load(FN)).state.evidenceDrop;
  const last = await step(55_000, 3);
  return { held, final: last.diff.outcome, storedDrop };
}
