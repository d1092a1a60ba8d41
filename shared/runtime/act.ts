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
  type EventNote,
  EvidenceCache,
  type FunctionContext,
  type RemovedPart,
  type TwopassFunction,
} from '../contract/index.ts';
import type { DeleteAction, Target } from '../engine/types.ts';
import type { Logger } from '../log/logger.ts';
import type { Time } from '../time.ts';
import type { RunHooks } from './run.ts';

export type ActDeps<R, W> = Readonly<{
  fn: TwopassFunction<R, W>;
  reader: R;
  writer: W;
  time: Time;
  log: Logger;
  hooks?: RunHooks | undefined;
  recordEvent?: ((note: EventNote, signal: AbortSignal) => Promise<void>) | undefined;
}>;

export type ActRequest = Readonly<{
  actions: readonly DeleteAction[];
  ctx: FunctionContext;
  /** Units in flight at once. */
  concurrency: number;
  /** The bound on the age of the evidence a re-check reads (ms). */
  evidenceMaxAgeMs: number;
}>;

export type ActOutcome = Readonly<{
  deleted: readonly string[];
  deletedByKind: Readonly<Record<string, number>>;
  skipped: readonly string[];
  failed: readonly string[];
  /** Candidates to forget: deleted, or skipped (a skipped candidate starts over). */
  drop: ReadonlySet<string>;
  /** Units carried out (a batch is one) and fresh evidence reads made. */
  units: number;
  evidenceReads: number;
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

export async function act<R, W>(deps: ActDeps<R, W>, req: ActRequest): Promise<ActOutcome> {
  const { fn, log } = deps;
  const cache = new EvidenceCache(deps.time.now, req.evidenceMaxAgeMs);
  const ctx: FunctionContext = { ...req.ctx, fresh: cache.get, concurrency: req.concurrency };
  const signal = ctx.signal;
  const deleted: string[] = [];
  const deletedByKind: Record<string, number> = {};
  const skipped: string[] = [];
  const failed: string[] = [];
  const drop = new Set<string>();
  const settled = new Set<string>();

  const baseOf = (t: Pick<Target, 'key' | 'kind' | 'name'>) => ({ key: t.key, kind: t.kind, name: t.name });
  const failOne = (t: Target, error: string) => {
    failed.push(t.key);
    settled.add(t.key);
    log.error({ event: 'delete.failed', ...baseOf(t), error }, 'delete.failed');
  };
  const skipOne = (t: Target, reason: string) => {
    skipped.push(t.key);
    settled.add(t.key);
    drop.add(t.key);
    log.warn({ event: 'delete.skipped', ...baseOf(t), reason }, 'delete.skipped');
  };
  const count = (kind: string) => {
    deletedByKind[kind] = (deletedByKind[kind] ?? 0) + 1;
  };
  const deletedOne = async (t: Target, outcome: 'deleted' | 'gone', detail: string | undefined) => {
    deleted.push(t.key);
    settled.add(t.key);
    count(t.kind);
    drop.add(t.key);
    log.info(
      {
        event: 'resource.deleted',
        ...baseOf(t),
        ...(detail ? { detail } : {}),
        ...(outcome === 'gone' ? { alreadyGone: true } : {}),
      },
      'resource.deleted',
    );
    await deps.hooks?.deleted?.(t, detail);
  };
  /** A further resource of a unit: deleted (counted under its own kind) or left, and why. */
  const partOf = async (t: Target, p: RemovedPart) => {
    const part = { key: p.key, kind: p.kind, name: p.name, partOf: t.key };
    if (p.outcome === 'left') {
      skipped.push(p.key);
      log.warn({ event: 'delete.skipped', ...part, reason: p.detail }, 'delete.skipped');
      return;
    }
    if (p.outcome === 'failed') {
      failed.push(p.key);
      log.error({ event: 'delete.failed', ...part, error: p.detail }, 'delete.failed');
      return;
    }
    deleted.push(p.key);
    count(p.kind);
    log.info(
      {
        event: 'resource.deleted',
        ...part,
        detail: p.detail,
        ...(p.outcome === 'gone' ? { alreadyGone: true } : {}),
      },
      'resource.deleted',
    );
    await deps.hooks?.deleted?.(
      { key: p.key, kind: p.kind, name: p.name, fingerprint: '', keep: false },
      p.detail,
    );
  };
  const parts = async (t: Target, ps: readonly RemovedPart[] | undefined) => {
    for (const p of ps ?? []) await partOf(t, p);
  };
  const recordEvent = async (removed: { target: Target; detail?: string | undefined }[]) => {
    const note = deps.recordEvent && removed.length > 0 ? fn.eventFor(removed) : undefined;
    if (!note) return;
    await deps.recordEvent!(note, signal).catch((err) =>
      log.warn(
        {
          event: 'event.failed',
          kind: note.involved.kind,
          name: note.involved.name,
          error: (err as Error).message,
        },
        'event.failed',
      ),
    );
  };

  const one = async (t: Target) => {
    const check = await fn.recheck(deps.reader, t, ctx);
    if (!check.ok) return skipOne(t, `re-check: ${check.reason}`);
    const res = await fn.remove(deps.writer, t, ctx);
    // Parts first: a floating IP deleted before its port was skipped is told, never lost.
    await parts(t, res.parts);
    if (res.outcome === 'skipped') return skipOne(t, res.reason);
    if (!(await fn.confirmGone(deps.reader, t, ctx)))
      return failOne(t, `the server answered ${res.outcome} but a read still finds it`);
    await deletedOne(t, res.outcome, res.detail);
    if (res.outcome === 'deleted') await recordEvent([{ target: t, detail: res.detail }]);
  };
  const batch = async (ts: readonly Target[]) => {
    const results = await fn.removeBatch(deps.reader, deps.writer, ts, ctx);
    const byKey = new Map(results.map((r) => [r.key, r]));
    const removed: { target: Target; detail?: string | undefined }[] = [];
    for (const t of ts) {
      const r = byKey.get(t.key);
      if (!r) {
        failOne(t, 'the batch removal returned no result for it');
        continue;
      }
      await parts(t, r.parts);
      if (r.outcome === 'skipped') skipOne(t, r.reason);
      else if (r.outcome === 'failed') failOne(t, r.error);
      else {
        await deletedOne(t, r.outcome, r.detail);
        if (r.outcome === 'deleted') removed.push({ target: t, detail: r.detail });
      }
    }
    await recordEvent(removed);
  };

  const units = unitsOf(fn, req.actions);
  const queue = [...units];
  const worker = async () => {
    for (;;) {
      const unit = queue.shift();
      if (!unit) return;
      if (signal.aborted) {
        const why = `not attempted: ${String((signal.reason as Error)?.message ?? signal.reason)}`;
        for (const t of unit.targets) failOne(t, why);
        continue;
      }
      try {
        if (unit.batched) await batch(unit.targets);
        else await one(unit.targets[0]!);
      } catch (err) {
        for (const t of unit.targets) if (!settled.has(t.key)) failOne(t, (err as Error).message);
      }
    }
  };
  const workers = Math.max(1, Math.min(req.concurrency, fn.maxConcurrency ?? req.concurrency, queue.length));
  await Promise.all(Array.from({ length: workers }, worker));
  return {
    deleted,
    deletedByKind,
    skipped,
    failed,
    drop,
    units: units.length,
    evidenceReads: cache.total(),
  };
}
