/** Builders for engine tests: targets, snapshots and policies. */
import type { Policy, Snapshot, SourceMeta, State, Target } from '../../shared/engine/types.ts';
import { emptyState } from '../../shared/engine/types.ts';

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
