/**
 * One act phase's outcomes: a unit of one target (re-check, tombstone, remove with its
 * precondition, read back, Event) or of one batch (the kind's own removal), each outcome
 * logged as it is known and counted by kind. Used by ./act.ts.
 */
import type { EventNote, FunctionContext, RemovedPart, TwopassFunction } from '../contract/index.ts';
import type { Target } from '../engine/types.ts';
import { messageOf } from '../errors.ts';
import type { Logger } from '../log/logger.ts';
import type { LawGuard } from './guard.ts';
import type { RunHooks } from './result.ts';
import { removeBatch } from './sequence.ts';

/** What acting on targets uses of a run: the function, its ports (the writer guarded), the log, the hooks. */
export type ActingDeps<R, W> = Readonly<{
  fn: TwopassFunction<R, W>;
  reader: R;
  writer: W;
  log: Logger;
  hooks?: RunHooks | undefined;
  recordEvent?: ((note: EventNote, signal: AbortSignal) => Promise<void>) | undefined;
}>;

type Removed = { target: Target; detail?: string | undefined };
export const baseOf = (t: Pick<Target, 'key' | 'kind' | 'name'>) => ({
  key: t.key,
  kind: t.kind,
  name: t.name,
});

/** One act phase: its tallies, and how each outcome is told (logged as it is known, counted by kind). */
export class Acting<R, W> {
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

  private readonly deps: ActingDeps<R, W>;
  private readonly eventSignal: AbortSignal;

  private readonly guard: LawGuard;

  constructor(
    deps: ActingDeps<R, W>,
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

  /**
   * Not deleted, and the candidate forgotten (a re-check found it changed or used); a
   * contended one (its write lost to other writers every time, nothing judged) is kept
   * with its age, so the next run that confirms it tries again at once.
   */
  skip(t: Target, reason: string, contended = false): void {
    this.skipped.push(t.key);
    this.settled.add(t.key);
    if (!contended) this.drop.add(t.key);
    this.deps.log.warn(
      { event: 'delete.skipped', ...baseOf(t), reason, ...(contended ? { contended, kept: true } : {}) },
      'delete.skipped',
    );
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
    if (res.outcome === 'skipped') return this.skip(t, res.reason, res.contended === true);
    if (res.outcome === 'held') return this.hold(t, res.reason);
    // Read back, unless the DELETE's own answer showed the object of its UID gone (0007).
    const shown = res.outcome === 'deleted' && res.shownGone === true;
    if (!shown && !(await fn.confirmGone(reader, t, this.ctx)))
      return this.fail(t, `the server answered ${res.outcome} but a read still finds it`);
    const unproven = res.outcome === 'deleted' && res.unproven === true;
    await this.gone(t, res.outcome, res.detail, unproven);
    if (res.outcome === 'deleted' && !unproven) await this.event([{ target: t, detail: res.detail }]);
  }

  /** The targets of one batch: its kind's steps, run by the act sequence (./sequence.ts). */
  async batch(ts: readonly Target[]): Promise<void> {
    const results = await removeBatch(this.deps.fn, this.deps.reader, this.deps.writer, ts, this.ctx);
    const byKey = new Map(results.map((r) => [r.key, r]));
    const removed: Removed[] = [];
    for (const t of ts) {
      const r = byKey.get(t.key);
      if (!r) {
        this.fail(t, 'the batch removal returned no result for it');
        continue;
      }
      await this.parts(t, r.parts);
      if (r.outcome === 'skipped') this.skip(t, r.reason, r.contended === true);
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
