/**
 * The interface a function implements. Observing gets the reader port; only
 * removal gets the writer port, so an observation can never delete.
 */
import type { Indeterminate, Policy, SourceMeta, Target } from '../engine/types.ts';

export type FunctionContext = Readonly<{
  /** The run's clock reading at the snapshot. */
  now: number;
  signal: AbortSignal;
  /** Function-specific configuration (scope, project, namespaces...). */
  settings: Readonly<Record<string, unknown>>;
  /** Log a function-specific note into the run's diff log. */
  note: (event: string, fields: Record<string, unknown>) => void;
}>;

export type Observation = Readonly<{
  sources: readonly SourceMeta[];
  targets: readonly Target[];
  used: readonly string[];
  indeterminate: readonly Indeterminate[];
  blockers?: readonly string[];
}>;

export type RecheckResult = Readonly<{ ok: true } | { ok: false; reason: string }>;

export type RemoveResult = Readonly<
  | { outcome: 'deleted'; detail?: string }
  | { outcome: 'gone'; detail?: string }
  | { outcome: 'skipped'; reason: string }
>;

/** The outcome of one target of a batch removal; a batch result is read back by the function itself. */
export type BatchItemResult = Readonly<
  { key: string } & (
    | { outcome: 'deleted'; detail?: string }
    | { outcome: 'gone'; detail?: string }
    | { outcome: 'skipped'; reason: string }
    | { outcome: 'failed'; error: string }
  )
>;

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
  acceptEvidenceDropAfterMs: 60 * 60_000,
} as const;

export type FunctionDefaults = Policy &
  Readonly<{
    schedule: string /** false: runs only when the config enables it (it needs settings). */;
    enabled?: boolean;
  }>;

/** What a function may use to build its ports (the entry point's environment, never read below). */
export type ConnectContext = Readonly<{
  kube: import('../kube/client.ts').KubeHttpClient;
  settings: Readonly<Record<string, unknown>>;
  env: Readonly<Record<string, string | undefined>>;
  clock: () => number;
  callTimeoutMs: number;
  pageSize: number;
}>;

export type Ports<R, W> = Readonly<{ reader: R; writer: W; close: () => Promise<void> }>;

export interface TwopassFunction<R, W> {
  /** Builds the reader and writer ports; by default both are the Kubernetes client. */
  connect?(ctx: ConnectContext): Promise<Ports<R, W>>;
  readonly name: string;
  readonly description: string;
  readonly defaults: FunctionDefaults;
  /** What `explain` tells about a target of a kind (a limit of what the evidence can show). */
  readonly kindNotes?: Readonly<Record<string, string>>;
  /** A strict schema of `functions.<name>.settings`, checked when the config loads. */
  readonly settingsSchema?: import('zod').ZodType<Record<string, unknown>>;
  /** Deletions in flight at once for this function (default: the run's concurrency). */
  readonly maxConcurrency?: number;
  /** Lists targets first, then evidence; throws (ListIncompleteError) when a list cannot be proven complete. */
  observe(reader: R, ctx: FunctionContext): Promise<Observation>;
  /** Re-reads the target and the narrow evidence for it just before removal. */
  recheck(reader: R, target: Target, ctx: FunctionContext): Promise<RecheckResult>;
  /** Removes with a server-side precondition. */
  remove(writer: W, target: Target, ctx: FunctionContext): Promise<RemoveResult>;
  /** A follow-up read: true when the target is really gone. */
  confirmGone(reader: R, target: Target, ctx: FunctionContext): Promise<boolean>;
  /**
   * Targets whose removal writes the same object (the bits of one network, the
   * allocations of one pool) share a batch key: the run loop hands them to
   * `removeBatch` together instead of racing their writes.
   */
  batchOf?(target: Target): string | undefined;
  /**
   * Re-checks every target of one batch against one fresh read of the object and of
   * the evidence, removes those still unused in one preconditioned write (a conflict
   * re-reads and re-checks), and reads the object back: one result per target.
   */
  removeBatch?(
    reader: R,
    writer: W,
    targets: readonly Target[],
    ctx: FunctionContext,
  ): Promise<BatchItemResult[]>;
}

// biome-ignore lint/suspicious/noExplicitAny: the registry holds functions of any port types
export type AnyFunction = TwopassFunction<any, any>;
