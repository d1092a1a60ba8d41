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
import {
  EvidenceCache,
  type FunctionContext,
  type RemovedPart,
  type Touch,
  type TwopassFunction,
} from '../contract/index.ts';
import type { DeleteAction, Target } from '../engine/types.ts';
import { messageOf } from '../errors.ts';
import { EXIT } from './errors.ts';
import { LawGuard } from './guard.ts';
import type { Persisted, Scope } from './phases.ts';
import type { Finish, LogSink } from './result.ts';
import type { RunDeps } from './run.ts';
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

type Removed = { target: Target; detail?: string | undefined };
const baseOf = (t: Pick<Target, 'key' | 'kind' | 'name'>) => ({ key: t.key, kind: t.kind, name: t.name });

/** One act phase: its tallies, and how each outcome is told (logged as it is known, counted by kind). */
class Acting<R, W> {
  readonly deleted: string[] = [];
  readonly deletedByKind: Record<string, number> = {};
  readonly alreadyGone: string[] = [];
  readonly skipped: string[] = [];
  readonly failed: string[] = [];
  readonly held: string[] = [];
  heldReason: string | undefined;
  readonly unprovenByKind: Record<string, number> = {};
  readonly drop = new Set<string>();
  readonly settled = new Set<string>();
  readonly ctx: FunctionContext;

  private readonly deps: ActDeps<R, W>;
  private readonly eventSignal: AbortSignal;

  private readonly guard: LawGuard;

  constructor(
    deps: ActDeps<R, W>,
    ctx: FunctionContext,
    guard: LawGuard,
    eventSignal: AbortSignal = ctx.signal,
  ) {
    this.deps = deps;
    this.guard = guard;
    this.ctx = ctx;
    this.eventSignal = eventSignal;
  }

  fail(t: Target, error: string): void {
    this.failed.push(t.key);
    this.settled.add(t.key);
    this.deps.log.error({ event: 'delete.failed', ...baseOf(t), error }, 'delete.failed');
  }

  /** Not attempted, not failed: the candidate stays as it is for a later run. */
  hold(t: Target, reason: string): void {
    this.held.push(t.key);
    this.settled.add(t.key);
    this.heldReason ??= reason;
    this.deps.log.warn({ event: 'delete.held', ...baseOf(t), reason }, 'delete.held');
  }

  skip(t: Target, reason: string): void {
    this.skipped.push(t.key);
    this.settled.add(t.key);
    this.drop.add(t.key);
    this.deps.log.warn({ event: 'delete.skipped', ...baseOf(t), reason }, 'delete.skipped');
  }

  /** A hook (metrics, Events) that fails is logged; it never fails the deletion it was told of. */
  private async tell(t: Target, detail: string | undefined): Promise<void> {
    try {
      await this.deps.hooks?.deleted?.(t, detail);
    } catch (err) {
      this.deps.log.warn(
        { event: 'hook.failed', call: 'hooks.deleted', key: t.key, error: messageOf(err) },
        'hook.failed',
      );
    }
  }

  async gone(
    t: Target,
    outcome: 'deleted' | 'gone',
    detail: string | undefined,
    unproven?: boolean,
  ): Promise<void> {
    this.settled.add(t.key);
    this.drop.add(t.key);
    if (outcome === 'gone') {
      // Someone else removed it (its producer, an operator): not a deletion of twopass, not
      // counted as one, no Event; the candidate is forgotten.
      this.alreadyGone.push(t.key);
      this.deps.log.info(
        { event: 'resource.gone', ...baseOf(t), ...(detail ? { detail } : {}) },
        'resource.gone',
      );
      return;
    }
    if (!this.guard.isDurable(t.key)) {
      // told deleted without a durable tombstone: not let stand as a deletion of the run
      this.fail(t, 'reported deleted, but no tombstone of it was written before: a bug of its kind');
      return;
    }
    this.deleted.push(t.key);
    this.deletedByKind[t.kind] = (this.deletedByKind[t.kind] ?? 0) + 1;
    if (unproven) this.unprovenByKind[t.kind] = (this.unprovenByKind[t.kind] ?? 0) + 1;
    this.deps.log.info(
      {
        event: 'resource.deleted',
        ...baseOf(t),
        ...(detail ? { detail } : {}),
        ...(unproven ? { unproven: true } : {}),
      },
      'resource.deleted',
    );
    await this.tell(t, detail);
  }

