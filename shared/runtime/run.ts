/**
 * run(): lock -> load state -> observe -> decide -> persist -> act -> finish. The one
 * owner of outcomes: a phase returns or throws a `Stop`, anything else thrown is a failed
 * run; every path ends with `run.finished`, the hooks and the documented exit code.
 */
import { EVIDENCE_MAX_AGE_MS } from '../contract/index.ts';
import type { ParsedSettings } from '../contract/settings.ts';
import type { DiffEvent, Policy, Snapshot } from '../engine/types.ts';
import { ConfigError, messageOf } from '../errors.ts';
import { countingRequests } from '../http/tally.ts';
import type { Logger } from '../log/logger.ts';
import { LockHeldError } from '../state/errors.ts';
import { recordOf } from '../state/history.ts';
import type { LockHandle } from '../state/store.ts';
import { actPhase } from './act.ts';
import { EXIT } from './errors.ts';
import {
  approvedOnly,
  evidenceCountOf,
  evidenceFloorOf,
  front,
  persist,
  type Scope,
  Stop,
  saveSnapshotFile,
  writeReport,
} from './phases.ts';
import { placesOf } from './places.ts';
import type { Report } from './report.ts';
import type { Finish, RunResult } from './result.ts';
import { validateSettings } from './settings.ts';

export type { RunDeps } from './deps.ts';
export type { LogSink, RunHooks, RunOutcome, RunResult } from './result.ts';

import type { RunDeps } from './deps.ts';

export type RunRequest = Readonly<{
  apply: boolean;
  /** Save state in a dry run, so that observations build up. */
  record: boolean;
  policy: Policy;
  /** The function's settings, parsed where the config loaded (absent: its defaults). */
  settings?: ParsedSettings;
  /** Overall deadline for the run. */
  deadlineMs: number;
  /** Deletions in flight at once. */
  concurrency: number;
  /** The bound on the age of the evidence a deletion is re-checked against (default 30 s). */
  evidenceMaxAgeMs?: number;
  /** Accept the current evidence counts as the new baseline (`twopass state accept-evidence`). */
  acceptEvidence?: boolean;
  /** Writes a report of the confirmed candidates (a dry run's, or one that needs approval); returns where. */
  report?: (r: Report) => Promise<string>;
  /** The API server, for reports. */
  cluster?: string;
  /** The UID of its `kube-system` namespace, for reports (read only when a report is written or applied). */
  clusterUid?: string;
  /** More deletions than this wait for a human: a report, nothing deleted, exit 6. */
  approvalAbove?: number;
  /** `apply --from-report`: only these keys, with these fingerprints, may be deleted. */
  approved?: Report;
  signal?: AbortSignal;
}>;

export function run<R, W>(deps: RunDeps<R, W>, asked: RunRequest): Promise<RunResult> {
  return countingRequests((requests) => runCounted(deps, asked, requests));
}

