/**
 * The act sequence of a batch, the same for every batched kind: for each of the kind's
 * steps, for each of its writes (one for the step, or one per target in a worker pool of the
 * run's concurrency):
 *  1. plan on fresh evidence (the kind re-checks each target; those it keeps are decided here),
 *  2. write the tombstones of what the write removes and wait until they are durable (a
 *     tombstone that cannot be written fails its targets: nothing of them is written),
 *  3. the gate (a producer that hands out from memory started: held, not attempted),
 *  4. the write with its precondition; one that lost to another writer pauses and plans
 *     again on fresh evidence, never retried blind, and after the last attempt leaves its
 *     targets for the next run (contended, decision 0014),
 *  5. the read-back: what the write did, per target, from its answer when that shows the
 *     write, else from a read (an answer that cannot be read may mean it happened).
 * A plan that throws fails what it was planning, nothing else; a stop (ctx.stop) holds what
 * was not begun. The guard (./guard.ts) still checks each write as it is made.
 */
import {
  type BatchItemResult,
  BatchResults,
  contendedPause,
  type FunctionContext,
  messageOf,
  type Settled,
  type Step,
  type TwopassFunction,
  type Typed,
  type WritePlan,
  writeTombstones,
} from '../contract/index.ts';
import type { Target } from '../engine/types.ts';

const ATTEMPTS = 5;

/** Runs `work` on every item, at most `n` at once. */
async function eachLimited<T>(
  items: readonly T[],
  n: number,
  work: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await work(items[next++]!);
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(n, items.length)) }, worker));
}

/** One batch: its kind's steps, run in order; one result a target. */
export async function removeBatch<R, W>(
  fn: TwopassFunction<R, W>,
  reader: R,
  writer: W,
  targets: readonly Target[],
  ctx: FunctionContext,
): Promise<BatchItemResult[]> {
  return new BatchRun(fn, reader, writer, targets, ctx).run();
}

type Unit = readonly Typed<unknown>[];

/** The state of one batch while its steps run: the results so far, the notes, what the steps carry. */
class BatchRun<R, W> {
  private stopped: string | undefined;
  private readonly ctx: FunctionContext;
  private readonly results: BatchResults;
  private readonly notes = new Map<string, string[]>();
  private readonly carried: unknown[] = [];
  private readonly steps: readonly Step<unknown, R, W>[];
  private readonly mine: readonly Typed<unknown>[];
  private readonly refused: readonly BatchItemResult[];

  private readonly reader: R;
  private readonly writer: W;
  private readonly outer: FunctionContext;

  constructor(
    fn: TwopassFunction<R, W>,
    reader: R,
    writer: W,
    targets: readonly Target[],
    outer: FunctionContext,
  ) {
    this.reader = reader;
    this.writer = writer;
    this.outer = outer;
    this.ctx = {
      ...outer,
      stop: (reason) => {
        this.stopped ??= reason;
        outer.stop?.(reason);
      },
    };
    const { steps, targets: mine, refused } = fn.stepsOf(reader, targets, this.ctx);
    this.steps = steps;
    this.mine = mine;
    this.refused = refused;
    this.results = new BatchResults(mine);
  }

  private settle(s: Settled): void {
    for (const r of s.results ?? []) this.results.set(r);
    for (const [key, text] of s.notes ?? []) this.notes.set(key, [...(this.notes.get(key) ?? []), text]);
    this.carried.push(...(s.carry ?? []));
  }

  private halted(): boolean {
    return this.stopped !== undefined || this.outer.signal.aborted;
  }

  async run(): Promise<BatchItemResult[]> {
    for (const step of this.steps) {
      if (this.halted()) break;
      const own = this.mine.filter((t) => !this.results.has(t.key) && step.takes(t));
      if (own.length === 0 && !(step.forCarried && this.carried.length > 0)) continue;
      const writes = step.each ? own.map((t) => [t]) : [own];
      const written: string[] = [];
      await eachLimited(writes, step.each ? (this.ctx.concurrency ?? 1) : 1, async (unit) => {
        if (this.halted()) return;
        await this.oneWrite(step, unit, written);
      });
      await step.after?.(written, this.results);
    }
    return this.outcomes();
  }