  /** Further resources of a unit: deleted (counted under their own kind) or left, and why. */
  async parts(t: Target, ps: readonly RemovedPart[] | undefined): Promise<void> {
    const { log } = this.deps;
    for (const p of ps ?? []) {
      const part = { key: p.key, kind: p.kind, name: p.name, partOf: t.key };
      if (p.outcome === 'left') {
        this.skipped.push(p.key);
        log.warn({ event: 'delete.skipped', ...part, reason: p.detail }, 'delete.skipped');
      } else if (p.outcome === 'failed') {
        this.failed.push(p.key);
        log.error({ event: 'delete.failed', ...part, error: p.detail }, 'delete.failed');
      } else if (p.outcome === 'gone') {
        this.alreadyGone.push(p.key);
        log.info({ event: 'resource.gone', ...part, detail: p.detail }, 'resource.gone');
      } else {
        this.deleted.push(p.key);
        this.deletedByKind[p.kind] = (this.deletedByKind[p.kind] ?? 0) + 1;
        log.info({ event: 'resource.deleted', ...part, detail: p.detail }, 'resource.deleted');
        await this.tell({ key: p.key, kind: p.kind, name: p.name, fingerprint: '', keep: false }, p.detail);
      }
    }
  }

  async event(removed: readonly Removed[]): Promise<void> {
    const { deps } = this;
    const note = deps.recordEvent && removed.length > 0 ? deps.fn.eventFor(removed) : undefined;
    if (!note) return;
    await deps.recordEvent!(note, this.eventSignal).catch((err) =>
      deps.log.warn(
        { event: 'event.failed', kind: note.involved.kind, name: note.involved.name, error: messageOf(err) },
        'event.failed',
      ),
    );
  }

  /** One target: re-check, remove with its precondition, read back. */
  async one(t: Target): Promise<void> {
    const { fn, reader, writer } = this.deps;
    const check = await fn.recheck(reader, t, this.ctx);
    if (!check.ok) return this.skip(t, `re-check: ${check.reason}`);
    // The tombstone first: a deletion whose tombstone is not durable does not happen.
    try {
      await this.ctx.tombstone!([
        {
          key: t.key,
          kind: t.kind,
          name: t.name,
          object: check.before ?? t.data,
          ...(check.restore !== undefined ? { restore: check.restore } : {}),
        },
      ]);
    } catch (err) {
      return this.fail(t, `nothing deleted: ${messageOf(err)}`);
    }
    const res = await fn.remove(writer, t, this.ctx);
    // Parts first: a floating IP deleted before its port was skipped is told, never lost.
    await this.parts(t, res.parts);
    if (res.outcome === 'skipped') return this.skip(t, res.reason);
    if (res.outcome === 'held') return this.hold(t, res.reason);
    // Read back, unless the DELETE's own answer showed the object of its UID gone (0007).
    const shown = res.outcome === 'deleted' && res.shownGone === true;
    if (!shown && !(await fn.confirmGone(reader, t, this.ctx)))
      return this.fail(t, `the server answered ${res.outcome} but a read still finds it`);
    const unproven = res.outcome === 'deleted' && res.unproven === true;
    await this.gone(t, res.outcome, res.detail, unproven);
    if (res.outcome === 'deleted' && !unproven) await this.event([{ target: t, detail: res.detail }]);
  }

  /** The targets of one batch: re-checked, removed and read back by the function together. */
  async batch(ts: readonly Target[]): Promise<void> {
    const results = await this.deps.fn.removeBatch(this.deps.reader, this.deps.writer, ts, this.ctx);
    const byKey = new Map(results.map((r) => [r.key, r]));
    const removed: Removed[] = [];
    for (const t of ts) {
      const r = byKey.get(t.key);
      if (!r) {
        this.fail(t, 'the batch removal returned no result for it');
        continue;
      }
      await this.parts(t, r.parts);
      if (r.outcome === 'skipped') this.skip(t, r.reason);
      else if (r.outcome === 'held') this.hold(t, r.reason);
      else if (r.outcome === 'failed') this.fail(t, r.error);
      else {
        const unproven = r.outcome === 'deleted' && r.unproven === true;
        await this.gone(t, r.outcome, r.detail, unproven);
        // An Event says "deleted" only of what this run is known to have deleted.
        if (r.outcome === 'deleted' && !unproven) removed.push({ target: t, detail: r.detail });
      }
    }
    await this.event(removed);
  }
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
  const guard = new LawGuard(declared(rawDeps, req.actions));
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
