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

/**
 * A Time whose sleeps return at once (each recorded in `sleeps`, when given): reads only
 * `now`. Its timeouts never fire, or fire on the real clock with `realTimeouts` (a test
 * whose server hangs on purpose, with a short call timeout). The sandbox and the tests
 * share it.
 */
export function instantTime(
  now: () => number,
  opts: Readonly<{ sleeps?: number[]; realTimeouts?: boolean }> = {},
): Time {
  return {
    now,
    sleep: async (ms, signal) => {
      opts.sleeps?.push(ms);
      if (signal?.aborted) throw signal.reason;
    },
    timeout: opts.realTimeouts ? (ms) => AbortSignal.timeout(ms) : () => new AbortController().signal,
  };
}

/**
 * The system clock, started at `startMs` instead of now (it then advances in real time):
 * `TWOPASS_CLOCK_START` (epoch ms), read only by the command's entry point. Tests of whole
 * processes use it to place each run on one timeline (a Lease left by a killed run, then a
 * run past its expiry) without waiting for the real clock.
 */
export function shiftedTime(startMs: number): Time {
  const offset = startMs - Date.now();
  return { ...systemTime, now: () => Date.now() + offset };
}

/** `shiftedTime` from the environment, when `TWOPASS_CLOCK_START` is set; else the system clock. */
export function timeFromEnv(env: Readonly<Record<string, string | undefined>>): Time {
  const start = env.TWOPASS_CLOCK_START;
  if (start === undefined || start === '') return systemTime;
  const ms = Number(start);
  if (!Number.isFinite(ms) || ms <= 0)
    throw new Error(`TWOPASS_CLOCK_START: expected epoch milliseconds, got \`${start}\``);
  return shiftedTime(ms);
}
