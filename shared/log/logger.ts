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

/** Credentials inside text (an error message that quotes a header, a URL, a config line). */
const SECRET_TEXT: readonly [RegExp, string][] = [
  [/\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+/gi, '$1 [redacted]'],
  [
    /\b((?:password|passwd|secret|token|application_credential_secret|x-auth-token|x-subject-token)["']?\s*[:=]\s*["']?)[^\s"',;&}]+/gi,
    '$1[redacted]',
  ],
  [/(\/\/[^/\s:@]+:)[^@\s/]+@/g, '$1[redacted]@'],
];

/** Every string of a log line with the credentials in its text replaced (depth-bounded). */
export function scrub(v: unknown, depth = 0): unknown {
  if (typeof v === 'string') {
    let out = v;
    for (const [re, to] of SECRET_TEXT) out = out.replace(re, to);
    return out;
  }
  if (depth > 6 || v === null || typeof v !== 'object') return v;
  if (Array.isArray(v)) return v.map((x) => scrub(x, depth + 1));
  const o: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v)) o[k] = scrub(x, depth + 1);
  return o;
}

export function createLogger(opts: LoggerOptions): Logger {
  const out = opts.stream ?? process.stdout;
  const clock = opts.clock ?? Date.now;
  const options: pino.LoggerOptions = {
    level: opts.level ?? 'info',
    base: null,
    timestamp: () => `,"time":"${new Date(clock()).toISOString()}"`,
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
    formatters: {
      level: (label) => ({ level: label }),
      log: (o) => scrub(o) as Record<string, unknown>,
    },
    hooks: {
      // the message too (the object's strings are scrubbed by formatters.log)
      logMethod(args, method) {
        method.apply(this, args.map((a) => (typeof a === 'string' ? scrub(a) : a)) as typeof args);
      },
    },
  };
  if (opts.output !== 'table') return pino(options, out as pino.DestinationStream);
  // One pipeline for every output: the table renders the very JSON line pino made, after
  // its redaction, so that nothing reaches a terminal that the JSON log would not show.
  let headed = false;
  let rest = '';
  return pino(
    options,
    new Writable({
      write: (chunk, _enc, cb) => {
        rest += String(chunk);
        let nl = rest.indexOf('\n');
        while (nl >= 0) {
          const line = rest.slice(0, nl);
          rest = rest.slice(nl + 1);
          nl = rest.indexOf('\n');
          if (!line) continue;
          if (!headed) out.write(`${HEADER}\n`);
          headed = true;
          out.write(`${renderEvent(JSON.parse(line) as Record<string, unknown>)}\n`);
        }
        cb();
      },
    }),
  );
}
