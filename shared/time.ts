/**
 * Time as a port: reading the clock, sleeping and timing out. Entry points pass
 * `systemTime`; everything below them takes a `Time`, so tests run on a simulated
 * clock and never wait for a real one.
 */

export type Time = Readonly<{
  now: () => number;
  /** Resolves after `ms` (rejects with the signal's reason when it aborts first). */
  sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** A signal that aborts with a TimeoutError after `ms`. */
  timeout: (ms: number) => AbortSignal;
}>;

export const systemTime: Time = {
  now: () => Date.now(),
  sleep: (ms, signal) =>
    new Promise<void>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const t = setTimeout(() => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      }, ms);
      const onAbort = () => {
        clearTimeout(t);
        reject(signal?.reason);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
    }),
  timeout: (ms) => AbortSignal.timeout(ms),
};

/** A Time whose sleeps return at once and whose timeouts never fire: reads only `now`. */
export function instantTime(now: () => number): Time {
  return {
    now,
    sleep: async (_ms, signal) => {
      if (signal?.aborted) throw signal.reason;
    },
    timeout: () => new AbortController().signal,
  };
}