async function runCounted<R, W>(
  deps: RunDeps<R, W>,
  asked: RunRequest,
  requests: () => Record<string, number>,
): Promise<RunResult> {
  const at: Marks = {
    runId: deps.newId(),
    started: deps.time.now(),
    sideFailures: 0,
    events: [],
    requests,
  };
  const deadline = deps.time.timeout(asked.deadlineMs);
  const log = deps.log.child({ function: deps.fn.name, runId: at.runId });
  // A report-only function never deletes: an --apply run of it is a dry run that records.
  const req: RunRequest =
    deps.fn.reportOnly && asked.apply ? { ...asked, apply: false, record: true } : asked;
  if (req !== asked)
    log.info(
      { event: 'run.report-only', reason: 'a report-only rule: reported, never deleted (--apply ignored)' },
      'run.report-only',
    );
  let handle: LockHandle;
  try {
    handle = await deps.lock.acquire(deps.fn.name, deadline);
  } catch (err) {
    return finishRun(deps, req, log, lockRefused(log, err), at);
  }
  const x: Scope = {
    log,
    signal: AbortSignal.any([deadline, handle.lost, ...(req.signal ? [req.signal] : [])]),
    side: (event, call, err) => {
      at.sideFailures++;
      x.log.warn({ event, call, error: messageOf(err) }, event);
      return undefined;
    },
  };
  let r: Finish;
  try {
    try {
      r = await phases(deps, req, x, at);
    } catch (err) {
      if (err instanceof Stop) r = err.finish;
      else {
        // Nothing a phase did not expect escapes a run without its run.finished.
        const error = messageOf(err);
        x.log.error({ event: 'run.failed', reason: error }, 'run.failed');
        r = { outcome: 'failed', exitCode: EXIT.error, error };
      }
    }
    // Written under the lock, after every deletion: a history that cannot be written is a
    // side failure of the run, never a reason a deletion did not happen.
    if (req.apply || req.record) await recordHistory(deps, req, x, r, at, handle.lost);
  } finally {
    await handle
      .release()
      .catch((err) =>
        x.log.warn({ event: 'lock.release-failed', error: messageOf(err) }, 'lock release failed'),
      );
  }
  return finishRun(deps, req, x.log, r, at);
}

/** What run() keeps of a run while its phases go: its id, start, side failures, and the decision's events (for its history). */
type Marks = {
  runId: string;
  started: number;
  sideFailures: number;
  events: readonly DiffEvent[];
  /** The requests the run has sent so far, by API. */
  requests: () => Record<string, number>;
};

/** Adds the run's record to its function's history (`twopass history`); a failure is logged and counted, never thrown. */
async function recordHistory<R, W>(
  deps: RunDeps<R, W>,
  req: RunRequest,
  x: Scope,
  r: Finish,
  at: Marks,
  lost: AbortSignal,
): Promise<void> {
  const history = deps.store.history;
  if (!history) return;
  const record = recordOf({
    function: deps.fn.name,
    runId: at.runId,
    snapshotId: r.snapshotId,
    startedAt: at.started,
    durationMs: deps.time.now() - at.started,
    dryRun: !req.apply,
    outcome: r.outcome,
    exitCode: r.exitCode === EXIT.ok && at.sideFailures > 0 ? EXIT.error : r.exitCode,
    error: r.error,
    summary: r.summary,
    events: at.events,
    deleted: r.deleted ?? [],
    alreadyGone: r.alreadyGone,
    held: r.held ?? [],
    skipped: r.skipped ?? [],
    failed: r.failed ?? [],
  });
  try {
    // its own deadline: a run stopped by its own deadline still leaves its record
    await history.append(deps.fn.name, record, AbortSignal.any([lost, deps.time.timeout(HISTORY_WRITE_MS)]));
  } catch (err) {
    x.side('history.write-failed', 'history.append', err);
  }
}

/** How long writing a run's history record may take. */
const HISTORY_WRITE_MS = 15_000;

/** Why the lock could not be taken, as the run's outcome. */
function lockRefused(log: Logger, err: unknown): Finish {
  const reason = messageOf(err);
  if (err instanceof LockHeldError) {
    log.warn({ event: 'run.aborted', reason, call: 'lock' }, 'run.aborted');
    return { outcome: 'locked', exitCode: EXIT.locked, error: reason };
  }
  if (err instanceof ConfigError) {
    log.error({ event: 'run.aborted', reason, call: 'lock' }, 'run.aborted');
    return { outcome: 'failed', exitCode: EXIT.config, error: reason };
  }
  log.error({ event: 'run.aborted', reason: `cannot take the lock: ${reason}`, call: 'lock' }, 'run.aborted');
  return { outcome: 'aborted', exitCode: EXIT.incomplete, error: reason };
}

