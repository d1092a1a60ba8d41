#!/usr/bin/env node
/**
 * The `twopass` command. Thin: it parses arguments and configuration once,
 * builds dependencies, and calls the same run() as the scheduler and handler.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { FUNCTIONS, findFunction } from '../functions/index.ts';
import {
  type Config,
  describePolicy,
  envOverrides,
  functionConfig,
  loadConfigFile,
  type Overrides,
  resolveConfig,
} from './config.ts';
import { decide } from './engine/decide.ts';
import { diffSnapshots } from './engine/diff.ts';
import { formatDuration } from './engine/duration.ts';
import type { Snapshot } from './engine/types.ts';
import { createLogger, type OutputMode } from './log/logger.ts';
import { RunMetrics } from './metrics/metrics.ts';
import { packageRoot } from './paths.ts';
import { ConfigError, EXIT } from './runtime/errors.ts';
import type { AnyFunction } from './runtime/function.ts';
import { startScheduler } from './runtime/scheduler.ts';
import { checkFunctionsConfig } from './runtime/settings.ts';
import { connectKube, connectPorts, runFunction, stateFor } from './runtime/wire.ts';
import { demo } from './sandbox/demo.ts';

const VERSION = (JSON.parse(readFileSync(join(packageRoot(), 'package.json'), 'utf8')) as { version: string })
  .version;

const COMMON = `Common options:
  --config FILE            YAML config (see README); flags override env, env overrides the file
  --state file:DIR|configmap:NAMESPACE
                           where observations are kept (default file:.twopass)
  --kubeconfig FILE        kubeconfig (default $KUBECONFIG, ~/.kube/config, in-cluster)
  --context NAME           kubeconfig context
  --output json|table      diff-log format (default: table on a terminal, else json)
  -h, --help               help for the command`;

const HELP: Record<string, string> = {
  main: `twopass ${VERSION}: a garbage collector for leaked network resources that deletes
only what two complete snapshots, a grace window apart, both saw unused.

Usage: twopass <command> [options]

Commands:
  run <function...>|--all  observe, decide and (with --apply) delete
  functions                list the functions and their defaults
  state show <function>    show the stored observations
  state reset <function>   forget the observations (deletes no resource)
  state accept-evidence <function>
                           accept today's evidence counts as the baseline (deletes nothing)
  explain <function> <key> why a target is pending, rescued, indeterminate or confirmed
  diff A B                 compare two saved snapshots (--save-snapshot)
  schedule                 run every enabled function on its cron schedule; serve /healthz, /metrics
  demo                     the sandbox: a fake cluster with the DANM incident (npm start)

Run \`twopass <command> --help\` for a command's options. --version prints the version.

Exit codes: 0 ok, 1 unexpected error, 2 bad config/arguments, 3 snapshot incomplete
(aborted, nothing deleted), 4 refused by the blast-radius guard, 5 another run holds the lock.`,
  run: `Usage: twopass run <function...>|--all [options]

Lists targets then evidence, decides with the two-observation rule, and logs what is
new, pending, rescued, reset, indeterminate and confirmed. Dry run by default.

Options:
  --apply                  delete confirmed targets (re-check + server-side precondition)
  --record                 in a dry run, still save observations (so they build up)
  --all                    every enabled function
  --grace DURATION         override every function's grace window (e.g. 15m)
  --deadline DURATION      overall deadline of a run (default 10m)
  --save-snapshot DIR      write each snapshot as JSON into DIR (for \`twopass diff\`)
  --pushgateway URL        push the run's metrics to a Prometheus Pushgateway
  --metrics-textfile PATH  write the run's metrics for node-exporter's textfile collector
${COMMON}`,
  schedule: `Usage: twopass schedule [--config FILE] [--listen HOST:PORT]

Runs each enabled function on its \`schedule\` (cron, 5 or 6 fields; a run never
overlaps the previous one of the same function) and serves /healthz and /metrics on
--listen (default 127.0.0.1:9464, or metricsHost/metricsPort in the config).
SIGTERM/SIGINT: no new runs start, a running run abandons the deletions it has not
started, and the process exits 0 when it is done.
${COMMON}`,
  functions: `Usage: twopass functions [--config FILE]\n\nLists the functions, what they delete and their effective defaults.\n${COMMON}`,
  state: `Usage: twopass state show|reset|accept-evidence <function> [options]

show             prints the stored candidates (first/last unused observation, count)
                 and the evidence baseline
reset            forgets every observation of the function: the next run starts over.
                 It never deletes a resource.
accept-evidence  takes one complete snapshot (read-only, nothing is deleted) and makes
                 its evidence counts the new baseline, keeping every candidate: the way
                 out after a real scale-down refused runs ("evidence ... shrank").
${COMMON}`,
  explain: `Usage: twopass explain <function> <key> [options]

Observes (read-only: nothing is deleted, no state is written) and says what the
engine decides for one target key, next to what the stored state holds for it.
${COMMON}`,
  diff: `Usage: twopass diff A.json B.json\n\nPrints the targets that appeared, vanished, changed, and whose use changed.`,
  demo: `Usage: twopass demo [--output json|table]

Starts a fake Kubernetes API server on 127.0.0.1, seeds the DANM StatefulSet incident,
and runs the real danm-endpoints function against it on a simulated clock.
It needs no cluster and touches nothing outside the sandbox.`,
};

const OPTIONS = {
  help: { type: 'boolean', short: 'h' },
  version: { type: 'boolean' },
  apply: { type: 'boolean' },
  record: { type: 'boolean' },
  all: { type: 'boolean' },
  config: { type: 'string' },
  state: { type: 'string' },
  kubeconfig: { type: 'string' },
  context: { type: 'string' },
  output: { type: 'string' },
  grace: { type: 'string' },
  deadline: { type: 'string' },
  'save-snapshot': { type: 'string' },
  pushgateway: { type: 'string' },
  'metrics-textfile': { type: 'string' },
  listen: { type: 'string' },
} as const;

type Io = {
  out: NodeJS.WritableStream;
  err: NodeJS.WritableStream;
  env: Readonly<Record<string, string | undefined>>;
  isTTY: boolean;
  clock: () => number;
};

export async function main(argv: readonly string[], io: Io): Promise<number> {
  let parsed: ReturnType<
    typeof parseArgs<{ options: typeof OPTIONS; allowPositionals: true; strict: true; args: string[] }>
  >;
  try {
    parsed = parseArgs({ args: [...argv], options: OPTIONS, allowPositionals: true, strict: true });
  } catch (err) {
    io.err.write(`twopass: ${(err as Error).message}\nRun \`twopass --help\` for usage.\n`);
    return EXIT.config;
  }
  const { values: v, positionals } = parsed;
  const [cmd, ...rest] = positionals;
  if (v.version) {
    io.out.write(`twopass ${VERSION}\n`);
    return EXIT.ok;
  }
  if (!cmd || (v.help && !HELP[cmd])) {
    io.out.write(`${HELP.main}\n`);
    return v.help || !cmd ? (cmd ? EXIT.config : v.help ? EXIT.ok : EXIT.config) : EXIT.ok;
  }
  if (v.help) {
    io.out.write(`${HELP[cmd]}\n`);
    return EXIT.ok;
  }
  if (v.output !== undefined && v.output !== 'json' && v.output !== 'table') {
    io.err.write(`twopass: --output: expected json or table, got \`${v.output}\`\n`);
    return EXIT.config;
  }
  const output: OutputMode =
    (v.output as OutputMode | undefined) ??
    (io.env.TWOPASS_OUTPUT as OutputMode | undefined) ??
    (io.isTTY ? 'table' : 'json');
  try {
    switch (cmd) {
      case 'demo': {
        // The sandbox is for reading: a table unless JSON is asked for explicitly.
        const r = await demo({
          output: (v.output as OutputMode | undefined) ?? 'table',
          out: io.out,
          err: io.err,
        });
        return r.ok ? EXIT.ok : EXIT.error;
      }
      case 'diff':
        return diffCommand(rest, io);
      default:
        break;
    }
    const { raw, source } = loadConfigFile(v.config ?? io.env.TWOPASS_CONFIG);
    const flags: Overrides = {
      ...(v.apply ? { apply: true } : {}),
      ...(v.state !== undefined ? { state: v.state } : {}),
      ...(v.kubeconfig !== undefined ? { kubeconfig: v.kubeconfig } : {}),
      ...(v.context !== undefined ? { context: v.context } : {}),
      ...(v.grace !== undefined ? { grace: v.grace } : {}),
      ...(v.deadline !== undefined ? { deadline: v.deadline } : {}),
    };
    const cfg = resolveConfig(raw, source, envOverrides(io.env), flags);
    checkFunctionsConfig(
      cfg.functions,
      FUNCTIONS.map((e) => e.fn),
      `config ${cfg.source}`,
    );
    switch (cmd) {
      case 'run':
        return await runCommand(rest, v.all === true, cfg, output, io, {
          ...(v.record === true ? { record: true } : {}),
          ...(v['save-snapshot'] ? { saveSnapshotDir: v['save-snapshot'] } : {}),
          ...(v.pushgateway ? { pushgateway: v.pushgateway } : {}),
          ...(v['metrics-textfile'] ? { textfile: v['metrics-textfile'] } : {}),
        });
      case 'schedule':
        return await scheduleCommand(cfg, output, io, v.listen);
      case 'functions':
        return functionsCommand(cfg, io);
      case 'state':
        return await stateCommand(rest, cfg, io);
      case 'explain':
        return await explainCommand(rest, cfg, io);
      default:
        io.err.write(`twopass: unknown command \`${cmd}\`\nRun \`twopass --help\` for usage.\n`);
        return EXIT.config;
    }
  } catch (err) {
    if (err instanceof ConfigError) {
      io.err.write(`twopass: ${err.message}\n`);
      return EXIT.config;
    }
    io.err.write(`twopass: ${(err as Error).stack ?? String(err)}\n`);
    return EXIT.error;
  }
}

function pickFunctions(names: readonly string[], all: boolean): AnyFunction[] {
  if (all && names.length > 0) throw new ConfigError('run: give function names or --all, not both');
  if (all) return FUNCTIONS.map((e) => e.fn);
  if (names.length === 0)
    throw new ConfigError(`run: name a function (${FUNCTIONS.map((e) => e.fn.name).join(', ')}) or --all`);
  return names.map((n) => {
    const e = findFunction(n);
    if (!e)
      throw new ConfigError(
        `unknown function \`${n}\`; known: ${FUNCTIONS.map((x) => x.fn.name).join(', ')}`,
      );
    return e.fn;
  });
}

async function runCommand(
  names: readonly string[],
  all: boolean,
  cfg: Config,
  output: OutputMode,
  io: Io,
  opts: { record?: boolean; saveSnapshotDir?: string; pushgateway?: string; textfile?: string },
): Promise<number> {
  for (const f of Object.keys(cfg.functions)) {
    if (f !== '*' && !findFunction(f))
      throw new ConfigError(
        `config ${cfg.source}: \`functions.${f}\`: unknown function; known: ${FUNCTIONS.map((x) => x.fn.name).join(', ')}`,
      );
  }
  const fns = pickFunctions(names, all).filter(
    (fn) => !all || functionConfig(cfg, fn.name, fn.defaults).enabled,
  );
  const log = createLogger({ output, stream: io.out, clock: io.clock });
  const controller = new AbortController();
  const stop = () =>
    controller.abort(new Error('interrupted (SIGTERM/SIGINT): deletions not yet started are abandoned'));
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  let exit: number = EXIT.ok;
  const metrics = new RunMetrics(io.clock);
  try {
    for (const fn of fns) {
      const r = await runFunction(
        fn,
        cfg,
        { clock: io.clock, log, hooks: metrics.hooks(), processEnv: io.env },
        {
          ...(opts.record ? { record: true } : {}),
          signal: controller.signal,
          ...(opts.saveSnapshotDir ? { saveSnapshotDir: opts.saveSnapshotDir } : {}),
        },
      );
      if (exit === EXIT.ok && r.exitCode !== EXIT.ok) exit = r.exitCode;
      if (opts.pushgateway) {
        await metrics
          .push(opts.pushgateway, fn.name)
          .catch((err: Error) =>
            log.warn({ event: 'metrics.push-failed', error: err.message }, 'metrics.push-failed'),
          );
      }
    }
    if (opts.textfile) await metrics.writeTextfile(opts.textfile);
  } finally {
    process.off('SIGTERM', stop);
    process.off('SIGINT', stop);
  }
  return exit;
}

async function scheduleCommand(
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
  }
  const log = createLogger({ output, stream: io.out, clock: io.clock });
  const s = await startScheduler(
    cfg,
    { clock: io.clock, log, processEnv: io.env },
    { host, port, functions: FUNCTIONS.map((e) => e.fn) },
  );
  log.info({ event: 'schedule.listening', url: s.url }, 'schedule.listening');
  await new Promise<void>((resolve) => {
    process.once('SIGTERM', resolve);
    process.once('SIGINT', resolve);
  });
  await s.stop();
  return EXIT.ok;
}

function functionsCommand(cfg: Config, io: Io): number {
  for (const { fn } of FUNCTIONS) {
    const fc = functionConfig(cfg, fn.name, fn.defaults);
    io.out.write(
      `${fn.name}${fc.enabled ? '' : ' (disabled)'}\n  ${fn.description}\n  schedule ${fc.schedule}, ${fc.apply ? 'apply' : 'dry run'}\n  ${describePolicy(fc.policy)}\n`,
    );
  }
  return EXIT.ok;
}

async function stateCommand(args: readonly string[], cfg: Config, io: Io): Promise<number> {
  const [sub, name] = args;
  if ((sub !== 'show' && sub !== 'reset' && sub !== 'accept-evidence') || !name)
    throw new ConfigError('usage: twopass state show|reset|accept-evidence <function>');
  const entry = findFunction(name);
  if (!entry)
    throw new ConfigError(
      `unknown function \`${name}\`; known: ${FUNCTIONS.map((x) => x.fn.name).join(', ')}`,
    );
  if (sub === 'accept-evidence') return acceptEvidenceCommand(entry.fn, cfg, io);
  const kube =
    cfg.state.kind === 'configmap'
      ? await connectKube(cfg, { clock: io.clock, log: createLogger({ output: 'json' }) })
      : undefined;
  try {
    const { store } = stateFor(cfg, kube);
    if (sub === 'reset') {
      const removed = await store.reset(name);
      io.out.write(
        removed
          ? `state of ${name} in ${store.description} reset: observation starts over (no resource was deleted)\n`
          : `no state for ${name} in ${store.description}\n`,
      );
      return EXIT.ok;
    }
    const { state, version } = await store.load(name);
    const cands = Object.entries(state.candidates);
    io.out.write(
      `${name}: ${store.description}${version ? ` (version ${version})` : ' (nothing stored yet)'}\n`,
    );
    if (state.lastSnapshot) {
      const s = state.lastSnapshot;
      io.out.write(
        `last snapshot ${s.id} at ${new Date(s.takenAt).toISOString()}: ${Object.entries(s.counts)
          .map(([k, c]) => `${k}=${c}`)
          .join(' ')}\n`,
      );
    }
    io.out.write(`${cands.length} candidate(s)\n`);
    for (const [key, c] of cands.sort((a, b) => a[1].firstUnusedAt - b[1].firstUnusedAt)) {
      io.out.write(
        `  ${c.kind.padEnd(10)} ${c.name.padEnd(40)} unused since ${new Date(c.firstUnusedAt).toISOString()} (${c.observations}x, for ${formatDuration(io.clock() - c.firstUnusedAt)})  key ${key}\n`,
      );
    }
    return EXIT.ok;
  } finally {
    await kube?.close();
  }
}

/** A dry run that records, with the evidence guard's drop accepted: nothing is deleted. */
async function acceptEvidenceCommand(fn: AnyFunction, cfg: Config, io: Io): Promise<number> {
  const lines: Record<string, unknown>[] = [];
  const log = createLogger({
    output: 'json',
    stream: {
      write: (chunk: string) => {
        for (const l of chunk.split('\n')) if (l.trim()) lines.push(JSON.parse(l) as Record<string, unknown>);
      },
    } as never,
    clock: io.clock,
  });
  const r = await runFunction(
    fn,
    { ...cfg, apply: false },
    { clock: io.clock, log, processEnv: io.env },
    { apply: false, record: true, acceptEvidence: true },
  );
  const accepted = lines.find((l) => l.event === 'evidence.accepted');
  const taken = lines.find((l) => l.event === 'snapshot.taken');
  if (r.exitCode !== EXIT.ok) {
    const why = String(
      lines.find((l) => l.event === 'run.refused' || l.event === 'run.aborted')?.reason ?? r.error,
    );
    io.err.write(
      `twopass: ${fn.name}: nothing accepted, the snapshot was not taken or was refused: ${why}\n`,
    );
    return r.exitCode;
  }
  const counts = (accepted?.counts ?? {}) as Record<string, { was: number; now: number }>;
  const sources = ((taken?.sources ?? []) as { name: string; role: string; count: number }[]).filter(
    (x) => x.role === 'evidence',
  );
  io.out.write(
    accepted
      ? `${fn.name}: accepted the evidence counts of snapshot ${r.snapshotId} as the new baseline: ${Object.entries(
          counts,
        )
          .map(([k, c]) => `${k} ${c.was} -> ${c.now}`)
          .join(', ')}. The candidates were kept; nothing was deleted.\n`
      : `${fn.name}: no evidence drop to accept; the baseline is now snapshot ${r.snapshotId} (${sources.map((x) => `${x.name}=${x.count}`).join(' ')}). Nothing was deleted.\n`,
  );
  return EXIT.ok;
}

