/**
 * A plain `handler(event)` for FaaS runtimes: a JSON event in, the run summary out.
 * Configuration errors are thrown (the runtime reports them); run outcomes are
 * returned, exit code included.
 */
import { randomUUID } from 'node:crypto';
import { envOverrides, type FileConfig, fileSchema, resolveConfig } from '../config.ts';
import { createLogger } from '../log/logger.ts';
import { ConfigError } from './errors.ts';
import type { AnyFunction } from './function.ts';
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
    clock?: () => number;
    stream?: NodeJS.WritableStream;
  } = {},
) {
  return async function handler(event: HandlerEvent | null | undefined): Promise<HandlerResult> {
    const ev = (event ?? {}) as HandlerEvent;
    if (typeof ev !== 'object')
      throw new ConfigError(`${fn.name} handler: the event must be a JSON object, got ${typeof ev}`);
    if (ev.apply !== undefined && typeof ev.apply !== 'boolean')
      throw new ConfigError(
        `${fn.name} handler: \`apply\` must be a boolean, got ${JSON.stringify(ev.apply)}`,
      );
    if (ev.apply === true && ev.dryRun === true)
      throw new ConfigError(`${fn.name} handler: \`apply\` and \`dryRun\` contradict each other`);
    const parsed = fileSchema.safeParse(ev.config ?? {});
    if (!parsed.success) {
      const i = parsed.error.issues[0];
      throw new ConfigError(
        `${fn.name} handler: config \`${i?.path.join('.') || '(root)'}\`: ${i?.message ?? 'invalid'}`,
      );
    }
    const env = io.env ?? process.env;
    const clock = io.clock ?? Date.now;
    const cfg = resolveConfig(parsed.data as FileConfig, 'event', envOverrides(env));
    const log = createLogger({ output: 'json', clock, ...(io.stream ? { stream: io.stream } : {}) });
    const apply = ev.dryRun === true ? false : ev.apply;
    const r = await runFunction(
      fn,
      cfg,
      { clock, log, processEnv: env },
      { ...(apply !== undefined ? { apply } : {}), record: ev.record === true },
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
