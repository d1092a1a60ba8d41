/**
 * The contract every function is written against. A function declares its settings (a
 * zod schema), its target kinds (each with the schema of its data, its re-check, its
 * removal, its read-back and its grace) and one `observe`. `defineFunction` turns that
 * into what the run loop calls: targets are built through the context, so their data is
 * checked against their kind's schema when they are built and again when they are
 * dispatched; nothing downstream casts. The runtime owns what every function would
 * otherwise repeat: source metadata, the keep-mark, the Kubernetes Events of a deletion,
 * settings parsing and the FaaS handler.
 */

export { ConfigError, ListIncompleteError, messageOf, NotInstalledError, TwopassError } from '../errors.ts';
export { type Access, type NamespacedAccess, type PolicyRule, RUNTIME_RULES } from './access.ts';
export { BatchResults, contendedPause } from './batch.ts';
export {
  checkFreshCount,
  EVIDENCE_MAX_AGE_MS,
  EvidenceCache,
  type FreshEvidence,
  type FreshRead,
  freshEvidence,
} from './fresh.ts';
export * from './kinds.ts';
export { asNew, deleteAsObserved, type Observed, recreateAsWas } from './kube.ts';
export * from './run.ts';
export type { Answer, Note, Removal, Settled, Step, WritePlan } from './sequence.ts';
export * from './settings.ts';
export { type Tombstone, type TombstoneEntry, tombstoneSchema } from './tombstone.ts';
export { kubeObject, openStackObject, type Touch } from './touch.ts';

import type { RunContext } from './run.ts';
import type { TombstoneEntry } from './tombstone.ts';

/** True when any of the marks carries the keep-mark. */
export { defineFunction, keepMarked } from './define.ts';

/**
 * Writes the tombstones of targets about to be deleted and returns once they are durable;
 * throws when they cannot be written (or the run gave no writer): none of them may go.
 */
export async function writeTombstones(
  ctx: RunContext<unknown>,
  entries: readonly TombstoneEntry[],
): Promise<void> {
  if (!ctx.tombstone) throw new Error('no tombstone writer in this run: nothing may be deleted');
  await ctx.tombstone(entries);
}