/** The result, `run.finished` and the `finished` hook (one that fails is logged, never thrown). */
async function finishRun<R, W>(
  deps: RunDeps<R, W>,
  req: RunRequest,
  log: Logger,
  r: Finish,
  at: Readonly<Marks>,
): Promise<RunResult> {
  // A side output that failed makes an otherwise clean run exit 1: it is lost otherwise.
  const exitCode = r.exitCode === EXIT.ok && at.sideFailures > 0 ? EXIT.error : r.exitCode;
  const result: RunResult = {
    function: deps.fn.name,
    runId: at.runId,
    dryRun: !req.apply,
    confirmed: [],
    deleted: [],
    deletedByKind: {},
    skipped: [],
    failed: [],
    held: [],
    notices: [],
    ...r,
    exitCode,
    sideFailures: at.sideFailures,
    durationMs: deps.time.now() - at.started,
    requests: at.requests(),
  };
  log.info(
    {
      event: 'run.finished',
      outcome: result.outcome,
      exitCode: result.exitCode,
      dryRun: result.dryRun,
      summary: result.summary,
      confirmed: result.confirmed.length,
      deleted: result.deleted.length,
      ...(result.alreadyGone?.length ? { alreadyGone: result.alreadyGone.length } : {}),
      skipped: result.skipped.length,
      failed: result.failed.length,
      ...(result.held.length > 0 ? { held: result.held.length } : {}),
      ...(result.sideFailures > 0 ? { sideFailures: result.sideFailures } : {}),
      durationMs: result.durationMs,
      ...(result.error ? { error: result.error } : {}),
    },
    'run.finished',
  );
  try {
    await deps.hooks?.finished?.(result);
  } catch (err) {
    log.warn({ event: 'hook.failed', call: 'hooks.finished', error: messageOf(err) }, 'hook.failed');
  }
  return result;
}

/** What `snapshot` holds once the act phase begins (nothing reads it after that point). */
const RELEASED = Object.freeze({
  id: '',
  function: '',
  takenAt: 0,
  sources: [],
  targets: [],
  used: [],
  indeterminate: [],
}) as unknown as Snapshot;

