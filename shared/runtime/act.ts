/**
 * The act phase: the confirmed deletions of one run, re-checked and carried out.
 *
 * Work comes in units: one target, or every target of one batch (they write the same
 * object or need the same evidence; the function groups them by `batchOf`). Units run on a
 * bounded pool of workers; the evidence a re-check needs is shared by every unit through
 * one `EvidenceCache` and read again once it is older than the run's bound (law 6). Every
 * outcome, and every further part a removal deleted or left (a port's floating IP), is
 * logged as it is known and counted by kind.
 */
import { EvidenceCache, type FunctionContext, type Touch, type TwopassFunction } from '../contract/index.ts';
import type { DeleteAction, Target } from '../engine/types.ts';
import { messageOf } from '../errors.ts';
import { Acting, baseOf } from './acting.ts';
import type { RunDeps } from './deps.ts';
import { EXIT } from './errors.ts';
import { LawGuard } from './guard.ts';
import type { Persisted, Scope } from './phases.ts';
import type { Finish, LogSink } from './result.ts';
import { type TombstoneRun, TombstoneWriter } from './tombstones.ts';

/** What the act phase uses of a run's dependencies (the log is the run's, with its snapshot id). */
export type ActDeps<R, W> = Pick<
  RunDeps<R, W>,
  'fn' | 'reader' | 'writer' | 'time' | 'log' | 'hooks' | 'recordEvent' | 'store'
>;

export type ActRequest = Readonly<{
  actions: readonly DeleteAction[];
  ctx: FunctionContext;
  /** Units in flight at once. */
  concurrency: number;
  /** The bound on the age of the evidence a re-check reads (ms). */
  evidenceMaxAgeMs: number;
  /** What the tombstones name (the run and its snapshot). */
  run: TombstoneRun;
  /**
   * The diff log, when it can be lost: each unit's `delete.started` lines are handed to it
   * before the unit writes anything, and a unit whose lines could not be is not started.
   */
  sink?: LogSink | undefined;
  /** The signal Events are written under: the run's, not the lost log's (a deletion made keeps its Event). */
  eventSignal?: AbortSignal;
}>;

export type ActOutcome = Readonly<{
  deleted: readonly string[];
  deletedByKind: Readonly<Record<string, number>>;
  /** Found gone when deleted (a 404: another actor removed them): not twopass's deletions. */
  alreadyGone: readonly string[];
  skipped: readonly string[];
  failed: readonly string[];
  /** Not attempted and kept as candidates, with why (a producer that hands out from memory started). */
  held: readonly string[];
  heldReason?: string | undefined;
  /** The function stopped the act phase (`ctx.stop`). */
  stopped: boolean;
  /** Of `deleted`, by kind: a DELETE answered 204 that another cleaner may have made as well. */
  unprovenByKind: Readonly<Record<string, number>>;
  /** Candidates to forget: deleted, or skipped (a skipped candidate starts over). */
  drop: ReadonlySet<string>;
  /** Units carried out (a batch is one) and fresh evidence reads made. */
  units: number;
  evidenceReads: number;
  /** Tombstones written, and the store writes that carried them. */
  tombstones: number;
  tombstoneWrites: number;
  /** Writes the guard let through, and those it refused (never sent: each fails the run). */
  writes: number;
  refusals: readonly string[];
}>;

type Unit = { targets: Target[]; batched: boolean };

/** Groups the actions into units: one per batch key, one per target without one. */
export function unitsOf<R, W>(fn: TwopassFunction<R, W>, actions: readonly DeleteAction[]): Unit[] {
  const units: Unit[] = [];
  const batches = new Map<string, Unit>();
  for (const a of actions) {
    const b = fn.batchOf(a.target);
    if (b === undefined) {
      units.push({ targets: [a.target], batched: false });
      continue;
    }
    let unit = batches.get(b);
    if (!unit) {
      unit = { targets: [], batched: true };
      batches.set(b, unit);
      units.push(unit);
    }
    unit.targets.push(a.target);
  }
  return units;
}