  /** One write of the step: planned, tombstoned, gated, sent, read back; planned again when it lost. */
  private async oneWrite(s: Step<unknown, R, W>, unit: Unit, written: string[]): Promise<void> {
    const attempts = s.attempts ?? ATTEMPTS;
    for (let attempt = 1; attempt <= attempts; attempt++) {
      const pending = unit.filter((t) => !this.results.has(t.key));
      if (attempt > 1 && pending.length === 0 && !s.forCarried) return;
      let plan: WritePlan<R, W>;
      try {
        plan = await s.plan(this.reader, pending, attempt, this.carried);
      } catch (err) {
        for (const t of pending) this.results.set({ key: t.key, outcome: 'failed', error: messageOf(err) });
        return;
      }
      this.settle(plan);
      if (!plan.write) return;
      const keys = plan.removing.map((r) => r.target.key);
      if (!(await this.tombstones(plan, keys))) return;
      const held = await plan.gate?.();
      if (held !== undefined) {
        for (const key of keys) this.results.set({ key, outcome: 'held', reason: held });
        return;
      }
      written.push(...keys);
      if ((await this.send(s, plan, keys, attempt, attempts)) !== 'again') return;
    }
  }

  /** The tombstones of what the write removes, durable before it is sent; false when they are not (nothing of them is written). */
  private async tombstones(plan: WritePlan<R, W>, keys: readonly string[]): Promise<boolean> {
    if (plan.removing.length === 0) return true;
    try {
      await writeTombstones(
        this.ctx,
        plan.removing.map((r) => ({
          key: r.target.key,
          kind: r.target.kind,
          name: r.target.name,
          object: r.object,
          ...(r.restore !== undefined ? { restore: r.restore } : {}),
        })),
      );
      return true;
    } catch (err) {
      const why = messageOf(err);
      for (const key of keys) this.results.set({ key, outcome: 'failed', error: `nothing deleted: ${why}` });
      if (plan.notWritten) this.settle(plan.notWritten(why));
      return false;
    }
  }

  /** The write, then its read-back; 'again' when it lost to another writer and may be planned again. */
  private async send(
    s: Step<unknown, R, W>,
    plan: WritePlan<R, W>,
    keys: readonly string[],
    attempt: number,
    attempts: number,
  ): Promise<'done' | 'again'> {
    let answer: unknown;
    try {
      answer = await plan.write!(this.writer, this.ctx.signal);
    } catch (err) {
      if (s.contended?.(err)) {
        if (attempt < attempts) {
          await contendedPause(attempt, this.ctx);
          return 'again';
        }
        this.settle(
          plan.lost?.(attempts) ?? {
            results: keys.map((key) => ({
              key,
              outcome: 'skipped' as const,
              reason: `the object kept changing (${attempts} conflicts): kept for the next run`,
              contended: true,
            })),
          },
        );
        return 'done';
      }
      this.settle(await this.readBack(plan, { unknown: messageOf(err) }, keys));
      return 'done';
    }
    this.settle(await this.readBack(plan, { answer }, keys));
    return 'done';
  }

  /** The plan's read-back; one that throws leaves each removal failed (not proven either way). */
  private async readBack(
    plan: WritePlan<R, W>,
    answer: { answer: unknown } | { unknown: string },
    keys: readonly string[],
  ): Promise<Settled> {
    // a write nothing reads back is not proven to have happened (decision 0007)
    if (!plan.readBack)
      return {
        results: keys.map((key) => ({
          key,
          outcome: 'failed' as const,
          error: 'unknown' in answer ? answer.unknown : 'the write answered, but its kind reads nothing back',
        })),
      };
    try {
      return await plan.readBack(this.reader, answer);
    } catch (err) {
      return {
        results: keys.map((key) => ({
          key,
          outcome: 'failed' as const,
          error: `${'unknown' in answer ? `${answer.unknown}; ` : ''}read back: ${messageOf(err)}`,
        })),
      };
    }
  }

  /** One result a target: what was not begun held or not attempted; a deleted one's detail with what later steps said. */
  private outcomes(): BatchItemResult[] {
    const stopped = this.stopped;
    if (stopped !== undefined)
      this.results.rest((key) => ({ key, outcome: 'held', reason: `not attempted: ${stopped}` }));
    const out = this.results
      .all(this.outer.signal.aborted ? 'not attempted: the run was stopped' : 'not attempted')
      .map((r): BatchItemResult => {
        const said = this.notes.get(r.key);
        if (!said || (r.outcome !== 'deleted' && r.outcome !== 'gone')) return r;
        return { ...r, detail: [r.detail, said.join(', ')].filter(Boolean).join('; ') };
      });
    return [...out, ...this.refused];
  }
}
