/**
 * What a run hands back and tells: its result, the hooks told of its outcomes, and the sink
 * of its diff log. Below the runtime: metrics, notifications and the entry points import these, never run().
 */
import type { DiffEvent, DiffSummary, Target } from './engine/types.ts';
import type { ExitCode } from './exit.ts';

export type RunOutcome = 'ok' | 'aborted' | 'refused' | 'locked' | 'failed' | 'approval' | 'held';

export type RunResult = Readonly<{
  function: string;
  runId: string;
  snapshotId?: string;
  outcome: RunOutcome;
  exitCode: ExitCode;
  dryRun: boolean;
  summary?: DiffSummary;
  confirmed: readonly string[];
  deleted: readonly string[];
  /** How many of `deleted` were of each target kind. */
  deletedByKind: Readonly<Record<string, number>>;
  /**
   * Confirmed targets found gone when deleted (a 404: their producer or an operator removed
   * them first): not twopass's deletions, not in `deleted`, no Event; each a `resource.gone` line.
   */
  alreadyGone?: readonly string[];
  skipped: readonly string[];
  failed: readonly string[];
  /** Confirmed deletions held, not attempted (a producer that hands out from memory is running). */
  held: readonly string[];
  /** Of `deleted`, by kind, those the server had answered "deleted" for but whose removal another cleaner may have made too. */
  unprovenByKind?: Readonly<Record<string, number>>;
  /** The evidence counts of the run's snapshot, by source (absent when no snapshot was taken). */
  evidence?: Readonly<Record<string, number>>;
  /** The counts the evidence guard compared them with: the last accepted snapshot's (absent on a first run). */
  evidenceBaseline?: Readonly<Record<string, number>>;
  /** The requests the run sent, by API (`kubernetes`, `openstack`, `webhook`); every attempt counts. */
  requests?: Readonly<Record<string, number>>;
  /** The run-level events of the decision (evidence accepted, run refused or aborted), for commands that report them. */
  notices: readonly DiffEvent[];
  /**
   * Where the run's candidates sit, by kind and place (a network, a pool, a namespace, a
   * project): pending or confirmed there, and deleted by this run.
   */
  places?: readonly Readonly<{
    kind: string;
    place: string;
    candidates: number;
    confirmed: number;
    deleted: number;
  }>[];
  /** The age of the oldest candidate (0 when none), and the function's grace: a collector that is stuck. */
  oldestCandidateAgeSeconds?: number;
  graceSeconds?: number;
  /** Side outputs that failed (a snapshot file, a report, a state save after deleting, a hook): logged, counted here. */
  sideFailures: number;
  error?: string;
  durationMs: number;
}>;

/** What a phase that ends the run says; `run()` adds the rest. */
export type Finish = Pick<RunResult, 'outcome' | 'exitCode'> &
  Partial<Omit<RunResult, 'durationMs' | 'function' | 'runId' | 'dryRun' | 'sideFailures'>>;

export type RunHooks = Readonly<{
  deleted?: (target: Target, detail: string | undefined) => Promise<void> | void;
  finished?: (result: RunResult) => Promise<void> | void;
  /** A run's notification could not be delivered (counted in metrics). */
  notifyFailed?: (fn: string) => void;
}>;

/**
 * The diff log is the audit trail of what a run deleted. `lost()` says why it is gone (a
 * closed pipe), `signal` aborts when it goes, and `warn` reaches the operator another way
 * (stderr): a run whose log is gone does not start deleting, and one that is deleting stops.
 */
export type LogSink = Readonly<{
  lost: () => string | undefined;
  signal: AbortSignal;
  warn: (message: string) => void;
  /**
   * Resolves once what was written so far has been handed to the output (a closed pipe's
   * error surfaces by then, and `lost()` says so): the act phase waits on it after the
   * `delete.started` lines of each unit, before the unit's first write.
   */
  barrier: () => Promise<void>;
}>;
