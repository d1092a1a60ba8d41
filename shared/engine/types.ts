/**
 * Snapshot and state types of the engine. Everything here is plain data: it
 * serialises to JSON unchanged, and the engine never mutates it.
 */

/** A deletable resource as one snapshot saw it. */
export type Target = Readonly<{
  /** Identity: a Kubernetes UID or a cloud id (never a name). */
  key: string;
  /** The target kind, e.g. `DanmEp`; policies may give kinds their own grace. */
  kind: string;
  /** Changes whenever anything the decision used changes (resourceVersion, revision, fields). */
  fingerprint: string;
  /** Creation time in epoch ms, when the source says it. */
  createdAt?: number;
  /** A human name for logs, e.g. `default/ss-cinfo-0 eth0`. */
  name: string;
  /** Carries the keep-mark (`twopass.io/keep`): never a candidate. */
  keep: boolean;
  /** Function-specific facts needed to re-check and remove it. */
  data?: unknown;
  /**
   * What the function needs back at its next observation to carry the fingerprint over
   * (a leaked DANM bit: the network's resourceVersion its history was verified through).
   * Stored with the candidate and handed back; never compared.
   */
  note?: string;
}>;

/** What one list call (or list group) of a snapshot returned. */
export type SourceMeta = Readonly<{
  name: string;
  /** `target` sources are listed first, `evidence` after; a source can be both (DanmEps hold bits). */
  role: 'target' | 'evidence' | 'target+evidence';
  count: number;
  listVersion?: string;
  pages?: number;
  complete: boolean;
  reason?: string;
}>;

export type Indeterminate = Readonly<{ key: string; reason: string }>;

export type Snapshot = Readonly<{
  id: string;
  function: string;
  takenAt: number;
  sources: readonly SourceMeta[];
  targets: readonly Target[];
  /**
   * Targets in use that the run only counts (decision 0017): neither keep-marked, nor
   * undecided, nor a stored candidate, so that a decision reads nothing of them but that
   * they are in use. Their keys are in `used`; their objects are not in `targets`. Absent: 0.
   */
  counted?: number;
  /** Keys of targets with evidence of use. */
  used: readonly string[];
  /** Targets whose use cannot be decided, with the reason. */
  indeterminate: readonly Indeterminate[];
  /** Snapshot-wide reasons that make every target indeterminate (e.g. a Service being placed). */
  blockers?: readonly string[];
  /**
   * Why confirmed deletions must wait (a producer that hands out from memory is running):
   * the decision is made as usual and candidates keep counting, but nothing is deleted.
   */
  holds?: readonly string[];
}>;

export type Candidate = Readonly<{
  kind: string;
  name: string;
  fingerprint: string;
  firstUnusedAt: number;
  lastUnusedAt: number;
  observations: number;
  /** The target's note as of its last unused observation (Target.note). */
  note?: string;
}>;

export type LastSnapshot = Readonly<{
  id: string;
  takenAt: number;
  counts: Readonly<Record<string, number>>;
  /** Names of the sources that are evidence (their counts are guarded against sharp drops). */
  evidence?: Readonly<Record<string, true>>;
}>;

export const STATE_SCHEMA_VERSION = 1;

/** Lower evidence counts seen in consecutive complete snapshots, not yet the baseline. */
export type EvidenceDrop = Readonly<{
  firstSeenAt: number;
  lastSeenAt: number;
  counts: Readonly<Record<string, number>>;
  snapshots: number;
}>;

export type State = Readonly<{
  schemaVersion: typeof STATE_SCHEMA_VERSION;
  function: string;
  lastSnapshot?: LastSnapshot;
  evidenceDrop?: EvidenceDrop;
  candidates: Readonly<Record<string, Candidate>>;
}>;

export type Policy = Readonly<{
  /** Minimum time between the first and the confirming unused observation. */
  graceMs: number;
  /** Per-kind grace overrides. */
  kindGraceMs?: Readonly<Record<string, number>>;
  /** Targets younger than this are never confirmed (defaults to graceMs). */
  minAgeMs?: number;
  maxDeletions: number;
  maxDeletionPercent: number;
  /** maxDeletionPercent applies only when more than this many deletions are confirmed (default 0). */
  minDeletionsForPercent?: number;
  /** Refuse when the evidence count fell by more than this percentage since the last snapshot. */
  maxEvidenceDropPercent: number;
  /**
   * Accept a lower evidence count as the new baseline once it was seen in consecutive
   * complete snapshots spanning at least this long (never a drop to zero); undefined: only
   * `twopass state accept-evidence` accepts it.
   */
  acceptEvidenceDropAfterMs?: number;
}>;

export type DeleteAction = Readonly<{ type: 'delete'; target: Target; candidate: Candidate }>;

export type DiffEvent = Readonly<
  | { event: 'candidate.new'; key: string; kind: string; name: string }
  | {
      event: 'candidate.pending';
      key: string;
      kind: string;
      name: string;
      observations: number;
      timeLeftMs: number;
      waitingFor: string;
    }
  | { event: 'candidate.rescued'; key: string; kind: string; name: string; unusedForMs: number }
  | { event: 'candidate.reset'; key: string; kind: string; name: string; reason: string }
  | { event: 'target.indeterminate'; key: string; kind: string; name: string; reason: string }
  | {
      event: 'candidate.confirmed';
      key: string;
      kind: string;
      name: string;
      unusedForMs: number;
      observations: number;
    }
  | {
      event: 'run.refused';
      reason: string;
      /** Which guards refused (a bounded set, for metrics): the reason says how. */
      guards: readonly RefusalGuard[];
    }
  | {
      event: 'evidence.accepted';
      how: 'command' | 'automatic';
      counts: Readonly<Record<string, { was: number; now: number }>>;
      reason: string;
    }
  | { event: 'run.aborted'; reason: string }
>;

/** The blast-radius guards that can refuse a run. */
export const REFUSAL_GUARDS = ['evidence-drop', 'max-deletions', 'max-deletion-percent'] as const;
export type RefusalGuard = (typeof REFUSAL_GUARDS)[number];

export type DiffSummary = Readonly<{
  targets: number;
  used: number;
  kept: number;
  indeterminate: number;
  newCandidates: number;
  pending: number;
  rescued: number;
  reset: number;
  confirmed: number;
}>;

export type Decision = Readonly<{
  actions: readonly DeleteAction[];
  nextState: State;
  diff: Readonly<{
    events: readonly DiffEvent[];
    summary: DiffSummary;
    outcome: 'ok' | 'aborted' | 'refused';
  }>;
}>;

export function emptyState(fn: string): State {
  return { schemaVersion: STATE_SCHEMA_VERSION, function: fn, candidates: {} };
}

export function isComplete(snapshot: Snapshot): boolean {
  return snapshot.sources.length > 0 && snapshot.sources.every((s) => s.complete);
}
