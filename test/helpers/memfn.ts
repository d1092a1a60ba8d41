/** The in-memory test function (its own folder) and a log that tests can read. */
import { Writable } from 'node:stream';
import { createLogger } from '../../shared/log/logger.ts';

/** The defaults of a test-only function: every minute, a minute's grace, no blast-radius guard. */
export const TEST_DEFAULTS = {
  schedule: '* * * * *',
  graceMs: 60_000,
  maxDeletions: 10,
  maxDeletionPercent: 100,
  maxEvidenceDropPercent: 100,
} as const;

export { MEM, memFunction, type Thing, type World, world } from '../functions/mem-things/index.ts';

export function captureLog(clock: () => number) {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _e, cb) {
      for (const l of chunk.toString().split('\n'))
        if (l) lines.push(JSON.parse(l) as Record<string, unknown>);
      cb();
    },
  });
  const log = createLogger({ output: 'json', stream, clock });
  return { log, lines, events: (name: string) => lines.filter((l) => l.event === name) };
}
