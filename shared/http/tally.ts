/**
 * Requests a run sends, by API: each run counts its own (its async context), so runs of a
 * scheduler that overlap do not count each other's. `twopass_last_run_requests` reports them.
 */
import { AsyncLocalStorage } from 'node:async_hooks';

const tally = new AsyncLocalStorage<Map<string, number>>();

/** Runs `f` with a fresh tally; returns what it returned and reads the tally through `counts`. */
export function countingRequests<T>(f: (counts: () => Record<string, number>) => Promise<T>): Promise<T> {
  const m = new Map<string, number>();
  return tally.run(m, () => f(() => Object.fromEntries(m)));
}

/** One request sent (each attempt of a retried call counts) to `api`, in the current run's tally. */
export function countRequest(api: string): void {
  const m = tally.getStore();
  if (m) m.set(api, (m.get(api) ?? 0) + 1);
}
