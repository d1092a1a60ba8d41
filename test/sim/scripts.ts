/** Named incident scenarios: a scripted world, the same script for every cleaner. */
import { type Cleaner, MIN, type World } from './harness.ts';

export type Script<W extends World> = Readonly<{
  name: string;
  /** The incident in ../shared/reference/incidents.md it replays. */
  incident: string;
  minutes: number;
  intervalMinutes: number;
  setup: (w: W, now: number) => void;
  /** Scripted events by minute. */
  at?: Readonly<Record<number, (w: W, now: number) => void>>;
  /** Runs before the Nth list call of the run at the given minute (the world moves mid-run). */
  midRun?: Readonly<{ minute: number; listCall: number; run: (w: W, now: number) => void }>;
  /**
   * Runs before the Nth write of the run at the given minute (between a batch's evidence read
   * and its writes); `advance` moves the simulated clock (evidence ages mid-run).
   */
  midWrite?: Readonly<{
    minute: number;
    writeCall: number;
    run: (w: W, now: number, advance: (ms: number) => void) => void;
  }>;
  /** What must hold at the end besides safety (each string a failure). */
  expect?: (w: W) => string[];
  /** Orphans that must be gone at the end (liveness in the script). */
  mustReclaim?: boolean;
  /** Which world layout the script runs in (the world factory's variant; default 0). */
  variant?: number;
  /** twopass runs with this policy here (e.g. the evidence guard at its default). */
  policy?: import('../../shared/engine/types.ts').Policy;
}>;

export type ScriptResult = { violations: string[]; orphansLeft: number };

export async function runScript<W extends World>(
  makeWorld: (clock: () => number, variant?: number) => W,
  makeCleaner: (w: W, clock: () => number) => Cleaner,
  s: Script<W>,
): Promise<ScriptResult> {
  const clock = { now: Date.parse('2026-01-01T00:00:00Z') };
  const w = makeWorld(() => clock.now, s.variant);
  const cleaner = makeCleaner(w, () => clock.now);
  s.setup(w, clock.now);
  let minute = 0;
  let calls = 0;
  let writes = 0;
  w.setInterleave(
    () => {
      calls++;
      if (s.midRun && minute === s.midRun.minute && calls === s.midRun.listCall) s.midRun.run(w, clock.now);
    },
    () => {
      writes++;
      if (s.midWrite && minute === s.midWrite.minute && writes === s.midWrite.writeCall)
        s.midWrite.run(w, clock.now, (ms) => {
          clock.now += ms;
        });
    },
  );
  for (minute = 0; minute <= s.minutes; minute++) {
    clock.now += MIN;
    w.tick(clock.now);
    s.at?.[minute]?.(w, clock.now);
    if (minute % s.intervalMinutes === 0) {
      calls = 0;
      writes = 0;
      await cleaner.run(clock.now);
    }
  }
  return { violations: [...w.violations, ...(s.expect?.(w) ?? [])], orphansLeft: w.orphans().size };
}
