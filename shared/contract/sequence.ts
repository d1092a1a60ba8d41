/**
 * What a batched kind supplies to the act sequence, which the runtime runs for it
 * (shared/runtime/sequence.ts): per step, how to plan a write from fresh evidence (which
 * targets it removes, each with its tombstone as just re-read, and which the re-check keeps),
 * the write with its server-side precondition, how to read back what the write did, and
 * whether a failed write only lost to another writer. The runtime owns the rest: the worker
 * pool, the tombstones made durable before the write, the pause and the new plan after a
 * write that lost, the holds, the stop, and the outcome of every target.
 */

import type { Target } from '../engine/types.ts';
import type { BatchResults } from './batch.ts';
import type { BatchItemResult, Typed } from './run.ts';

/** A target the write removes, with its tombstone: the object as the plan just re-read it. */
export type Removal = Readonly<{
  target: Pick<Target, 'key' | 'kind' | 'name'>;
  object: unknown;
  restore?: unknown;
}>;

/** A line about a target already decided (a deleted DanmEp's addresses): added to its detail. */
export type Note = readonly [key: string, text: string];

/** What a plan or a read-back settles: outcomes of targets, notes, and what later steps need. */
export type Settled = Readonly<{
  results?: readonly BatchItemResult[];
  notes?: readonly Note[];
  /** Handed to the plans of later steps (the addresses of the DanmEps a step deleted). */
  carry?: readonly unknown[];
}>;

/** What the write answered, or why its answer could not be read (it may have happened). */
export type Answer = Readonly<{ answer: unknown } | { unknown: string }>;

/** One write of a step, planned on fresh evidence. */
export type WritePlan<R, W> = Settled &
  Readonly<{
    /** What the write removes; their tombstones are durable before it is sent. */
    removing: readonly Removal[];
    /** Checked after the tombstones, right before the write: a reason holds what it would remove. */
    gate?(): Promise<string | undefined>;
    /** The write, with its precondition (absent: nothing to write). */
    write?(writer: W, signal: AbortSignal): Promise<unknown>;
    /** What the write did, from its answer when that shows it, else from a read. */
    readBack?(reader: R, answer: Answer): Promise<Settled>;
    /** What a write that lost to other writers on every attempt leaves (default: each removal skipped, contended). */
    lost?(attempts: number): Settled;
    /** What is left when the write is not tried (its tombstones could not be written), besides the removals failed. */
    notWritten?(why: string): Settled;
  }>;

export type Step<D, R, W> = Readonly<{
  /** The targets of the batch this step writes for. */
  takes(t: Typed<D>): boolean;
  /** One write per target, up to the run's concurrency at once (default: one write for all of them). */
  each?: boolean;
  /** It plans even without a target of its own, when an earlier step carried something. */
  forCarried?: boolean;
  /** Writes tried before a contended write is left for the next run (default 5). */
  attempts?: number;
  /** True when a failed write only lost to another writer: the runtime pauses and plans again. */
  contended?(err: unknown): boolean;
  /** A plan of the write for `targets` (those of the step not yet decided): attempt 1, 2... */
  plan(
    reader: R,
    targets: readonly Typed<D>[],
    attempt: number,
    carried: readonly unknown[],
  ): Promise<WritePlan<R, W>>;
  /** After every write of the step: may stop the run (ctx.stop) and amend the results of what was written. */
  after?(written: readonly string[], results: BatchResults): Promise<void>;
}>;
