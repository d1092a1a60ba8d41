/**
 * Time for tests: `now` from the given clock, sleeps that return at once (recorded, so a
 * test can assert the backoff asked for), and timeouts on the real clock (they only fire
 * in a test whose server hangs on purpose, with a short call timeout).
 */
import { instantTime, type Time } from '../../shared/time.ts';

export type TestTime = Time & { readonly sleeps: number[] };

export function testTime(now: () => number = Date.now, sleeps: number[] = []): TestTime {
  return { ...instantTime(now, { sleeps, realTimeouts: true }), sleeps };
}

export type ManualTime = Time & {
  /** Moves the clock forward, waking every sleep and timeout that falls due, in order. */
  advance: (ms: number) => Promise<void>;
  /** Sleeps not yet due. */
  readonly pending: () => number;
};

/**
 * A simulated clock that moves only when the test says so: sleeps and timeouts wait for
 * `advance`. For code whose timers are the subject of the test (Lease renewal).
 */
export function manualTime(start: number): ManualTime {
  let now = start;
  const waiting = new Set<{ at: number; fire: () => void }>();
  const after = (ms: number, fire: () => void, signal?: AbortSignal) => {
    const w = { at: now + ms, fire };
    waiting.add(w);
    signal?.addEventListener('abort', () => waiting.delete(w), { once: true });
    return w;
  };
  return {
    now: () => now,
    sleep: (ms, signal) =>
      new Promise<void>((resolve, reject) => {
        if (signal?.aborted) return reject(signal.reason);
        after(ms, resolve, signal);
        signal?.addEventListener('abort', () => reject(signal.reason), { once: true });
      }),
    timeout: (ms) => {
      const c = new AbortController();
      after(ms, () => c.abort(new DOMException('simulated timeout', 'TimeoutError')));
      return c.signal;
    },
    advance: async (ms) => {
      const until = now + ms;
      for (;;) {
        const due = [...waiting].filter((w) => w.at <= until).sort((a, b) => a.at - b.at)[0];
        if (!due) break;
        waiting.delete(due);
        now = Math.max(now, due.at);
        due.fire();
        // let what the timer woke run up to its next await on I/O or time
        await new Promise((r) => setImmediate(r));
      }
      now = until;
    },
    pending: () => waiting.size,
  };
}

/**
 * Waits (on the real clock, polling) until `f` yields a value: for work that runs on real
 * I/O after a simulated timer fired. Not a sleep: it returns as soon as the condition holds.
 */
export async function eventually<T>(
  what: string,
  f: () => T | undefined | false | Promise<T | undefined | false>,
  ms = 15_000,
): Promise<T> {
  const until = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
