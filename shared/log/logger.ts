/**
 * The diff-log logger: pino JSON lines on stdout, or the same events rendered as
 * a readable table on a terminal. The clock is injected (pino's timestamp option).
 */
import { Writable } from 'node:stream';
import pino, { type Logger } from 'pino';
import { HEADER, renderRow } from './table.ts';

export type OutputMode = 'json' | 'table';
export type { Logger };

export const REDACT_PATHS = [
  'password',
  'token',
  'secret',
  '*.password',
  '*.token',
  '*.secret',
  '*.application_credential_secret',
  '*.authorization',
  '*.Authorization',
  '*.headers.authorization',
  '*.headers["x-auth-token"]',
  '*.headers["x-subject-token"]',
];

export type LoggerOptions = Readonly<{
  output: OutputMode;
  /** Where lines go (default process.stdout). */
  stream?: NodeJS.WritableStream;
  clock?: () => number;
  level?: string;
}>;

export function createLogger(opts: LoggerOptions): Logger {
  const out = opts.stream ?? process.stdout;
  const clock = opts.clock ?? Date.now;
  let headed = false;
  const dest =
    opts.output === 'table'
      ? new Writable({
          write(chunk: Buffer, _enc, cb) {
            for (const line of chunk.toString().split('\n')) {
              if (!line) continue;
              if (!headed) out.write(`${HEADER}\n`);
              headed = true;
              const row = renderRow(line);
              if (row !== undefined) out.write(`${row}\n`);
            }
            cb();
          },
        })
      : out;
  return pino(
    {
      level: opts.level ?? 'info',
      base: null,
      timestamp: () => `,"time":"${new Date(clock()).toISOString()}"`,
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      formatters: { level: (label) => ({ level: label }) },
    },
    dest as pino.DestinationStream,
  );
}