/** What each target's removal may write, as its kind declares (a kind that cannot say declares nothing). */
function declared<R, W>(deps: ActDeps<R, W>, actions: readonly DeleteAction[]): [string, readonly Touch[]][] {
  return actions.map((a) => {
    try {
      return [a.target.key, deps.fn.touchesOf(a.target)];
    } catch (err) {
      deps.log.error(
        {
          event: 'delete.failed',
          ...baseOf(a.target),
          error: `its kind cannot say what it writes: ${messageOf(err)}`,
        },
        'delete.failed',
      );
      return [a.target.key, []];
    }
  });
}

export async function act<R, W>(rawDeps: ActDeps<R, W>, req: ActRequest): Promise<ActOutcome> {
  // Every write of the function goes through the guard: declared, tombstoned, preconditioned.
  const guard = new LawGuard(declared(rawDeps, req.actions), rawDeps.fn.access.cluster);
  const deps: ActDeps<R, W> = { ...rawDeps, writer: guard.wrap(rawDeps.writer) };
  const cache = new EvidenceCache(deps.time.now, req.evidenceMaxAgeMs);
  const tombs = new TombstoneWriter({
    store: deps.store.tombstones,
    fn: deps.fn,
    run: req.run,
    now: deps.time.now,
    targets: req.actions.map((a) => a.target),
    signal: req.ctx.signal,
  });
  let stopped: string | undefined;
  const a = new Acting(
    deps,
    {
      ...req.ctx,
      fresh: cache.get,
      confirmed: req.actions.map((x) => x.target),
      sleep: deps.time.sleep,
      concurrency: req.concurrency,
      tombstone: async (entries) => {
        await tombs.write(entries);
        guard.markDurable(entries.map((e) => e.key));
      },
      stop: (reason) => {
        if (stopped !== undefined) return;
        stopped = reason;
        deps.log.error({ event: 'act.stopped', reason }, 'act.stopped');
      },
    },
    guard,
    req.eventSignal,
  );
  const { signal } = a.ctx;
  const units = unitsOf(deps.fn, req.actions);
  const queue = [...units];
  const worker = async () => {
    for (let unit = queue.shift(); unit; unit = queue.shift()) {
      if (signal.aborted) {
        const why = `not attempted: ${messageOf(signal.reason)}`;
        for (const t of unit.targets) a.fail(t, why);
        continue;
      }
      if (stopped !== undefined) {
        for (const t of unit.targets) a.hold(t, `not attempted: ${stopped}`);
        continue;
      }
      // The diff log first: what this unit is about to delete is handed to it before any write.
      if (req.sink) {
        for (const t of unit.targets)
          deps.log.info({ event: 'delete.started', ...baseOf(t) }, 'delete.started');
        await req.sink.barrier();
        const lost = req.sink.lost();
        if (lost !== undefined) {
          for (const t of unit.targets) a.fail(t, `not started: the diff log is gone (${lost})`);
          continue;
        }
      }
      try {
        if (unit.batched) await a.batch(unit.targets);
        else await a.one(unit.targets[0]!);
      } catch (err) {
        for (const t of unit.targets) if (!a.settled.has(t.key)) a.fail(t, messageOf(err));
      }
    }
  };
  const fn = deps.fn;
  const workers = Math.max(1, Math.min(req.concurrency, fn.maxConcurrency ?? req.concurrency, queue.length));
  await Promise.all(Array.from({ length: workers }, worker));
  const { deleted, deletedByKind, alreadyGone, skipped, failed, held, heldReason, unprovenByKind, drop } = a;
  return {
    deleted,
    deletedByKind,
    alreadyGone,
    skipped,
    failed,
    held,
    heldReason: stopped ?? heldReason,
    stopped: stopped !== undefined,
    unprovenByKind,
    drop,
    units: units.length,
    evidenceReads: cache.total(),
    tombstones: tombs.written,
    tombstoneWrites: tombs.writes,
    writes: guard.writes.length,
    refusals: guard.refusals,
  };
}

/**
 * The act phase of a run: not started when the diff log is gone (the record of every
 * deletion), stopped when it goes; then the state saved again without what was deleted or
 * skipped (a skipped candidate starts over).
 */
