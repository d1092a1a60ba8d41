/**
 * The diff-log logger: pino JSON lines on stdout, or the same events rendered as
 * a readable table on a terminal. The clock is injected (pino's timestamp option).
 */
import { Writable } from 'node:stream';
import pino, { type Logger } from 'pino';
import { HEADER, renderEvent } from './table.ts';

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
  const options: pino.LoggerOptions = {
    level: opts.level ?? 'info',
    base: null,
    timestamp: () => `,"time":"${new Date(clock()).toISOString()}"`,
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
    formatters: { level: (label) => ({ level: label }) },
  };
  if (opts.output !== 'table') return pino(options, out as pino.DestinationStream);
  // The table renders each event from its values (the logger's bindings and the call's
  // object) before any JSON is made; nothing is serialised and parsed back.
  let headed = false;
  return pino(
    {
      ...options,
      hooks: {
        logMethod(args) {
          const [first, msg] = args as unknown as [unknown, unknown];
          const fields =
            first !== null && typeof first === 'object' ? (first as Record<string, unknown>) : {};
          const event = {
            ...(this.bindings() as Record<string, unknown>),
            ...fields,
            ...(typeof first === 'string' ? { msg: first } : typeof msg === 'string' ? { msg } : {}),
            time: new Date(clock()).toISOString(),
          };
          if (!headed) out.write(`${HEADER}\n`);
          headed = true;
          out.write(`${renderEvent(event)}\n`);
        },
      },
    },
    new Writable({ write: (_chunk, _enc, cb) => cb() }),
  );
}
