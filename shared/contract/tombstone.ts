/**
 * A tombstone: what a deletion removed, exactly as it was re-read just before, and why it
 * was judged unused. The act phase writes it before the deletion (see shared/state/tombstones.ts).
 */
import { z } from 'zod';

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
