/**
 * `twopass schedule`: runs each enabled function on its cron expression
 * (node-cron, noOverlap), serves /healthz and /metrics, and stops cleanly:
 * no new runs start, a running run abandons the deletions it has not started,
 * and the process waits for it.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type ScheduledTask, schedule, validate } from 'node-cron';
import { type Config, functionConfig } from '../config.ts';
import type { AnyFunction } from '../contract/index.ts';
import { ConfigError, messageOf } from '../errors.ts';
import type { Logger } from '../log/logger.ts';
import { RunMetrics } from '../metrics/metrics.ts';
import { VERSION } from '../version.ts';
import type { RunResult } from './result.ts';
import { type Environment, runFunction } from './wire.ts';

export type SchedulerOptions = Readonly<{
  host: string;
  port: number;
  functions: readonly AnyFunction[];
  /** How many of the latest results `results` keeps (default 20). */
  keepResults?: number;
}>;

export type Scheduler = Readonly<{
  url: string;
  metrics: RunMetrics;
  tasks: ReadonlyMap<string, ScheduledTask>;
  /** The latest finished runs (at most `keepResults`), oldest first. */
  results: RunResult[];
  /** Runs finished since the scheduler started. */
  readonly runs: number;
  stop: () => Promise<void>;
}>;

export async function startScheduler(
  cfg: Config,
  env: Environment,
  opts: SchedulerOptions,
): Promise<Scheduler> {
  const metrics = new RunMetrics(env.time.now, VERSION);
  const log: Logger = env.log;
  const controller = new AbortController();
  const running = new Set<Promise<unknown>>();
  const results: RunResult[] = [];
  const keep = opts.keepResults ?? 20;
  const counted = { runs: 0 };
  const tasks = new Map<string, ScheduledTask>();
  const enabled = opts.functions
    .map((fn) => ({ fn, fc: functionConfig(cfg, fn.name, fn.defaults) }))
    .filter((x) => x.fc.enabled);
  if (enabled.length === 0) throw new ConfigError('schedule: no function is enabled');
  for (const { fn, fc } of enabled) {
    if (!validate(fc.schedule))
      throw new ConfigError(
        `functions.${fn.name}.schedule: expected a cron expression (5 or 6 fields), got \`${fc.schedule}\``,
      );
  }
  let stopping = false;
  const server = await serve(metrics, log, () => stopping, opts);
  const addr = server.address() as AddressInfo;
  const url = `http://${addr.address.includes(':') ? `[${addr.address}]` : addr.address}:${addr.port}`;
  const finished = (r: RunResult) => {
    metrics.record(r);
    // The last few results, for tests and the stop message; never every run of a process that runs for months.
    results.push(r);
    if (results.length > keep) results.splice(0, results.length - keep);
    counted.runs++;
  };
  for (const { fn, fc } of enabled) {
    const runOnce = async () => {
      if (stopping) return;
      const p = runFunction(fn, cfg, { ...env, hooks: { finished } }, { signal: controller.signal }).catch(
        (err: Error) =>
          log.error({ event: 'run.aborted', function: fn.name, reason: err.message }, 'run.aborted'),
      );
      running.add(p);
      await p;
      running.delete(p);
    };
    tasks.set(fn.name, scheduleTask(fn.name, fc.schedule, fc.apply, runOnce, log));
  }
  return {
    url,
    metrics,
    tasks,
    results,
    get runs() {
      return counted.runs;
    },
    stop: async () => {
      stopping = true;
      for (const t of tasks.values()) await t.stop();
      controller.abort(new Error('shutting down: deletions not yet started are abandoned'));
      await Promise.allSettled([...running]);
      for (const t of tasks.values()) await t.destroy();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
      log.info({ event: 'schedule.stopped' }, 'schedule.stopped');
    },
  };
}

/** /healthz (503 once stopping) and /metrics (500 for a scrape whose collector fails), listening on HOST:PORT. */
async function serve(
  metrics: RunMetrics,
  log: Logger,
  stopping: () => boolean,
  opts: SchedulerOptions,
): Promise<Server> {
  const server: Server = createServer(async (req, res) => {
    if (req.url === '/healthz') {
      res.writeHead(stopping() ? 503 : 200, { 'content-type': 'text/plain' });
      res.end(stopping() ? 'stopping\n' : 'ok\n');
      return;
    }
    if (req.url === '/metrics') {
      // A collector that fails is a 500 for this scrape, never an unhandled rejection (Node would exit).
      try {
        const text = await metrics.text();
        res.writeHead(200, { 'content-type': metrics.registry.contentType });
        res.end(text);
      } catch (err) {
        log.warn({ event: 'metrics.failed', error: messageOf(err) }, 'metrics.failed');
        if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' });
        res.end('metrics could not be collected\n');
      }
      return;
    }
    res.writeHead(404).end();
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => {
      const why: Record<string, string> = {
        EADDRINUSE: 'the port is in use (another twopass schedule, or another server)',
        EADDRNOTAVAIL: 'the address is not one of this machine',
        EACCES: 'permission denied (a port below 1024 needs privileges)',
        ENOTFOUND: 'the host name does not resolve',
      };
      const known = why[err.code ?? ''];
      reject(
        known
          ? new ConfigError(`--listen ${opts.host}:${opts.port}: cannot listen: ${known}`, { cause: err })
          : err,
      );
    });
    server.listen(opts.port, opts.host, () => resolve());
  });
  return server;
}

/** One function's cron task: never two runs at once (an overlapping tick is logged and skipped). */
function scheduleTask(
  name: string,
  cron: string,
  apply: boolean,
  runOnce: () => Promise<void>,
  log: Logger,
): ScheduledTask {
  const task = schedule(cron, runOnce, { name, noOverlap: true });
  task.on('execution:overlap', () =>
    log.warn(
      { event: 'run.skipped', function: name, reason: 'the previous run is still busy' },
      'run.skipped',
    ),
  );
  log.info(
    {
      event: 'schedule.started',
      function: name,
      schedule: cron,
      apply,
      next: task.getNextRun()?.toISOString(),
    },
    'schedule.started',
  );
  return task;
}
