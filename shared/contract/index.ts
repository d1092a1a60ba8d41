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

import type { z } from 'zod';
import type { Policy, Snapshot, SourceMeta, Target } from '../engine/types.ts';
import type { InvolvedObject } from '../kube/events.ts';
import type { KubeReadWriter } from '../kube/ports.ts';
import type { FreshEvidence } from './fresh.ts';
import type { Tombstone, TombstoneEntry } from './tombstone.ts';

export { ConfigError, ListIncompleteError, messageOf, NotInstalledError, TwopassError } from '../errors.ts';
export { type Tombstone, type TombstoneEntry, tombstoneSchema } from './tombstone.ts';

import type { Time } from '../time.ts';

export { type Access, type NamespacedAccess, type PolicyRule, RUNTIME_RULES } from './access.ts';
export { BatchResults, contendedPause } from './batch.ts';
export type { Answer, Note, Removal, Settled, Step, WritePlan } from './sequence.ts';

import type { Step } from './sequence.ts';

export { kubeObject, openStackObject, type Touch } from './touch.ts';

import type { Access } from './access.ts';

import type { Touch } from './touch.ts';

export {
  checkFreshCount,
  EVIDENCE_MAX_AGE_MS,
  EvidenceCache,
  type FreshEvidence,
  type FreshRead,
  freshEvidence,
} from './fresh.ts';
export { asNew, deleteAsObserved, type Observed, recreateAsWas } from './kube.ts';
export * from './settings.ts';

import type { ParsedSettings } from './settings.ts';

export const MINUTE = 60_000;
/** The keep-mark: an annotation (any value but "false") or a cloud tag of this name. */
export const KEEP_MARK = 'twopass.io/keep';

/**
 * Blast-radius defaults sized for the Kubernetes envelope (150,000 pods, 5,000 nodes, 110
 * pods a node): losing a few nodes leaks hundreds of addresses, so up to 1,000 deletions a
 * run pass; the percentage limit catches a broken lister, but only above 20 deletions, so
 * that one leak in a pool of four is not 25% of anything that matters; a lower evidence
 * count held for an hour of consecutive complete snapshots becomes the new baseline (never
 * a drop to zero). See the README.
 */
export const GUARD_DEFAULTS = {
  maxDeletions: 1000,
  maxDeletionPercent: 20,
  minDeletionsForPercent: 20,
  maxEvidenceDropPercent: 30,
  acceptEvidenceDropAfterMs: 60 * MINUTE,
} as const;

// ---- what the run loop sees ----

