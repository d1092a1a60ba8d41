/**
 * run(): lock -> load state -> observe -> decide -> act -> save -> log.
 * The one owner of outcomes: functions return or throw, this turns that into
 * diff-log events, the saved state and an exit code.
 */

import {
  EVIDENCE_MAX_AGE_MS,
  type EventNote,
  type FunctionContext,
  type TwopassFunction,
} from '../contract/index.ts';
import { decide } from '../engine/decide.ts';
import type { DeleteAction, DiffSummary, Policy, Snapshot, State, Target } from '../engine/types.ts';
import { ConfigError, callOf } from '../errors.ts';
import type { Logger } from '../log/logger.ts';
import { LockHeldError, StateCorruptError } from '../state/errors.ts';
import type { Lock, LockHandle, StateStore } from '../state/store.ts';
import type { Time } from '../time.ts';
import { act } from './act.ts';
import { EXIT, type ExitCode } from './errors.ts';
import { buildReport, type Report } from './report.ts';

export type RunDeps<R, W> = Readonly<{
  fn: TwopassFunction<R, W>;
  reader: R;
  writer: W;
  store: StateStore;
  lock: Lock;
  time: Time;
  log: Logger;
  newId: () => string;
  /** Persists the snapshot (--save-snapshot); returns where. */
  saveSnapshot?: (snapshot: Snapshot) => Promise<string>;
  /** Told of every outcome, for metrics and Kubernetes Events. */
  hooks?: RunHooks;
  /** Records the Kubernetes Event of a deletion (absent: no Events). */
  recordEvent?: (note: EventNote, signal: AbortSignal) => Promise<void>;
  /** Where the diff log goes, when it can be lost (a closed pipe): a run without its log does not delete. */
  logSink?: LogSink;
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
}>;

export type RunHooks = Readonly<{
  deleted?: (target: Target, detail: string | undefined) => Promise<void> | void;
  finished?: (result: RunResult) => Promise<void> | void;
  /** A run's notification could not be delivered (counted in metrics). */
  notifyFailed?: (fn: string) => void;
}>;

export type RunRequest = Readonly<{
  apply: boolean;
  /** Save state in a dry run, so that observations build up. */
  record: boolean;
  policy: Policy;
  settings?: Readonly<Record<string, unknown>>;
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
  /** More deletions than this wait for a human: a report, nothing deleted, exit 6. */
  approvalAbove?: number;
  /** `apply --from-report`: only these keys, with these fingerprints, may be deleted. */
  approved?: Report;
  signal?: AbortSignal;
}>;

export type RunOutcome = 'ok' | 'aborted' | 'refused' | 'locked' | 'failed' | 'approval';

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
  skipped: readonly string[];
  failed: readonly string[];
  error?: string;
  durationMs: number;
}>;