/** More deletions than approval.requiredAbove: the report written, and the operator told how to approve it. */
async function askApproval<R, W>(
  fn: RunDeps<R, W>['fn'],
  ids: Parameters<typeof writeReport>[1],
  actions: Parameters<typeof writeReport>[2],
  req: RunRequest,
  n: number,
  x: Scope,
): Promise<void> {
  const where = await writeReport(fn, ids, actions, req.report, 'approval required', x);
  x.log.warn(
    {
      event: 'approval.required',
      confirmed: n,
      requiredAbove: req.approvalAbove,
      reason: `${n} deletions exceed approval.requiredAbove (${req.approvalAbove}): nothing deleted; ${where ? `review ${where}, then \`twopass apply --from-report ${where}\`` : `write a report with \`twopass run ${fn.name} --report FILE\`, review it, then \`twopass apply --from-report FILE\``}`,
    },
    'approval.required',
  );
}

/** The phases in order; each hands the next what it needs, or stops the run. */
async function phases<R, W>(deps: RunDeps<R, W>, req: RunRequest, x: Scope, at: Marks): Promise<Finish> {
  const { fn } = deps;
  const { runId } = at;
  const snapshotId = deps.newId();
  const ahead = await front(fn, deps.reader, deps.store, x, deps.time, {
    snapshotId,
    settings: req.settings ?? validateSettings(fn, {}, 'the run'),
    policy: req.policy,
    acceptEvidence: req.acceptEvidence,
    dryRun: !req.apply,
    // a saved snapshot holds every target; otherwise those in use are only counted
    countUsed: !deps.saveSnapshot,
  });
  const { loaded, decision, ctx } = ahead;
  let { snapshot } = ahead;
  if (deps.saveSnapshot) await saveSnapshotFile(deps.saveSnapshot, snapshot, x);
  at.events = decision.diff.events;
  const notices = decision.diff.events.filter(
    (e) => e.event === 'evidence.accepted' || e.event === 'run.refused' || e.event === 'run.aborted',
  );
  const evidence = Object.fromEntries(
    snapshot.sources.filter((x) => x.role === 'evidence').map((x) => [x.name, x.count]),
  );
  // what the evidence guard compared these counts with (absent on a first run)
  const was = loaded.state.lastSnapshot;
  const evidenceBaseline = was?.evidence
    ? Object.fromEntries(Object.keys(was.evidence).map((n) => [n, was.counts[n] ?? 0]))
    : undefined;
  const where = placesOf(fn, snapshot, decision, ctx.now, req.policy.graceMs);
  const base = {
    snapshotId,
    summary: decision.diff.summary,
    notices,
    evidence,
    ...(evidenceBaseline ? { evidenceBaseline } : {}),
    ...where.result(),
  };
  if (decision.diff.outcome === 'aborted')
    return { ...base, outcome: 'aborted', exitCode: EXIT.incomplete, error: 'snapshot incomplete' };
  const persisted = await persist(deps.store, fn.name, loaded, decision, req.apply || req.record, x);
  if (decision.diff.outcome === 'refused')
    return {
      ...base,
      outcome: 'refused',
      exitCode: EXIT.refused,
      error: 'refused by the blast-radius guard',
    };
  const confirmed = decision.actions.map((a) => a.target.key);
  const ids = {
    runId,
    snapshot,
    cluster: req.cluster ?? 'unknown',
    ...(req.clusterUid !== undefined ? { clusterUid: req.clusterUid } : {}),
  };
  // A producer that hands out from memory is running (law 13): the confirmed deletions wait,
  // their candidates kept as they are, so the grace keeps counting.
  const held = snapshot.holds?.length && confirmed.length > 0 ? snapshot.holds.join('; ') : undefined;
  if (held !== undefined)
    x.log.warn(
      { event: 'run.held', reason: held, held: confirmed.length, dryRun: !req.apply },
      `${fn.name}: ${confirmed.length} confirmed deletion(s) held, nothing deleted: ${held}`,
    );
  if (held !== undefined && req.apply) {
    return { ...base, outcome: 'held', exitCode: EXIT.ok, confirmed, held: confirmed, error: held };
  }
  if (!req.apply) {
    await writeReport(fn, ids, decision.actions, req.report, 'dry run', x);
    return { ...base, outcome: 'ok', exitCode: EXIT.ok, confirmed };
  }
  const n = confirmed.length;
  if (!req.approved && req.approvalAbove !== undefined && n > req.approvalAbove) {
    await askApproval(fn, ids, decision.actions, req, n, x);
    return {
      ...base,
      outcome: 'approval',
      exitCode: EXIT.approval,
      confirmed,
      error: `${n} deletions need approval`,
    };
  }
  const actions = req.approved
    ? approvedOnly(req.approved, decision.actions, snapshot, x.log)
    : decision.actions;
  // `run --apply --report FILE`: the report is the record of what this run set out to delete.
  if (!req.approved)
    await writeReport(fn, ids, decision.actions, req.report, 'apply: what this run is about to delete', x);
  // The act phase needs the actions, not the snapshot: at 150,000 targets the snapshot is
  // most of the run's memory, and the act phase reads its own evidence beside it.
  const evidenceFloor = evidenceFloorOf(snapshot, req.policy.maxEvidenceDropPercent);
  const evidenceCount = evidenceCountOf(snapshot);
  snapshot = RELEASED;
  ids.snapshot = RELEASED;
  const done = await actPhase(deps, x, { ...ctx, evidenceFloor, evidenceCount }, actions, persisted, {
    run: { runId, snapshotId },
    concurrency: req.concurrency,
    evidenceMaxAgeMs: req.evidenceMaxAgeMs ?? EVIDENCE_MAX_AGE_MS,
  });
  return { ...base, confirmed, ...done, ...where.result(done.deleted ?? []) };
}