async function explainCommand(args: readonly string[], cfg: Config, io: Io): Promise<number> {
  const [name, key] = args;
  if (!name || !key) throw new ConfigError('usage: twopass explain <function> <key>');
  const entry = findFunction(name);
  if (!entry) throw new ConfigError(`unknown function \`${name}\``);
  const fn = entry.fn;
  const kube = await connectKube(cfg, { clock: io.clock, log: createLogger({ output: 'json' }) });
  try {
    const { store } = stateFor(cfg, kube);
    const { state } = await store.load(name);
    const fc = functionConfig(cfg, name, fn.defaults);
    const now = io.clock();
    const ports = await connectPorts(fn, kube, cfg, fc.settings, io.env, io.clock);
    const obs = await fn.observe(ports.reader, {
      now,
      signal: AbortSignal.timeout(cfg.deadlineMs),
      settings: { pageSize: cfg.pageSize, ...fc.settings },
      note: () => {},
    });
    await ports.close();
    const snapshot: Snapshot = { id: 'explain', function: name, takenAt: now, ...obs };
    const d = decide(state, snapshot, fc.policy, now);
    const target = snapshot.targets.find((t) => t.key === key);
    const stored = state.candidates[key];
    io.out.write(`${name} ${key}\n`);
    io.out.write(
      target
        ? `  target: ${target.kind} ${target.name} (fingerprint ${target.fingerprint})\n`
        : "  not a target in a fresh snapshot (gone, out of scope, or not this function's)\n",
    );
    const note = target ? fn.kindNotes?.[target.kind] : undefined;
    if (note) io.out.write(`  note: ${note}\n`);
    io.out.write(
      stored
        ? `  stored: candidate since ${new Date(stored.firstUnusedAt).toISOString()}, seen unused ${stored.observations}x, fingerprint ${stored.fingerprint}\n`
        : '  stored: not a candidate\n',
    );
    const events = d.diff.events.filter((e) => 'key' in e && e.key === key);
    if (d.diff.outcome !== 'ok')
      io.out.write(
        `  this run would be ${d.diff.outcome}: ${d.diff.events
          .filter((e) => e.event === 'run.refused' || e.event === 'run.aborted')
          .map((e) => ('reason' in e ? e.reason : ''))
          .join('; ')}\n`,
      );
    if (target && events.length === 0) io.out.write('  now: in use (evidence found), not a candidate\n');
    for (const e of events)
      io.out.write(
        `  now: ${e.event}${'reason' in e ? `: ${e.reason}` : ''}${'timeLeftMs' in e ? `: ${formatDuration(e.timeLeftMs)} left (${e.waitingFor})` : ''}${'unusedForMs' in e ? ` (unused for ${formatDuration(e.unusedForMs)})` : ''}\n`,
      );
    io.out.write(`  policy: ${describePolicy(fc.policy)}\n`);
    return EXIT.ok;
  } finally {
    await kube.close();
  }
}