export async function run<R, W>(deps: RunDeps<R, W>, req: RunRequest): Promise<RunResult> {
  const started = deps.time.now();
  const runId = deps.newId();
  const fnName = deps.fn.name;
  let log = deps.log.child({ function: fnName, runId });
  const dryRun = !req.apply;
  const deadline = deps.time.timeout(req.deadlineMs);
  const base = {
    function: fnName,
    runId,
    dryRun,
    confirmed: [] as string[],
    deleted: [] as string[],
    deletedByKind: {},
    skipped: [] as string[],
    failed: [] as string[],
  };
  const finish = async (r: Finish): Promise<RunResult> => {
    const result: RunResult = { ...base, ...r, durationMs: deps.time.now() - started };
    log.info(
      {
        event: 'run.finished',
        outcome: result.outcome,
        exitCode: result.exitCode,
        dryRun,
        summary: result.summary,
        confirmed: result.confirmed.length,
        deleted: result.deleted.length,
        skipped: result.skipped.length,
        failed: result.failed.length,
        durationMs: result.durationMs,
        ...(result.error ? { error: result.error } : {}),
      },
      'run.finished',
    );
    await deps.hooks?.finished?.(result);
    return result;
  };

  let handle: LockHandle;
  try {
    handle = await deps.lock.acquire(fnName, deadline);
  } catch (err) {
    if (err instanceof LockHeldError) {
      log.warn({ event: 'run.aborted', reason: err.message, call: 'lock' }, 'run.aborted');
      return finish({ outcome: 'locked', exitCode: EXIT.locked, error: err.message });
    }
    if (err instanceof ConfigError) {
      log.error({ event: 'run.aborted', reason: err.message, call: 'lock' }, 'run.aborted');
      return finish({ outcome: 'failed', exitCode: EXIT.config, error: err.message });
    }
    log.error(
      { event: 'run.aborted', reason: `cannot take the lock: ${(err as Error).message}`, call: 'lock' },
      'run.aborted',
    );
    return finish({ outcome: 'aborted', exitCode: EXIT.incomplete, error: (err as Error).message });
  }
  const signals = [deadline, handle.lost, ...(req.signal ? [req.signal] : [])];
  const signal = AbortSignal.any(signals);
  try {
    return await runLocked(deps, req, { log, signal, started, finish, setLog: (l) => (log = l), runId });
  } finally {
    await handle
      .release()
      .catch((err) =>
        log.warn({ event: 'lock.release-failed', error: (err as Error).message }, 'lock release failed'),
      );
  }
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

type Finish = Pick<RunResult, 'outcome' | 'exitCode'> &
  Partial<Omit<RunResult, 'durationMs' | 'function' | 'runId' | 'dryRun'>>;

type Inner = {
  log: Logger;
  signal: AbortSignal;
  started: number;
  runId: string;
  setLog: (l: Logger) => void;
  finish: (r: Finish) => Promise<RunResult>;
};

async function runLocked<R, W>(deps: RunDeps<R, W>, req: RunRequest, x: Inner): Promise<RunResult> {
  const { fn } = deps;
  let log = x.log;
  const aborted = (call: string, err: unknown) => {
    const reason = (err as Error).message ?? String(err);
    log.error({ event: 'run.aborted', call, reason }, 'run.aborted');
    return x.finish({ outcome: 'aborted', exitCode: EXIT.incomplete, error: reason });
  };

  // 1. Load state (corrupt state: a clear error and nothing deleted).
  let loaded: { state: State; version?: string };
  try {
    loaded = await deps.store.load(fn.name, x.signal);
  } catch (err) {
    if (err instanceof StateCorruptError) {
      log.error({ event: 'run.aborted', call: 'state.load', reason: err.message }, 'run.aborted');
      return x.finish({ outcome: 'failed', exitCode: EXIT.error, error: err.message });
    }
    return aborted('state.load', err);
  }

  // 2. Observe: targets first, then evidence (the function's contract).
  const snapshotId = deps.newId();
  log = log.child({ snapshotId });
  x.setLog(log);
  const takenAt = deps.time.now();
  const ctx: FunctionContext = {
    now: takenAt,
    signal: x.signal,
    settings: req.settings ?? {},
    note: (event, fields, level = 'info') => log[level]({ event, ...fields }, event),
  };
  let snapshot: Snapshot;
  try {
    const obs = await fn.observe(deps.reader, ctx);
    snapshot = { id: snapshotId, function: fn.name, takenAt, ...obs };
  } catch (err) {
    // A configuration error (credentials, region, project, auth URL): exit 2, a retry cannot help.
    if (err instanceof ConfigError) {
      log.error({ event: 'run.aborted', call: 'observe', reason: err.message, config: true }, 'run.aborted');
      return x.finish({ outcome: 'failed', exitCode: EXIT.config, error: err.message });
    }
    return aborted(callOf(err, 'observe'), err);
  }
  log.info(
    {
      event: 'snapshot.taken',
      sources: snapshot.sources,
      targets: snapshot.targets.length,
      used: snapshot.used.length,
      indeterminate: snapshot.indeterminate.length,
      ...(snapshot.blockers?.length ? { blockers: snapshot.blockers } : {}),
      durationMs: deps.time.now() - takenAt,
    },
    'snapshot.taken',
  );
  if (deps.saveSnapshot) {
    const where = await deps.saveSnapshot(snapshot);
    log.info({ event: 'snapshot.saved', path: where }, 'snapshot.saved');
  }

  // 3. Decide (pure), as of the snapshot: its lists are what the decision knows.
  const decision = decide(loaded.state, snapshot, req.policy, snapshot.takenAt, {
    ...(req.acceptEvidence ? { acceptEvidence: true } : {}),
  });
  for (const e of decision.diff.events) {
    if (e.event === 'candidate.confirmed') log.info({ ...e, dryRun: !req.apply }, e.event);
    else if (e.event === 'run.refused' || e.event === 'run.aborted') log.error(e, e.event);
    else if (e.event === 'evidence.accepted') log.warn(e, e.event);
    else log.info(e, e.event);
  }
  const summary = decision.diff.summary;
  if (decision.diff.outcome === 'aborted') {
    return x.finish({
      outcome: 'aborted',
      exitCode: EXIT.incomplete,
      snapshotId,
      summary,
      error: 'snapshot incomplete',
    });
  }
  if (decision.diff.outcome === 'refused') {
    // Only the lower evidence counts are remembered (so that a real drop can be accepted once it held).
    if ((req.apply || req.record) && decision.nextState !== loaded.state)
      await deps.store
        .save(fn.name, decision.nextState, loaded.version, x.signal)
        .catch((err) =>
          log.warn(
            { event: 'state.save-failed', call: 'state.save', error: (err as Error).message },
            'state.save-failed',
          ),
        );
    return x.finish({
      outcome: 'refused',
      exitCode: EXIT.refused,
      snapshotId,
      summary,
      error: 'refused by the blast-radius guard',
    });
  }
  const confirmed = decision.actions.map((a) => a.target.key);

  // 4. Save the decided state before acting: a stale writer loses here, before any deletion.
  const persist = req.apply || req.record;
  let version = loaded.version;
  let state = decision.nextState;
  if (persist) {
    try {
      version = await deps.store.save(fn.name, state, version, x.signal);
    } catch (err) {
      // A stale writer (StateConflictError) loses here, before any deletion.
      return aborted('state.save', err);
    }
  } else
    log.info(
      {
        event: 'state.not-recorded',
        candidates: Object.keys(state.candidates).length,
        reason:
          'a dry run without --record: these observations are not saved, so the next run sees every candidate as new again (add --record to let them build up)',
      },
      'state.not-recorded',
    );
  const writeReport = async (why: string) => {
    if (!req.report) return undefined;
    const report = buildReport(
      fn,
      { runId: x.runId, snapshot, cluster: req.cluster ?? 'unknown' },
      decision.actions,
    );
    const where = await req.report(report);
    log.info({ event: 'report.written', path: where, entries: report.entries.length, why }, 'report.written');
    return where;
  };
  if (!req.apply) {
    await writeReport('dry run');
    return x.finish({ outcome: 'ok', exitCode: EXIT.ok, snapshotId, summary, confirmed });
  }
  const n = confirmed.length;
  if (!req.approved && req.approvalAbove !== undefined && n > req.approvalAbove) {
    const where = await writeReport('approval required');
    log.warn(
      {
        event: 'approval.required',
        confirmed: n,
        requiredAbove: req.approvalAbove,
        reason: `${n} deletions exceed approval.requiredAbove (${req.approvalAbove}): nothing deleted; ${where ? `review ${where}, then \`twopass apply --from-report ${where}\`` : `write a report with \`twopass run ${fn.name} --report FILE\`, review it, then \`twopass apply --from-report FILE\``}`,
      },
      'approval.required',
    );
    return x.finish({
      outcome: 'approval',
      exitCode: EXIT.approval,
      snapshotId,
      summary,
      confirmed,
      error: `${n} deletions need approval`,
    });
  }
  const actions = req.approved
    ? approvedOnly(req.approved, decision.actions, snapshot, log)
    : decision.actions;
  // `run --apply --report FILE`: the report is the record of what this run set out to delete.
  if (!req.approved) await writeReport('apply: what this run is about to delete');
  // The act phase needs the actions, not the snapshot: at 150,000 targets the snapshot is
  // most of the run's memory, and the act phase reads its own evidence beside it.
  snapshot = RELEASED;

  // A deletion nobody can read about is not made: the diff log is the audit trail.
  const sink = deps.logSink;
  // The lines just written reach a closed pipe's error a turn of the event loop later.
  if (sink && actions.length > 0) await new Promise<void>((r) => setImmediate(r));
  const lostBefore = actions.length > 0 ? sink?.lost() : undefined;
  if (sink && lostBefore !== undefined) {
    const error = `the diff log is gone (${lostBefore}): nothing deleted, ${actions.length} confirmed deletions not started`;
    sink.warn(`twopass: ${fn.name}: ${error}`);
    return x.finish({ outcome: 'failed', exitCode: EXIT.error, snapshotId, summary, confirmed, error });
  }
  const onLost = () =>
    sink?.warn(
      `twopass: ${fn.name}: the diff log went away while deleting (${sink.lost()}): deletions not yet started are abandoned; the ones made are in the state and the Kubernetes Events`,
    );
  sink?.signal.addEventListener('abort', onLost, { once: true });

  // 5. Act: re-check on fresh evidence, then remove with a precondition, then read back.
  const done = await act(
    {
      fn,
      reader: deps.reader,
      writer: deps.writer,
      time: deps.time,
      log,
      hooks: deps.hooks,
      recordEvent: deps.recordEvent,
    },
    {
      actions,
      ctx: sink ? { ...ctx, signal: AbortSignal.any([ctx.signal, sink.signal]) } : ctx,
      concurrency: req.concurrency,
      evidenceMaxAgeMs: req.evidenceMaxAgeMs ?? EVIDENCE_MAX_AGE_MS,
    },
  );
  sink?.signal.removeEventListener('abort', onLost);
  const { deleted, deletedByKind, skipped, failed, drop } = done;
  if (actions.length > 0)
    log.info(
      { event: 'act.summary', units: done.units, evidenceReads: done.evidenceReads, actions: actions.length },
      'act.summary',
    );

  // 6. Save again without what was deleted or skipped (a skipped candidate starts over).
  if (drop.size > 0) {
    const candidates = { ...state.candidates };
    for (const k of drop) delete candidates[k];
    state = { ...state, candidates };
    try {
      version = await deps.store.save(fn.name, state, version, x.signal);
    } catch (err) {
      log.warn(
        { event: 'state.save-failed', call: 'state.save', error: (err as Error).message },
        'state.save-failed',
      );
    }
  }
  const exitCode = failed.length > 0 ? EXIT.error : EXIT.ok;
  return x.finish({
    outcome: failed.length > 0 ? 'failed' : 'ok',
    exitCode,
    snapshotId,
    summary,
    confirmed,
    deleted,
    deletedByKind,
    skipped,
    failed,
  });
}

/**
 * `apply --from-report`: of the actions confirmed now, those the report approved with the
 * same fingerprint. Every other report entry is skipped, and the log says why; what is
 * confirmed now but was not in the report waits for a later report.
 */
function approvedOnly(
  report: Report,
  actions: readonly DeleteAction[],
  snapshot: Snapshot,
  log: Logger,
): DeleteAction[] {
  const now = new Map(actions.map((a) => [a.target.key, a]));
  const used = new Set(snapshot.used);
  const seen = new Map(snapshot.targets.map((t) => [t.key, t]));
  const out: DeleteAction[] = [];
  for (const e of report.entries) {
    const a = now.get(e.key);
    if (a && a.target.fingerprint === e.fingerprint) {
      out.push(a);
      continue;
    }
    const t = seen.get(e.key);
    const reason = a
      ? `changed since the report (fingerprint ${e.fingerprint} -> ${a.target.fingerprint})`
      : !t
        ? 'gone since the report'
        : used.has(e.key)
          ? 'in use again since the report'
          : t.fingerprint !== e.fingerprint
            ? 'changed since the report'
            : 'not confirmed now (indeterminate, kept, or its observation started over)';
    log.warn(
      { event: 'approval.skipped', key: e.key, kind: e.kind, name: e.name, reason },
      'approval.skipped',
    );
  }
  const approved = new Set(report.entries.map((e) => e.key));
  for (const a of actions)
    if (!approved.has(a.target.key))
      log.info(
        { event: 'approval.not-in-report', key: a.target.key, kind: a.target.kind, name: a.target.name },
        'approval.not-in-report',
      );
  return out;
}
