/**
 * The phases of a run, each with a typed hand-off to the next: load state -> observe ->
 * decide -> persist -> (approve) -> act (./act.ts) -> finish. A phase that ends the run
 * throws a `Stop` with the run's outcome; `run()` turns it (and anything unexpected) into
 * `run.finished` and an exit code.
 */
import type { FunctionContext, ParsedSettings, TwopassFunction } from '../contract/index.ts';
import { decide, targetCount } from '../engine/decide.ts';
import type { Decision, DeleteAction, Policy, Snapshot, State } from '../engine/types.ts';
import { ConfigError, callOf, messageOf } from '../errors.ts';
import type { Logger } from '../log/logger.ts';
import { StateCorruptError } from '../state/errors.ts';
import type { StateStore } from '../state/store.ts';
import type { Time } from '../time.ts';
import { EXIT } from './errors.ts';
import { buildReport, type Report } from './report.ts';
import type { Finish } from './result.ts';

/** What every phase of one run shares: its log (with the snapshot id once there is one), its signal, its side-output tally. */
export type Scope = {
  log: Logger;
  readonly signal: AbortSignal;
  /** A side output failed (a snapshot file, a report, a state save after deleting, a hook): logged and counted. */
  readonly side: (event: string, call: string, err: unknown) => undefined;
};

/** Ends the run with this outcome (thrown by a phase, caught by `run()`). */
export class Stop {
  readonly finish: Finish;
  /** The error that ended the run, when one did (explain rethrows it). */
  readonly cause: unknown;
  constructor(finish: Finish, cause?: unknown) {
    this.finish = finish;
    this.cause = cause;
  }
}

/** `run.aborted` and the outcome of a call that failed: nothing deleted, exit 3 (exit 2 for configuration). */
export function abortOn(log: Logger, call: string, err: unknown): Stop {
  const reason = messageOf(err);
  if (err instanceof ConfigError) {
    log.error({ event: 'run.aborted', call, reason, config: true }, 'run.aborted');
    return new Stop({ outcome: 'failed', exitCode: EXIT.config, error: reason }, err);
  }
  log.error({ event: 'run.aborted', call, reason }, 'run.aborted');
  return new Stop({ outcome: 'aborted', exitCode: EXIT.incomplete, error: reason }, err);
}

export type Loaded = Readonly<{ state: State; version?: string | undefined }>;

/** 1. The stored state; corrupt state is exit 1 with the command that resets it. */
export async function loadState(store: Pick<StateStore, 'load'>, fn: string, x: Scope): Promise<Loaded> {
  const { log } = x;
  try {
    return await store.load(fn, x.signal);
  } catch (err) {
    if (err instanceof StateCorruptError) {
      log.error({ event: 'run.aborted', call: 'state.load', reason: err.message }, 'run.aborted');
      throw new Stop({ outcome: 'failed', exitCode: EXIT.error, error: err.message }, err);
    }
    throw abortOn(log, 'state.load', err);
  }
}

/** 2. One complete snapshot: targets first, then evidence (the function's contract). */
export async function observe<R>(
  fn: TwopassFunction<R, unknown>,
  reader: R,
  ctx: FunctionContext,
  id: string,
  x: Scope,
  time: Time,
): Promise<Snapshot> {
  const { log } = x;
  let snapshot: Snapshot;
  try {
    snapshot = { id, function: fn.name, takenAt: ctx.now, ...(await fn.observe(reader, ctx)) };
  } catch (err) {
    throw abortOn(log, callOf(err, 'observe'), err);
  }
  log.info(
    {
      event: 'snapshot.taken',
      sources: snapshot.sources,
      targets: targetCount(snapshot),
      ...(snapshot.counted ? { counted: snapshot.counted } : {}),
      used: snapshot.used.length,
      indeterminate: snapshot.indeterminate.length,
      ...(snapshot.blockers?.length ? { blockers: snapshot.blockers } : {}),
      durationMs: time.now() - ctx.now,
    },
    'snapshot.taken',
  );
  return snapshot;
}

/** 3. The pure decision as of the snapshot, its events logged; an incomplete snapshot stops here. */
export function decideAndLog(
  loaded: Loaded,
  snapshot: Snapshot,
  policy: Policy,
  opts: Readonly<{ acceptEvidence?: boolean | undefined; dryRun: boolean }>,
  log: Logger,
): Decision {
  const decision = decide(loaded.state, snapshot, policy, snapshot.takenAt, {
    ...(opts.acceptEvidence ? { acceptEvidence: true } : {}),
  });
  for (const e of decision.diff.events) {
    if (e.event === 'candidate.confirmed') log.info({ ...e, dryRun: opts.dryRun }, e.event);
    else if (e.event === 'run.refused' || e.event === 'run.aborted') log.error(e, e.event);
    else if (e.event === 'evidence.accepted') log.warn(e, e.event);
    else log.info(e, e.event);
  }
  return decision;
}

/** What the read-only front of a run hands on: the stored state, the snapshot, the decision. */
export type Front = Readonly<{
  loaded: Loaded;
  snapshot: Snapshot;
  decision: Decision;
  ctx: FunctionContext;
}>;

/**
 * Phases 1-3, the front of every run and the whole of `explain`: the stored state, one
 * complete snapshot, the decision on it. It reads and logs, never writes: `store` is only
 * loaded from.
 */
