/**
 * A tombstone: what a deletion removed, exactly as it was re-read just before, and why it
 * was judged unused. The act phase writes it before the deletion (see shared/state/tombstones.ts).
 */
import { z } from 'zod';
import { issuesText } from '../errors.ts';

/** What a function hands over for one target it is about to delete. */
export type TombstoneEntry = Readonly<{
  key: string;
  kind: string;
  name: string;
  /** The resource as it was re-read just before the deletion (or the entry it held). */
  object: unknown;
  /** Further facts a restore needs (the network, pool or bit it held...). */
  restore?: unknown;
}>;

export const tombstoneSchema = z.object({
  key: z.string(),
  kind: z.string(),
  name: z.string(),
  object: z.unknown(),
  restore: z.unknown().optional(),
  function: z.string(),
  runId: z.string(),
  snapshotId: z.string(),
  fingerprint: z.string(),
  /** Why it was judged unused. */
  reason: z.string(),
  /** When the tombstone was written (ms), just before the deletion. */
  at: z.number(),
});
export type Tombstone = z.output<typeof tombstoneSchema>;

/**
 * What a kind keeps in its tombstones, as schemas: the object removed and the facts a
 * restore needs. Written typed (`satisfies TombstoneObject<...>` where the entry is made),
 * parsed on restore: a tombstone of another shape (damaged, or written by another version)
 * is refused with the field that is wrong, never restored on a guess.
 */
export type TombstonePayload<O extends z.ZodType, R extends z.ZodType> = Readonly<{
  object: O;
  restore: R;
}>;

/** The object and the restore facts of `tomb` as `payload` describes them, or why not. */
export function readPayload<O extends z.ZodType, R extends z.ZodType>(
  tomb: Pick<Tombstone, 'object' | 'restore' | 'kind'>,
  payload: TombstonePayload<O, R>,
): { ok: true; object: z.output<O>; restore: z.output<R> } | { ok: false; reason: string } {
  const o = payload.object.safeParse(tomb.object);
  if (!o.success)
    return {
      ok: false,
      reason: `the tombstone's ${tomb.kind} is not one: ${issuesText(o.error, { first: true })}`,
    };
  const r = payload.restore.safeParse(tomb.restore);
  if (!r.success)
    return {
      ok: false,
      reason: `the tombstone's restore facts of the ${tomb.kind} do not parse: ${issuesText(r.error, { first: true })}`,
    };
  return { ok: true, object: o.data, restore: r.data };
}

/** A Kubernetes object as a tombstone holds it: what a restore needs of it, the rest kept as it was. */
export const kubeObjectPayload = z
  .object({
    metadata: z.object({ name: z.string().min(1), namespace: z.string().min(1).optional() }).passthrough(),
  })
  .passthrough();

/** No restore facts. */
export const noRestoreFacts = z.unknown();

/** An OpenStack resource as a tombstone holds it (as read just before its deletion): its id, the rest kept as it was. */
export const openStackResourcePayload = z.object({ id: z.string().min(1) }).passthrough();
