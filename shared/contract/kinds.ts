/** What a function declares (its kinds, its spec) and what `defineFunction` makes of it. */
import type { z } from 'zod';
import type { SourceMeta, Target } from '../engine/types.ts';
import type { Access } from './access.ts';
import type {
  BatchItemResult,
  ConnectContext,
  EventNote,
  FunctionContext,
  FunctionDefaults,
  Observation,
  Ports,
  RecheckResult,
  Removed,
  RemoveResult,
  RestoreContext,
  RestoreResult,
  RunContext,
  Typed,
} from './run.ts';
import type { Step } from './sequence.ts';
import type { Tombstone } from './tombstone.ts';
import type { Touch } from './touch.ts';

/** A function as the run loop calls it: built by `defineFunction`, dispatching by target kind. */
export interface TwopassFunction<R, W> {
  readonly name: string;
  readonly description: string;
  readonly defaults: FunctionDefaults;
  /** What `explain` tells about a target of a kind (a limit of what the evidence can show). */
  readonly kindNotes: Readonly<Record<string, string>>;
  /** Per kind: why such a target is unused, and what its removal does (reports for approval). */
  readonly kindReport: Readonly<Record<string, Readonly<{ unused: string; removal: string }>>>;
  /** The strict schema of `functions.<name>.settings`, checked when the config loads. */
  readonly settingsSchema: z.ZodObject;
  /** What it may read and write in a cluster: its RBAC, generated, and what the act phase lets through. */
  readonly access: Access;
  /** Deletions in flight at once for this function (default: the run's concurrency). */
  readonly maxConcurrency?: number;
  /** Finds and reports, never deletes: every run of it is a dry run, `--apply` or not. */
  readonly reportOnly?: boolean;
  /** Builds the reader and writer ports; without it both are the Kubernetes client. */
  connect?(ctx: ConnectContext): Promise<Ports<R, W>>;
  /** Lists targets first, then evidence; throws ListIncompleteError when a list cannot be proven complete. */
  observe(reader: R, ctx: FunctionContext): Promise<Observation>;
  /** Re-reads the target and the narrow evidence for it just before removal. */
  recheck(reader: R, target: Target, ctx: FunctionContext): Promise<RecheckResult>;
  /** Removes with a server-side precondition. */
  remove(writer: W, target: Target, ctx: FunctionContext): Promise<RemoveResult>;
  /** A follow-up read: true when the target is really gone. */
  confirmGone(reader: R, target: Target, ctx: FunctionContext): Promise<boolean>;
  /**
   * What removing the target may write (its kind's declaration): the act phase refuses any
   * other write, and any write before the target's tombstone is durable (shared/runtime/guard.ts).
   */
  touchesOf(target: Target): readonly Touch[];
  /** Targets whose removal writes the same object share a batch key (undefined: one by one). */
  batchOf(target: Target): string | undefined;
  /**
   * The steps of one batch's removal, as its kind plans them (the runtime runs them:
   * shared/runtime/sequence.ts); `refused`: targets that cannot be in this batch.
   */
  stepsOf(
    reader: R,
    targets: readonly Target[],
    ctx: FunctionContext,
  ): Readonly<{
    steps: readonly Step<unknown, R, W>[];
    /** The targets of the batch, their data as their kind's schema reads it. */
    targets: readonly Typed<unknown>[];
    refused: BatchItemResult[];
  }>;
  /** The Event for one removed target, or for the removed targets of one batch. */
  eventFor(removed: readonly { target: Target; detail?: string | undefined }[]): EventNote | undefined;
  /** Where a target's leak sits (a network, a pool, a namespace, a project): a metrics label. */
  placeOf(target: Target): string;
  /** Brings a deleted target back from its tombstone, when that cannot collide with what exists now. */
  restore(reader: R, writer: W, tombstone: Tombstone, ctx: RestoreContext): Promise<RestoreResult>;
}

// biome-ignore lint/suspicious/noExplicitAny: the registry holds functions of any port types
export type AnyFunction = TwopassFunction<any, any>;

/** What every target kind declares, single or batched. */
type KindBase<D, R, W, S> = Readonly<{
  /** The schema of the kind's data: checked when a target is built and when it is dispatched. */
  data: z.ZodType<D>;
  /** The grace of this kind when it differs from the function's. */
  graceMs?: number;
  /** What `explain` tells about a target of this kind. */
  note?: string;
  /** Why a target of this kind counts as unused when no evidence holds it (for reviewers' reports). */
  unused: string;
  /** What removing a target of this kind does (for reviewers' reports). */
  removal: string;
  /**
   * Every object removing such a target may write (deleted, or written to free what it held),
   * and which of them take no precondition and why: the act phase lets no other write
   * through, and none before the target's tombstone is durable.
   */
  touches(data: D): readonly Touch[];
  /** The Kubernetes Event of one removal (one per batch for batched kinds). */
  event?(removed: readonly Removed<D>[]): EventNote | undefined;
  /**
   * The object a leak of this kind sits in, for metrics that say where leaks come from (a
   * network, an IP pool, a project); default: the data's namespace.
   */
  place?(data: D): string;
  /** Re-creates a deleted target from its tombstone (absent: such a target cannot be restored). */
  restore?(
    reader: R,
    writer: W,
    tombstone: Tombstone,
    ctx: RunContext<S> & Readonly<{ apply: boolean }>,
  ): Promise<RestoreResult>;
}>;

