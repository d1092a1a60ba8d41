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
  let stopped: string | undefined;
  const run: FunctionContext = {
    ...ctx,
    stop: (reason) => {
      stopped ??= reason;
      ctx.stop?.(reason);
    },
  };
  const { steps, targets: mine, refused } = fn.stepsOf(reader, targets, run);
  const results = new BatchResults(mine);
  const notes = new Map<string, string[]>();
  const carried: unknown[] = [];
  const settle = (s: Settled) => {
    for (const r of s.results ?? []) results.set(r);
    for (const [key, text] of s.notes ?? []) notes.set(key, [...(notes.get(key) ?? []), text]);
    carried.push(...(s.carry ?? []));
  };
  const halted = () => stopped !== undefined || ctx.signal.aborted;

  for (const step of steps) {
    if (halted()) break;
    const own = mine.filter((t) => !results.has(t.key) && step.takes(t));
    if (own.length === 0 && !(step.forCarried && carried.length > 0)) continue;
    const writes = step.each ? own.map((t) => [t]) : [own];
    const written: string[] = [];
    await eachLimited(writes, step.each ? (run.concurrency ?? 1) : 1, async (unit) => {
      if (halted()) return;
      await oneWrite(step, unit);
    });
    await step.after?.(written, results);

    /** One write of the step: planned, tombstoned, gated, sent, read back; planned again when it lost. */
    async function oneWrite(s: Step<unknown, R, W>, unit: readonly Typed<unknown>[]): Promise<void> {
      const attempts = s.attempts ?? ATTEMPTS;
      for (let attempt = 1; attempt <= attempts; attempt++) {
        const pending = unit.filter((t) => !results.has(t.key));
        if (attempt > 1 && pending.length === 0 && !s.forCarried) return;
        let plan: WritePlan<R, W>;
        try {
          plan = await s.plan(reader, pending, attempt, carried);
        } catch (err) {
          for (const t of pending) results.set({ key: t.key, outcome: 'failed', error: messageOf(err) });
          return;
        }
        settle(plan);
        if (!plan.write) return;
        const keys = plan.removing.map((r) => r.target.key);
        try {
          if (plan.removing.length > 0)
            await writeTombstones(
              run,
              plan.removing.map((r) => ({
                key: r.target.key,
                kind: r.target.kind,
                name: r.target.name,
                object: r.object,
                ...(r.restore !== undefined ? { restore: r.restore } : {}),
              })),
            );
        } catch (err) {
          const why = messageOf(err);
          for (const key of keys) results.set({ key, outcome: 'failed', error: `nothing deleted: ${why}` });
          if (plan.notWritten) settle(plan.notWritten(why));
          return;
        }
        const held = await plan.gate?.();
        if (held !== undefined) {
          for (const key of keys) results.set({ key, outcome: 'held', reason: held });
          return;
        }
        written.push(...keys);
        let answer: unknown;
        try {
          answer = await plan.write(writer, run.signal);
        } catch (err) {
          if (s.contended?.(err)) {
            if (attempt < attempts) {
              await contendedPause(attempt, run);
              continue;
            }
            settle(
              plan.lost?.(attempts) ?? {
                results: keys.map((key) => ({
                  key,
                  outcome: 'skipped' as const,
                  reason: `the object kept changing (${attempts} conflicts): kept for the next run`,
                  contended: true,
                })),
              },
            );
            return;
          }
          settle(await readBack(plan, { unknown: messageOf(err) }, keys));
          return;
        }
        settle(await readBack(plan, { answer }, keys));
        return;
      }
    }
  }

  /** The plan's read-back; one that throws leaves each removal failed (not proven either way). */
  async function readBack(
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
      return await plan.readBack(reader, answer);
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

  if (stopped !== undefined)
    results.rest((key) => ({ key, outcome: 'held', reason: `not attempted: ${stopped}` }));
  // a deleted target's detail, with what the later steps said of it
  const out = results
    .all(ctx.signal.aborted ? 'not attempted: the run was stopped' : 'not attempted')
    .map((r): BatchItemResult => {
      const said = notes.get(r.key);
      if (!said || (r.outcome !== 'deleted' && r.outcome !== 'gone')) return r;
      return { ...r, detail: [r.detail, said.join(', ')].filter(Boolean).join('; ') };
    });
  return [...out, ...refused];
}
