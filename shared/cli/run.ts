/** `twopass run`, `twopass apply --from-report` and `twopass schedule`. */
import { existsSync } from 'node:fs';
import { findFunction, functionsOf } from '../catalogue.ts';
import { ACCEPT_FLOOR_MS, type Config, functionConfig } from '../config.ts';
import type { AnyFunction } from '../contract/index.ts';
import { parseDuration } from '../engine/duration.ts';
import { ConfigError } from '../errors.ts';
import { createLogger, type OutputMode } from '../log/logger.ts';
import { RunMetrics } from '../metrics/metrics.ts';
import { EXIT } from '../runtime/errors.ts';
import { agreeReports, checkReport, describeReport, loadReport } from '../runtime/report.ts';
import type { LogSink } from '../runtime/result.ts';
import { startScheduler } from '../runtime/scheduler.ts';
import { type RunOptions, runFunction } from '../runtime/wire.ts';
import { VERSION } from '../version.ts';
import type { Io } from './io.ts';
import { checkOutputFile, prepareOutputDir } from './outputs.ts';
import { terminalProgress } from './progress.ts';

function pickFunctions(names: readonly string[], all: boolean, cfg: Config): AnyFunction[] {
  const known = functionsOf(cfg);
  if (all && names.length > 0) throw new ConfigError('run: give function names or --all, not both');
  if (all) return [...known];
  if (names.length === 0)
    throw new ConfigError(`run: name a function (${known.map((f) => f.name).join(', ')}) or --all`);
  return names.map((n) => {
    const e = findFunction(n, cfg);
    if (!e) throw new ConfigError(`unknown function \`${n}\`; known: ${known.map((f) => f.name).join(', ')}`);
    return e;
  });
}

type RunFlags = Readonly<{
  /** `--apply` was given (not only `apply: true` in the configuration). */
  apply?: boolean;
  record?: boolean;
  saveSnapshotDir?: string;
  reportFile?: string;
  pushgateway?: string;
  textfile?: string;
}>;

export async function runCommand(
  names: readonly string[],
  all: boolean,
  cfg: Config,
  output: OutputMode,
  io: Io,
  flags: RunFlags,
): Promise<number> {
  const fns = pickFunctions(names, all, cfg).filter(
    (fn) => !all || functionConfig(cfg, fn.name, fn.defaults).enabled,
  );
  if (flags.reportFile && fns.length !== 1)
    throw new ConfigError('--report: name one function (a report is about one function)');
  // A report for review never comes from a run that deletes: without --apply on the command
  // line it is a dry run, whatever `apply:` the configuration gives.
  const code = await runEach(
    fns,
    cfg,
    output,
    io,
    flags,
    flags.reportFile && !flags.apply ? { apply: false } : {},
  );
  if (flags.reportFile && output === 'table' && existsSync(flags.reportFile))
    io.out.write(describeReport(loadReport(flags.reportFile), flags.reportFile));
  return code;
}

/** `twopass apply --from-report FILE`: deletes what the report approved and is still confirmed, unchanged. */
export async function applyCommand(
  rest: readonly string[],
  from: readonly string[],
  apart: string | undefined,
  cfg: Config,
  output: OutputMode,
  io: Io,
  flags: RunFlags,
): Promise<number> {
  // `--from-report A B C` and `--from-report A --from-report B` both name several reports
  const paths = [...from, ...(from.length > 0 ? rest : [])];
  if (paths.length === 0 || (from.length === 0 && rest.length > 0))
    throw new ConfigError('usage: twopass apply --from-report FILE [FILE...] [--apart DURATION]');
  if (apart !== undefined && paths.length < 2)
    throw new ConfigError('--apart: needs two reports or more (--from-report A B)');
  const loaded = paths.map((path) => ({ path, report: loadReport(path) }));
  const first = loaded[0]!;
  const fn = findFunction(first.report.function, cfg);
  if (!fn)
    throw new ConfigError(
      `${first.path}: a report of \`${first.report.function}\`, which is not a known function`,
    );
  const fc = functionConfig(cfg, fn.name, fn.defaults);
  for (const { path, report } of loaded)
    checkReport(path, report, fn, io.time.now(), fc.approval.maxReportAgeMs);
  if (loaded.length === 1)
    return runEach([fn], cfg, output, io, flags, { apply: true, approved: first.report });
  const apartMs = apart === undefined ? 60 * 60_000 : parseDuration(apart);
  if (apartMs === undefined)
    throw new ConfigError(`--apart: expected a duration like \`1h\`, got \`${apart}\``);
  // reports moments apart agree on everything: "agreed across time" switched off without a word
  if (apartMs < ACCEPT_FLOOR_MS)
    throw new ConfigError(
      `--apart: \`${apart}\` is below the floor of \`10m\`: reports that close together prove no agreement across time (to apply one report, give one)`,
    );
  const { report, left } = agreeReports(loaded, apartMs);
  const log = createLogger({ output, stream: io.out, clock: io.time.now });
  for (const l of left)
    log.info(
      { event: 'approval.not-agreed', function: fn.name, key: l.key, name: l.name, reason: l.reason },
      'approval.not-agreed',
    );
  log.info(
    {
      event: 'approval.agreed',
      function: fn.name,
      reports: loaded.length,
      agreed: report.entries.length,
      left: left.length,
    },
    'approval.agreed',
  );
  return runEach([fn], cfg, output, io, flags, { apply: true, approved: report });
}

