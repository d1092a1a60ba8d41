/** Validation of stored state: what comes back from a store is untrusted input. */

import { z } from 'zod';
import { STATE_SCHEMA_VERSION, type State } from '../engine/types.ts';
import { issuesText } from '../errors.ts';
import { resetCommand, StateCorruptError } from './errors.ts';

const candidate = z.object({
  kind: z.string(),
  name: z.string(),
  fingerprint: z.string(),
  firstUnusedAt: z.number().finite(),
  lastUnusedAt: z.number().finite(),
  observations: z.number().int().positive(),
  note: z.string().optional(),
});

const stateSchema = z.object({
  schemaVersion: z.literal(STATE_SCHEMA_VERSION),
  function: z.string().min(1),
  lastSnapshot: z
    .object({
      id: z.string(),
      takenAt: z.number().finite(),
      counts: z.record(z.string(), z.number()),
      evidence: z.record(z.string(), z.literal(true)).optional(),
    })
    .optional(),
  /** The lower evidence counts held since `firstSeenAt` (the automatic acceptance's window). */
  evidenceDrop: z
    .object({
      firstSeenAt: z.number().finite(),
      lastSeenAt: z.number().finite(),
      counts: z.record(z.string(), z.number()),
      snapshots: z.number().int().positive(),
    })
    .optional(),
  candidates: z.record(z.string(), candidate),
});

// Every field of State is in the schema: a field the schema does not know would be dropped
// on every load, silently (the evidence guard's window was, and it never accepted a drop).
type Missing = Exclude<keyof State, keyof z.infer<typeof stateSchema>>;
const _everyField: [Missing] extends [never] ? true : Missing = true;
void _everyField;

export function parseState(raw: unknown, fn: string, where: string, store: string): State {
  if (
    raw &&
    typeof raw === 'object' &&
    'schemaVersion' in raw &&
    (raw as { schemaVersion: unknown }).schemaVersion !== STATE_SCHEMA_VERSION
  ) {
    throw new StateCorruptError(
      `${where}: state schemaVersion ${String((raw as { schemaVersion: unknown }).schemaVersion)} is not supported (expected ${STATE_SCHEMA_VERSION}); run \`${resetCommand(fn, store)}\` to start observation over`,
    );
  }
  const r = stateSchema.safeParse(raw);
  if (!r.success) {
    throw new StateCorruptError(
      `${where}: stored state is not valid (${issuesText(r.error, { first: true })}); nothing will be deleted until it is repaired or reset with \`${resetCommand(fn, store)}\``,
    );
  }
  if (r.data.function !== fn) {
    throw new StateCorruptError(`${where}: state belongs to function ${r.data.function}, not ${fn}`);
  }
  return r.data as State;
}
