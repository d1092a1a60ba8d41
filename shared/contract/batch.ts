/** The per-target results of one batch removal (`removeBatch`), in the order of its targets. */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Target } from '../engine/types.ts';
import type { BatchItemResult } from './run.ts';

export class BatchResults {
  private readonly results = new Map<string, BatchItemResult>();
  private readonly keys: readonly string[];

  constructor(targets: readonly Target[]) {
    this.keys = targets.map((t) => t.key);
  }

  get(key: string): BatchItemResult | undefined {
    return this.results.get(key);
  }

  has(key: string): boolean {
    return this.results.has(key);
  }

  set(result: BatchItemResult): void {
    this.results.set(result.key, result);
  }

  skip(key: string, reason: string): void {
    this.results.set(key, { key, outcome: 'skipped', reason });
  }

  /** Every target without a result yet gets this one. */
  rest(result: (key: string) => BatchItemResult): void {
    for (const k of this.keys) if (!this.results.has(k)) this.results.set(k, result(k));
  }

  /** One result a target; those never decided are skipped with `reason`. */
  all(reason: string, contended = false): BatchItemResult[] {
    return this.keys.map(
      (key) =>
        this.results.get(key) ?? { key, outcome: 'skipped', reason, ...(contended ? { contended } : {}) },
    );
  }
}

/**
 * The pause before attempt `attempt + 1` of a write that lost to another writer (a 409 or a
 * failed test): random, up to 250 ms doubled each attempt (250, 500, 1000, 2000 ms), so that
 * a write does not retry in step with a producer's burst of writes to the same object.
 */
export function contendedPause(
  attempt: number,
  ctx: Readonly<{
    signal: AbortSignal;
    sleep?: ((ms: number, signal?: AbortSignal) => Promise<void>) | undefined;
  }>,
  random = Math.random,
): Promise<void> {
  const ms = Math.round(random() * 250 * 2 ** Math.max(0, attempt - 1));
  // the run's clock (a simulated one in tests); without one, the real clock
  return ctx.sleep ? ctx.sleep(ms, ctx.signal) : sleep(ms, undefined, { signal: ctx.signal });
}