export async function front<R>(
  fn: TwopassFunction<R, unknown>,
  reader: R,
  store: Pick<StateStore, 'load'>,
  x: Scope,
  time: Time,
  ask: Readonly<{
    snapshotId: string;
    settings: ParsedSettings;
    policy: Policy;
    acceptEvidence?: boolean | undefined;
    dryRun: boolean;
    /** Targets in use are counted, not kept (decision 0017): a run that saves no snapshot. */
    countUsed?: boolean;
  }>,
): Promise<Front> {
  const loaded = await loadState(store, fn.name, x);
  x.log = x.log.child({ snapshotId: ask.snapshotId });
  const ctx: FunctionContext = {
    now: time.now(),
    signal: x.signal,
    settings: ask.settings,
    note: (event, fields, level = 'info') => x.log[level]({ event, ...fields }, event),
    previous: (key) =>
      Object.hasOwn(loaded.state.candidates, key) ? loaded.state.candidates[key] : undefined,
    ...(ask.countUsed ? { countUsed: true } : {}),
  };
  const snapshot = await observe(fn, reader, ctx, ask.snapshotId, x, time);
  const decision = decideAndLog(loaded, snapshot, ask.policy, ask, x.log);
  return { loaded, snapshot, decision, ctx };
}

/** The state as a store holds it: saved and versioned, or not recorded (a dry run without --record). */
export type Persisted = { state: State; version: string | undefined };

/**
 * 4. Saves the decided state before anything is deleted: a stale writer loses here. A
 * refused run keeps only what the guard needs (the lower evidence counts); a dry run
 * without --record says that it saves nothing.
 */
export async function persist(
  store: StateStore,
  fn: string,
  loaded: Loaded,
  decision: Decision,
  record: boolean,
  x: Scope,
): Promise<Persisted> {
  const { log, signal } = x;
  const state = decision.nextState;
  if (!record) {
    log.info(
      {
        event: 'state.not-recorded',
        candidates: Object.keys(state.candidates).length,
        reason:
          'a dry run without --record: these observations are not saved, so the next run sees every candidate as new again (add --record to let them build up)',
      },
      'state.not-recorded',
    );
    return { state, version: loaded.version };
  }
  if (decision.diff.outcome === 'refused') {
    if (state === loaded.state) return { state, version: loaded.version };
    const version = await store
      .save(fn, state, loaded.version, signal)
      .catch((err) => x.side('state.save-failed', 'state.save', err));
    return { state, version: version ?? loaded.version };
  }
  try {
    return { state, version: await store.save(fn, state, loaded.version, signal) };
  } catch (err) {
    throw abortOn(log, 'state.save', err);
  }
}

/** `--save-snapshot`: the snapshot as a file; one that cannot be written is a side failure. */
export async function saveSnapshotFile(
  save: (s: Snapshot) => Promise<string>,
  snapshot: Snapshot,
  x: Scope,
): Promise<void> {
  try {
    const path = await save(snapshot);
    x.log.info({ event: 'snapshot.saved', path }, 'snapshot.saved');
  } catch (err) {
    x.side('snapshot.save-failed', 'snapshot.save', err);
  }
}

/** Writes the report of the confirmed candidates, when the run has a report sink; where it went, or undefined. */
export async function writeReport(
  fn: TwopassFunction<unknown, unknown>,
  ids: Readonly<{ runId: string; snapshot: Snapshot; cluster: string; clusterUid?: string }>,
  actions: readonly DeleteAction[],
  sink: ((r: Report) => Promise<string>) | undefined,
  why: string,
  x: Scope,
): Promise<string | undefined> {
  if (!sink) return undefined;
  try {
    const report = buildReport(fn, ids, actions, why.startsWith('apply') ? 'record' : 'review');
    const path = await sink(report);
    x.log.info({ event: 'report.written', path, entries: report.entries.length, why }, 'report.written');
    return path;
  } catch (err) {
    return x.side('report.failed', 'report.write', err);
  }
}

/**
 * `apply --from-report`: of the actions confirmed now, those the report approved with the
 * same fingerprint. Every other report entry is skipped, and the log says why; what is
 * confirmed now but was not in the report waits for a later report.
 */
export function approvedOnly(
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
    // a target in use may be only counted (not in `targets`), never gone
    const reason = a
      ? `changed since the report (fingerprint ${e.fingerprint} -> ${a.target.fingerprint})`
      : used.has(e.key)
        ? 'in use again since the report'
        : !t
          ? 'gone since the report'
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

/** The act phase's `evidenceCount`: each evidence source's count in the snapshot that decided. */
export function evidenceCountOf(snapshot: Snapshot): (source: string) => number | undefined {
  const counts = new Map<string, number>();
  for (const s of snapshot.sources) if (s.role === 'evidence') counts.set(s.name, s.count);
  return (source) => counts.get(source);
}

/**
 * The act phase's `evidenceFloor`: each evidence source's count in the snapshot that
 * decided, and the drop the evidence guard allows (law 1 for the fresh evidence too).
 */
export function evidenceFloorOf(
  snapshot: Snapshot,
  maxDropPercent: number,
): (source: string, count: number) => string | undefined {
  // evidence only: a source that is also a target shrinks as the run itself deletes
  const was = evidenceCountOf(snapshot);
  return (source, count) => {
    const before = was(source);
    if (before === undefined || before === 0 || count >= before) return undefined;
    const drop = ((before - count) / before) * 100;
    if (drop <= maxDropPercent) return undefined;
    return `${count} ${source} now against ${before} in the snapshot that decided, a drop of ${Math.round(drop)}% (maxEvidenceDropPercent ${maxDropPercent}%): a list that cannot be the cluster's is not absence; nothing of this batch is deleted`;
  };
}
