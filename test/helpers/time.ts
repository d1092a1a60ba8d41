/**
 * Time for tests: `now` from the given clock, sleeps that return at once (recorded, so a
 * test can assert the backoff asked for), and timeouts on the real clock (they only fire
 * in a test whose server hangs on purpose, with a short call timeout).
 */
import type { Time } from '../../shared/time.ts';

export type TestTime = Time & { readonly sleeps: number[] };

export function testTime(now: () => number = Date.now, sleeps: number[] = []): TestTime {
  return {
    sleeps,
    now,
    sleep: async (ms, signal) => {
      sleeps.push(ms);
      if (signal?.aborted) throw signal.reason;
    },
    timeout: (ms) => AbortSignal.timeout(ms),
  };
}
