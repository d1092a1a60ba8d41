/** Where the candidates of a run sit, for its result, its metrics and the stuck-collector alert. */
import type { AnyFunction } from '../contract/index.ts';
import type { Decision, Snapshot } from '../engine/types.ts';
import type { RunResult } from './result.ts';

/**
 * Where the candidates of a run sit (a network, a pool, a namespace, a project), by kind:
 * how many are pending or confirmed there, and how many the act phase deleted; the age of
 * the oldest candidate, and the grace, for the alert on a collector that is stuck.
 */
export function placesOf(
  fn: Pick<AnyFunction, 'placeOf'>,
  snapshot: Snapshot,
  decision: Decision,
  now: number,
  graceMs: number,
) {
  const cands = decision.nextState.candidates;
  const at = new Map<string, string>();
  for (const t of snapshot.targets)
    if (Object.hasOwn(cands, t.key)) at.set(t.key, `${t.kind}\u0000${fn.placeOf(t)}`);
  let oldest = Number.POSITIVE_INFINITY;
  for (const c of Object.values(cands)) oldest = Math.min(oldest, c.firstUnusedAt);
  const confirmed = new Set(decision.actions.map((a) => a.target.key));
  return {
    result(
      deleted: readonly string[] = [],
    ): Pick<RunResult, 'places' | 'oldestCandidateAgeSeconds' | 'graceSeconds'> {
      const gone = new Set(deleted);
      const tally = new Map<string, { candidates: number; confirmed: number; deleted: number }>();
      for (const [key, kp] of at) {
        const row = tally.get(kp) ?? { candidates: 0, confirmed: 0, deleted: 0 };
        row.candidates++;
        if (confirmed.has(key)) row.confirmed++;
        if (gone.has(key)) row.deleted++;
        tally.set(kp, row);
      }
      return {
        places: [...tally].map(([kp, n]) => {
          const [kind, place] = kp.split('\u0000') as [string, string];
          return { kind, place, ...n };
        }),
        oldestCandidateAgeSeconds: Number.isFinite(oldest) ? Math.max(0, (now - oldest) / 1000) : 0,
        graceSeconds: graceMs / 1000,
      };
    },
  };
}