async function runEach(
  fns: readonly AnyFunction[],
  cfg: Config,
  output: OutputMode,
  io: Io,
  flags: RunFlags,
  extra: Pick<RunOptions, 'apply' | 'approved'>,
): Promise<number> {
  const progress = output === 'table' && io.errTTY ? terminalProgress(io.err, io.time.now) : undefined;
  const log = createLogger({
    output,
    stream: progress ? progress.around(io.out) : io.out,
    clock: io.time.now,
  });
  // Every path the runs write is checked before the first run starts (exit 2, one line).
  if (flags.reportFile) checkOutputFile('--report', flags.reportFile);
  if (flags.textfile) checkOutputFile('--metrics-textfile', flags.textfile);
  if (flags.saveSnapshotDir) prepareOutputDir('--save-snapshot', flags.saveSnapshotDir);
  for (const fn of fns) {
    const dir = functionConfig(cfg, fn.name, fn.defaults).approval.reportDir;
    if (dir) prepareOutputDir(`functions.${fn.name}.approval.reportDir`, dir);
  }
  const controller = new AbortController();
  const stop = () =>
    controller.abort(new Error('interrupted (SIGTERM/SIGINT): deletions not yet started are abandoned'));
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  let exit: number = EXIT.ok;
  const metrics = new RunMetrics(io.time.now, VERSION);
  const logSink = watchSink(io);
  try {
    for (const fn of fns) {
      // --apply on the command line does not override a function the configuration keeps
      // dry (`functions.<name>.apply: false`): the two disagree, so nothing is deleted; said.
      if (flags.apply && extra.apply === undefined && cfg.functions[fn.name]?.apply === false)
        log.warn(
          {
            event: 'run.dry',
            function: fn.name,
            reason: `--apply was given, but functions.${fn.name}.apply is false in ${cfg.source}: a dry run (remove that line to let --apply delete)`,
          },
          'run.dry',
        );
      const r = await runFunction(
        fn,
        cfg,
        {
          time: io.time,
          log,
          hooks: metrics.hooks(),
          processEnv: io.env,
          logSink,
          ...(progress ? { onPage: progress.onPage } : {}),
        },
        {
          ...extra,
          ...(flags.record ? { record: true } : {}),
          signal: controller.signal,
          ...(flags.saveSnapshotDir ? { saveSnapshotDir: flags.saveSnapshotDir } : {}),
          ...(flags.reportFile ? { reportFile: flags.reportFile } : {}),
        },
      );
      if (exit === EXIT.ok && r.exitCode !== EXIT.ok) exit = r.exitCode;
      // A configuration fault found by the run (the state's path or namespace) is said on
      // stderr too, as every other configuration error is.
      if (r.exitCode === EXIT.config && r.error) io.err.write(`twopass: ${fn.name}: ${r.error}\n`);
      if (flags.pushgateway) {
        // Monitoring that cannot be told is an error of the run (exit 1 if nothing worse):
        // the alerts that watch these runs would otherwise go blind without a sign.
        await metrics.push(flags.pushgateway, fn.name).catch((err: Error) => {
          log.error(
            { event: 'metrics.push-failed', function: fn.name, error: err.message },
            'metrics.push-failed',
          );
          if (exit === EXIT.ok) exit = EXIT.error;
        });
      }
    }
    if (flags.textfile) await metrics.writeTextfile(flags.textfile);
  } finally {
    progress?.clear();
    process.off('SIGTERM', stop);
    process.off('SIGINT', stop);
  }
  return exit;
}

/**
 * The diff log's stream as a sink that can be lost: a closed pipe (`| head -1`) or a write
 * error is remembered, so that a deleting run does not start (or go on) without its record.
 */
function watchSink(io: Io): LogSink {
  const gone = new AbortController();
  let why: string | undefined;
  const lose = (reason: string) => {
    if (why !== undefined) return;
    why = reason;
    gone.abort(new Error(`the diff log is gone (${reason})`));
  };
  io.out.on('error', (err: NodeJS.ErrnoException) =>
    lose(err.code === 'EPIPE' ? 'its reader closed the pipe' : `${err.code ?? 'error'}: ${err.message}`),
  );
  io.out.on('close', () => lose('its stream closed'));
  return {
    lost: () => why,
    signal: gone.signal,
    warn: (m) => io.err.write(`${m}\n`),
    // a write's callback runs once the stream took it; a closed pipe's EPIPE is emitted by the next turn
    barrier: async () => {
      if (why === undefined && io.out.writable) await new Promise<void>((r) => io.out.write('', () => r()));
      await new Promise<void>((r) => setImmediate(r));
    },
  };
}

export async function scheduleCommand(
  cfg: Config,
  output: OutputMode,
  io: Io,
  listen: string | undefined,
): Promise<number> {
  let host = cfg.metricsHost;
  let port = cfg.metricsPort;
  if (listen !== undefined) {
    const m = /^(.*):(\d+)$/.exec(listen);
    if (!m) throw new ConfigError(`--listen: expected HOST:PORT, got \`${listen}\``);
    host = m[1]!.replace(/^\[|\]$/g, '');
    port = Number(m[2]);
    if (port > 65535) throw new ConfigError(`--listen: the port is at most 65535, got ${port}`);
  }
  const log = createLogger({ output, stream: io.out, clock: io.time.now });
  const s = await startScheduler(
    cfg,
    { time: io.time, log, processEnv: io.env },
    { host, port, functions: functionsOf(cfg) },
  );
  log.info({ event: 'schedule.listening', url: s.url }, 'schedule.listening');
  await new Promise<void>((resolve) => {
    process.once('SIGTERM', resolve);
    process.once('SIGINT', resolve);
  });
  await s.stop();
  return EXIT.ok;
}
