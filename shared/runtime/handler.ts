/**
 * A plain `handler(event)` for FaaS runtimes: a JSON event in, the run summary out.
 * Configuration errors are thrown (the runtime reports them); run outcomes are
 * returned, exit code included.
 */
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { envOverrides, type FileConfig, fileSchema, resolveConfig } from '../config.ts';
import type { AnyFunction } from '../contract/index.ts';
import { describeValue } from '../contract/settings.ts';
import { ConfigError, issuesText } from '../errors.ts';
import { createLogger } from '../log/logger.ts';
import { systemTime, type Time } from '../time.ts';
import type { RunResult } from './run.ts';
import { runFunction } from './wire.ts';

export type HandlerEvent = Readonly<{
  /** Delete confirmed targets (default: the config's `apply`, itself false by default). */
  apply?: boolean;
  dryRun?: boolean;
  /** Save observations in a dry run. */
  record?: boolean;
  /** The same keys as the YAML config file. */
  config?: unknown;
}>;

const bool = (key: string) =>
  z
    .boolean({ error: (i) => `expected \`${key}\` to be true or false, got ${describeValue(i.input)}` })
    .optional();

const eventSchema = z
  .object(
    {
      apply: bool('apply'),
      dryRun: bool('dryRun'),
      record: bool('record'),
      config: z
        .record(z.string(), z.unknown(), {
          error: (i) => `expected the config as an object, got ${describeValue(i.input)}`,
        })
        .optional(),
    },
    { error: (i) => `the event must be a JSON object, got ${describeValue(i.input)}` },
  )
  .strict();

export type HandlerResult = Omit<RunResult, 'confirmed' | 'deleted' | 'skipped' | 'failed'> & {
  confirmed: number;
  deleted: string[];
  skipped: string[];
  failed: string[];
  requestId: string;
};

export function makeHandler(
  fn: AnyFunction,
  io: {
    env?: Readonly<Record<string, string | undefined>>;
    time?: Time;
    stream?: NodeJS.WritableStream;
  } = {},
) {
  return async function handler(event: HandlerEvent | null | undefined): Promise<HandlerResult> {
    // Strict: anything malformed is an error before any I/O; only the boolean `true` deletes.
    const e = eventSchema.safeParse(event ?? {});
    if (!e.success)
      throw new ConfigError(issuesText(e.error, { where: `${fn.name} handler`, root: '(event)' }));
    const ev = e.data;
    if (ev.apply === true && ev.dryRun === true)
      throw new ConfigError(`${fn.name} handler: \`apply\` and \`dryRun\` contradict each other`);
    const parsed = fileSchema.safeParse(ev.config ?? {});
    if (!parsed.success) {
      throw new ConfigError(`${fn.name} handler: config ${issuesText(parsed.error, { first: true })}`);
    }
    const env = io.env ?? process.env;
    const time = io.time ?? systemTime;
    const cfg = resolveConfig(parsed.data as FileConfig, 'event', envOverrides(env));
    const log = createLogger({
      output: 'json',
      clock: time.now,
      ...(io.stream ? { stream: io.stream } : {}),
    });
    const apply = ev.dryRun === true ? false : ev.apply;
    const r = await runFunction(
      fn,
      cfg,
      { time, log, processEnv: env },
      {
        ...(apply !== undefined ? { apply } : {}),
        ...(ev.record !== undefined ? { record: ev.record } : {}),
      },
    );
    return {
      ...r,
      confirmed: r.confirmed.length,
      deleted: [...r.deleted],
      skipped: [...r.skipped],
      failed: [...r.failed],
      requestId: randomUUID(),
    };
  };
}