function diffCommand(args: readonly string[], io: Io): number {
  const [a, b] = args;
  if (!a || !b) throw new ConfigError('usage: twopass diff A.json B.json');
  const load = (p: string) => {
    try {
      return JSON.parse(readFileSync(p, 'utf8')) as Snapshot;
    } catch (err) {
      throw new ConfigError(`${p}: not a saved snapshot: ${(err as Error).message}`);
    }
  };
  const sa = load(a);
  const sb = load(b);
  const d = diffSnapshots(sa, sb);
  io.out.write(
    `${sa.function} ${new Date(sa.takenAt).toISOString()} -> ${new Date(sb.takenAt).toISOString()}\n`,
  );
  for (const t of d.appeared) io.out.write(`+ appeared     ${t.kind} ${t.name} (${t.key})\n`);
  for (const t of d.vanished) io.out.write(`- vanished     ${t.kind} ${t.name} (${t.key})\n`);
  for (const c of d.changed)
    io.out.write(
      `~ changed      ${c.after.kind} ${c.after.name}: ${c.before.fingerprint} -> ${c.after.fingerprint}\n`,
    );
  for (const k of d.becameUsed) io.out.write(`  now used     ${k}\n`);
  for (const k of d.becameUnused) io.out.write(`  now unused   ${k}\n`);
  for (const k of d.becameIndeterminate) io.out.write(`? indeterminate ${k}\n`);
  const n =
    d.appeared.length +
    d.vanished.length +
    d.changed.length +
    d.becameUsed.length +
    d.becameUnused.length +
    d.becameIndeterminate.length;
  if (n === 0) io.out.write('no differences\n');
  return EXIT.ok;
}

if (import.meta.main) {
  const code = await main(process.argv.slice(2), {
    out: process.stdout,
    err: process.stderr,
    env: process.env,
    isTTY: process.stdout.isTTY === true,
    clock: Date.now,
  });
  process.exitCode = code;
}