export async function actPhase<R, W>(
  deps: RunDeps<R, W>,
  x: Scope,
  ctx: FunctionContext,
  actions: readonly DeleteAction[],
  persisted: Persisted,
  opts: Readonly<{ concurrency: number; evidenceMaxAgeMs: number; run: TombstoneRun }>,
): Promise<Finish> {
  const { fn } = deps;
  const sink = deps.logSink;
  // The lines just written reach a closed pipe's error a turn of the event loop later.
  if (sink && actions.length > 0) await new Promise<void>((r) => setImmediate(r));
  const lostBefore = actions.length > 0 ? sink?.lost() : undefined;
  if (sink && lostBefore !== undefined) {
    const error = `the diff log is gone (${lostBefore}): nothing deleted, ${actions.length} confirmed deletions not started`;
    sink.warn(`twopass: ${fn.name}: ${error}`);
    return { outcome: 'failed', exitCode: EXIT.error, error };
  }
  const done = await act(
    { ...deps, log: x.log },
    {
      actions,
      ctx: sink ? { ...ctx, signal: AbortSignal.any([ctx.signal, sink.signal]) } : ctx,
      concurrency: opts.concurrency,
      evidenceMaxAgeMs: opts.evidenceMaxAgeMs,
      run: opts.run,
      sink,
      eventSignal: ctx.signal,
    },
  );
  // Lost while acting (seen now, or only at this last hand-over): never exit 0, and say what is true.
  if (sink && actions.length > 0) await sink.barrier();
  const lostWhile = actions.length > 0 ? sink?.lost() : undefined;
  if (actions.length > 0)
    x.log.info(
      {
        event: 'act.summary',
        units: done.units,
        evidenceReads: done.evidenceReads,
        actions: actions.length,
        tombstones: done.tombstones,
        tombstoneWrites: done.tombstoneWrites,
        writes: done.writes,
        refused: done.refusals.length,
      },
      'act.summary',
    );
  for (const reason of done.refusals) x.log.error({ event: 'law.refused', reason }, 'law.refused');
  if (done.drop.size > 0) {
    const candidates = { ...persisted.state.candidates };
    for (const k of done.drop) delete candidates[k];
    const state = { ...persisted.state, candidates };
    await deps.store
      .save(fn.name, state, persisted.version, x.signal)
      .catch((err) => x.side('state.save-failed', 'state.save', err));
  }
  const { deleted, deletedByKind, skipped, failed, held, unprovenByKind } = done;
  const unproven = Object.keys(unprovenByKind).length > 0 ? { unprovenByKind } : {};
  const gone = done.alreadyGone.length > 0 ? { alreadyGone: done.alreadyGone } : {};
  // what every ending of the act phase tells of it
  const told = { deleted, deletedByKind, skipped, failed, held, ...gone };
  if (sink && lostWhile !== undefined) {
    const notStarted = failed.length;
    const made = deleted.length;
    const error = `the diff log went away while deleting (${lostWhile}): ${made} deletion(s) made${made ? ' (each in its tombstone, the state and its Event)' : ''}, ${notStarted} not started`;
    sink.warn(
      `twopass: ${fn.name}: ${error}${made ? `; \`twopass restore ${fn.name} --run ${opts.run.runId}\` lists them` : ''}`,
    );
    return { outcome: 'failed', exitCode: EXIT.error, ...told, error };
  }
  const bad = failed.length > 0 || done.refusals.length > 0;
  if ((held.length > 0 || done.stopped) && !bad) {
    // Held in the act phase: what was deleted before the hold may already be in the
    // producer's memory, so a hold after deletions wants the operator (exit 1).
    const error = done.heldReason ?? 'deletions held';
    return {
      outcome: 'held',
      exitCode: deleted.length > 0 ? EXIT.error : EXIT.ok,
      ...told,
      error,
      ...unproven,
    };
  }
  return {
    outcome: bad ? 'failed' : 'ok',
    exitCode: bad ? EXIT.error : EXIT.ok,
    ...told,
    ...unproven,
  };
}
