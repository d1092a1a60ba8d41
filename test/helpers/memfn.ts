/** The in-memory test function (its own folder) and a log that tests can read. */
import { Writable } from 'node:stream';
import { createLogger } from '../../shared/log/logger.ts';

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
