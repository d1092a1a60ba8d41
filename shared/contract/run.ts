/** What a run hands a function and what a function hands back: the contract's vocabulary. */
import type { Policy, Snapshot, Target } from '../engine/types.ts';
import type { InvolvedObject } from '../kube/events.ts';
import type { KubeReadWriter } from '../kube/ports.ts';
import type { Time } from '../time.ts';
import type { FreshEvidence } from './fresh.ts';
import type { ParsedSettings } from './settings.ts';
import type { TombstoneEntry } from './tombstone.ts';

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
  /**
   * The candidate the stored state holds for a target key (its fingerprint and note), while
   * observing: a function may carry a fingerprint over only on evidence it checks itself.
   */
  previous?: (key: string) => Readonly<{ fingerprint: string; note?: string }> | undefined;
  /**
   * The run reads nothing of a target in use but that it is (decision 0017): one that is
   * neither keep-marked, nor undecided, nor a stored candidate is counted, and its object
   * dropped as it is built. Absent (explain, a saved snapshot, rules test): every target kept.
   */
  countUsed?: boolean;
  /** The act phase's evidence, shared by its batches and re-read when older than the bound (absent: read every time). */
  fresh?: FreshEvidence;
  /**
   * Every target the act phase was handed, each batch's (absent outside it): a read of
   * shared evidence may keep what their re-checks need (a tombstone) instead of a read each.
   */
  confirmed?: readonly Target[];
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
  /** How many items the snapshot that decided counted of an evidence source (absent outside the act phase). */
  evidenceCount?: (source: string) => number | undefined;
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

// ---- what a function declares ----

/** A target whose data is its kind's. */
export type Typed<D> = Target & Readonly<{ data: D }>;

export type Removed<D> = Readonly<{ target: Typed<D>; detail?: string | undefined }>;