/**
 * A kind removed one target at a time: the act phase re-checks it, writes its tombstone,
 * removes it with its precondition and reads it back.
 */
export type SingleKind<D, R, W, S> = KindBase<D, R, W, S> &
  Readonly<{
    recheck(reader: R, target: Typed<D>, ctx: RunContext<S>): Promise<RecheckResult>;
    remove(writer: W, target: Typed<D>, ctx: RunContext<S>): Promise<RemoveResult>;
    confirmGone(reader: R, target: Typed<D>, ctx: RunContext<S>): Promise<boolean>;
    batch?: undefined;
  }>;

/**
 * A kind whose targets are removed together, one write of the object they share (a
 * network's bitmap, a pool): its batch re-checks, tombstones, writes and reads back. It has
 * no way to remove one target alone, so none that could go around its batch.
 */
export type BatchedKind<D, R, W, S> = KindBase<D, R, W, S> &
  Readonly<{
    /** Targets of this kind whose removal writes one object: removed together. */
    batch: BatchSpec<D, R, W, S>;
    recheck?: undefined;
    remove?: undefined;
    confirmGone?: undefined;
  }>;

/** How one target kind is re-checked, removed and read back: alone, or in batches. */
export type KindSpec<D, R, W, S> = SingleKind<D, R, W, S> | BatchedKind<D, R, W, S>;

/**
 * Kinds that share one BatchSpec object (and key) are removed together: the kind plans the
 * steps of one batch, the runtime runs them (re-check, tombstone, write, read back).
 */
export type BatchSpec<D, R, W, S> = Readonly<{
  key(data: D): string;
  steps(reader: R, targets: readonly Typed<D>[], ctx: RunContext<S>): readonly Step<D, R, W>[];
}>;

/** Where the keep-mark may be: Kubernetes annotations, cloud tags. */
export type Marks = Readonly<{
  annotations?: Readonly<Record<string, string>> | undefined;
  tags?: readonly string[] | undefined;
}>;

export type TargetInit<D> = Readonly<{
  key: string;
  fingerprint: string;
  name: string;
  createdAt?: number | undefined;
  /** Every object whose keep-mark protects the target. */
  marks?: readonly Marks[];
  /** Handed back at the next observation with the stored candidate (see `RunContext.previous`). */
  note?: string;
  data: D;
}>;

/** What a function says of a target it built: used, or why its use cannot be decided. */
export type Verdict = Readonly<{ used: () => void; indeterminate: (reason: string) => void }>;

export type ListLike = Readonly<{ items: { length: number }; resourceVersion?: string; pages?: number }>;

export type ObserveContext<S, K extends Record<string, unknown>> = RunContext<S> &
  Readonly<{
    /** Records a complete list (targets are listed before evidence). */
    source: (name: string, role: SourceMeta['role'], list: ListLike | { notServed: true }) => void;
    /** Builds a target of a kind (its data checked against the kind's schema). */
    target: <N extends keyof K & string>(kind: N, init: TargetInit<K[N]>) => Verdict;
    /** A target that cannot be read: it is listed, never removed, and says why. */
    unreadable: (kind: keyof K & string, init: Omit<TargetInit<never>, 'data'>, reason: string) => void;
    /** A snapshot-wide reason that makes every target indeterminate. */
    blocker: (reason: string) => void;
    /**
     * A snapshot-wide reason that confirmed deletions must wait: they are held, not deleted,
     * and unlike a blocker the candidates keep their first observation (the grace keeps counting).
     */
    hold: (reason: string) => void;
  }>;

export type FunctionSpec<S extends z.ZodObject, R, W, K extends Record<string, unknown>> = Readonly<{
  name: string;
  description: string;
  settings: S;
  defaults: FunctionDefaults;
  /**
   * Every resource it lists, reads or writes in a cluster, and with which verbs: its RBAC in
   * every deployment is generated from this (`npm run manifests`), and the act phase refuses
   * a Kubernetes write it does not allow.
   */
  access: Access;
  kinds: { readonly [N in keyof K]: KindSpec<K[N], R, W, z.output<S>> };
  maxConcurrency?: number;
  reportOnly?: boolean;
  connect?(ctx: ConnectContext<z.output<S>>): Promise<Ports<R, W>>;
  observe(reader: R, ctx: ObserveContext<z.output<S>, K>): Promise<void>;
}>;