/** What a run hands a function: its clock reading at the snapshot, its signal, its settings. */
export type RunContext<S = Readonly<Record<string, unknown>>> = Readonly<{
  now: number;
  signal: AbortSignal;
  settings: S;
  /** A function-specific line in the run's diff log (a warning when something needs a look). */
  note: (event: string, fields: Record<string, unknown>, level?: 'info' | 'warn') => void;
  /** The act phase's evidence, shared by its batches and re-read when older than the bound (absent: read every time). */
  fresh?: FreshEvidence;
  /** Writes a batch may have in flight at once (absent: one at a time). */
  concurrency?: number;
  /**
   * Writes the tombstones of targets about to be deleted (each as re-read at its re-check)
   * and returns once they are durable; throws when they cannot be written, and then none
   * of them may be deleted. The act phase gives it; a batch calls it before its write.
   */
  tombstone?: (entries: readonly TombstoneEntry[]) => Promise<void>;
  /**
   * Ends the act phase early and says why (a producer that hands out from memory started
   * while deleting): units not yet begun are held, and the run ends `held` (exit 1 when
   * something was deleted before). The act phase gives it.
   */
  stop?: (reason: string) => void;
  /**
   * The act phase's check of a fresh evidence list against the snapshot that decided: a
   * reason when `count` items of the source named `source` (as `ctx.source` named it) is a
   * larger drop than the evidence guard allows (a list that cannot be the cluster's, such
   * as another resource's metadata-only list, is not absence). Absent outside the act phase.
   */
  evidenceFloor?: (source: string, count: number) => string | undefined;
  /** The run's clock's sleep (a pause between attempts of a contended write); absent: the real clock. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
}>;

/** The runtime's view of the context: settings parsed once, where the config loaded. */
export type FunctionContext = RunContext<ParsedSettings>;

/** What one observation returns: a snapshot without its id, function and time (the run adds them). */
export type Observation = Omit<Snapshot, 'id' | 'function' | 'takenAt'>;

/**
 * A re-check's answer. `before`: the target as it was just re-read (its tombstone);
 * `restore`: further facts a restore needs (absent `before`, the tombstone holds the target's data).
 */
export type RecheckResult = Readonly<
  { ok: true; before?: unknown; restore?: unknown } | { ok: false; reason: string }
>;

/**
 * A further resource a removal deleted, or had to leave, besides the target itself (the
 * floating IP of a port): each is its own counted outcome in the logs, metrics and Events.
 */
export type RemovedPart = Readonly<{
  kind: string;
  key: string;
  name: string;
  /** `left`: kept on purpose (in use, changed); `failed`: an error kept it (the run exits 1). */
  outcome: 'deleted' | 'gone' | 'left' | 'failed';
  detail: string;
}>;

export type RemoveResult = Readonly<
  /**
   * `unproven`: the server answered deleted, but another cleaner may have deleted it at the
   * same moment (both DELETEs answered 204): told as gone, with no Event claiming it.
   * `shownGone`: the DELETE's own answer shows the object of the target's UID gone (a
   * preconditioned DELETE's `deleted`, decision 0007): the runtime does not read it back.
   */
  | {
      outcome: 'deleted';
      detail?: string;
      parts?: readonly RemovedPart[];
      unproven?: boolean;
      shownGone?: boolean;
    }
  | { outcome: 'gone'; detail?: string; parts?: readonly RemovedPart[] }
  /**
   * `contended`: nothing was judged, the write only lost to other writers every time (a
   * pool or network written faster than it could be re-read and written); the candidate
   * keeps its age, so the next run that confirms it tries again at once.
   */
  | { outcome: 'skipped'; reason: string; parts?: readonly RemovedPart[]; contended?: boolean }
  /** Not attempted, and not a failure: the candidate is kept as it is for a later run (law 13). */
  | { outcome: 'held'; reason: string; parts?: readonly RemovedPart[] }
>;

/** The outcome of one target of a batch removal; a batch result is read back by the function itself. */
export type BatchItemResult = Readonly<
  { key: string } & (RemoveResult | { outcome: 'failed'; error: string; parts?: readonly RemovedPart[] })
>;

/** A Kubernetes Event the runtime records after a deletion (a failure to record is logged, never fatal). */
export type EventNote = Readonly<{
  namespace: string;
  involved: InvolvedObject;
  reason: string;
  message: string;
}>;

export type FunctionDefaults = Policy &
  Readonly<{
    schedule: string;
    /** false: runs only when the config enables it (it needs settings). */
    enabled?: boolean;
  }>;

/** What a function may use to build its ports (the entry point's environment, never read below). */
export type ConnectContext<S = ParsedSettings> = Readonly<{
  kube: KubeReadWriter;
  settings: S;
  env: Readonly<Record<string, string | undefined>>;
  time: Time;
  callTimeoutMs: number;
  pageSize: number;
}>;

export type Ports<R, W> = Readonly<{ reader: R; writer: W; close: () => Promise<void> }>;

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

/** `apply: false`: every check, nothing written (what `twopass restore` does without --apply). */
export type RestoreContext = FunctionContext & Readonly<{ apply: boolean }>;

/**
 * `restored` (written), `ready` (a dry run whose checks all passed), or `refused` with why
 * (the address is taken, an object of that name exists...). `ids`: what was created anew.
 */
export type RestoreResult = Readonly<
  | { outcome: 'restored' | 'ready'; detail: string; ids?: Readonly<Record<string, string>> }
  | { outcome: 'refused'; reason: string }
>;

// biome-ignore lint/suspicious/noExplicitAny: the registry holds functions of any port types
export type AnyFunction = TwopassFunction<any, any>;

// ---- what a function declares ----

/** A target whose data is its kind's. */
export type Typed<D> = Target & Readonly<{ data: D }>;

export type Removed<D> = Readonly<{ target: Typed<D>; detail?: string | undefined }>;

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
