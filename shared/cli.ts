#!/usr/bin/env node
/**
 * The `twopass` command. Thin: it parses arguments and configuration once, then loads
 * the one subcommand asked for (and only its dependencies), which builds its clients
 * and calls the same run() as the scheduler and handler.
 */
import { parseArgs } from 'node:util';
import { reportFailure, tolerateClosedPipe } from './cli/exit.ts';
import { HELP, VERSION } from './cli/help.ts';
import type { Io } from './cli/io.ts';
import { envOverrides, loadConfigFile, type Overrides, resolveConfig } from './config.ts';
import type { OutputMode } from './log/logger.ts';
import { EXIT } from './runtime/errors.ts';
import { systemTime, timeFromEnv } from './time.ts';

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
  report: { type: 'string' },
  'from-report': { type: 'string', multiple: true },
  apart: { type: 'string' },
  key: { type: 'string', multiple: true },
  run: { type: 'string' },
  last: { type: 'string' },
  pushgateway: { type: 'string' },
  'metrics-textfile': { type: 'string' },
  listen: { type: 'string' },
  namespace: { type: 'string' },
  image: { type: 'string' },
} as const;

/** The options each command takes (besides --help): any other is a usage error that names it. */
const CONNECT = ['config', 'state', 'kubeconfig', 'context', 'output', 'grace', 'deadline'] as const;
const TAKES: Readonly<Record<string, readonly string[]>> = {
  run: [...CONNECT, 'apply', 'record', 'all', 'save-snapshot', 'report', 'pushgateway', 'metrics-textfile'],
  apply: [...CONNECT, 'from-report', 'apart', 'pushgateway', 'metrics-textfile'],
  schedule: [...CONNECT, 'listen'],
  functions: ['config', 'output', 'grace'],
  state: CONNECT,
  restore: [...CONNECT, 'apply', 'key', 'run'],
  explain: CONNECT,
  history: [...CONNECT, 'run', 'last'],
  diff: ['output'],
  demo: ['output'],
  rules: ['output', 'namespace', 'image'],
};

/** The edit distance of two short strings (for "did you mean"). */
function distance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++)
      row[j] = Math.min(prev[j]! + 1, row[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    prev = row;
  }
  return prev[b.length]!;
}

/** The known option nearest to an unknown one, when it is near enough to be a typo. */
function nearestOption(name: string): string | undefined {
  let best: string | undefined;
  let bestD = Number.POSITIVE_INFINITY;
  for (const o of Object.keys(OPTIONS)) {
    const d = distance(name, o);
    if (d < bestD) [best, bestD] = [o, d];
  }
  return best !== undefined && (bestD <= 2 || best.startsWith(name) || name.startsWith(best))
    ? best
    : undefined;
}

/** One line for what node:util's parseArgs refused (its own wording spans lines and mentions `--`). */
function usageError(err: Error & { code?: string }, argv: readonly string[]): string {
  const opt = /'(-{1,2}[^' <]+)/.exec(err.message)?.[1] ?? '';
  const name = opt.replace(/^-+/, '');
  const help = 'Run `twopass --help` for usage.';
  if (err.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') {
    const near = nearestOption(name);
    return `${opt}: unknown option${near ? ` (did you mean --${near}?)` : ''}. ${help}`;
  }
  if (err.code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE') {
    if (/does not take an argument/.test(err.message)) return `${opt}: takes no value. ${help}`;
    const next = argv[argv.indexOf(opt) + 1];
    if (next !== undefined && /^-\d/.test(next))
      return `${opt}: expected a value like \`15m\`, got \`${next}\`: a negative value is never valid. ${help}`;
    if (next?.startsWith('-'))
      return `${opt}: missing its value (\`${next}\` is an option; to pass it as the value, write ${opt}=${next}). ${help}`;
    return `${opt}: missing its value. ${help}`;
  }
  return `${err.message.split('\n')[0]} ${help}`;
}

export async function main(
  argv: readonly string[],
  given: Omit<Io, 'time'> & { time?: Io['time'] },
): Promise<number> {
  const io: Io = { ...given, time: given.time ?? systemTime };
  let parsed: Parsed;
  try {
    parsed = parseArgs({ args: [...argv], options: OPTIONS, allowPositionals: true, strict: true });
  } catch (err) {
    io.err.write(`twopass: ${usageError(err as Error & { code?: string }, argv)}\n`);
    return EXIT.config;
  }
  const { values: v, positionals } = parsed;
  const [cmd, ...rest] = positionals;
  const answered = answerBeforeCommand(v, cmd, rest, io);
  if (answered !== undefined) return answered;
  const output: OutputMode =
    (v.output as OutputMode | undefined) ??
    (io.env.TWOPASS_OUTPUT as OutputMode | undefined) ??
    (io.isTTY ? 'table' : 'json');
  try {
    switch (cmd) {
      case 'demo': {
        const { demo } = await import('./sandbox/demo.ts');
        // The sandbox is for reading: a table unless JSON is asked for explicitly.
        const r = await demo({
          output: (v.output as OutputMode | undefined) ?? 'table',
          out: io.out,
          err: io.err,
        });
        return r.ok ? EXIT.ok : EXIT.error;
      }
      case 'diff':
        return (await import('./cli/diff.ts')).diffCommand(rest, output, io);
      case 'rules':
        return await (await import('./cli/rules.ts')).rulesCommand(rest, output, io, {
          namespace: v.namespace,
          image: v.image,
        });
      default:
        return await configCommand(cmd!, rest, v, output, io);
    }
  } catch (err) {
    return reportFailure(err, io);
  }
}

type Parsed = ReturnType<
  typeof parseArgs<{ options: typeof OPTIONS; allowPositionals: true; strict: true; args: string[] }>
>;
type Values = Parsed['values'];

/** What is answered before any command runs: the version, help, options the command does not take, a bad --output. */
function answerBeforeCommand(
  v: Values,
  cmd: string | undefined,
  rest: readonly string[],
  io: Io,
): number | undefined {
  if (v.version || (cmd === 'version' && rest.length === 0)) {
    io.out.write(`twopass ${VERSION}\n`);
    return EXIT.ok;
  }
  // `twopass help` and `twopass help <command>` are `--help`.
  if (cmd === 'help') {
    if (rest.length > 1 || (rest[0] !== undefined && !HELP[rest[0]])) {
      io.err.write(
        `twopass: help: unknown command \`${rest.join(' ')}\`; known: ${Object.keys(HELP)
          .filter((c) => c !== 'main')
          .join(', ')}\n`,
      );
      return EXIT.config;
    }
    io.out.write(`${HELP[rest[0] ?? 'main']}\n`);
    return EXIT.ok;
  }
  if (!cmd || (v.help && !HELP[cmd])) {
    io.out.write(`${HELP.main}\n`);
    // `twopass --help` is asked for; a bare `twopass` or `--help` of an unknown command is a usage error.
    return v.help && !cmd ? EXIT.ok : EXIT.config;
  }
  if (v.help) {
    io.out.write(`${HELP[cmd]}\n`);
    return EXIT.ok;
  }
  const takes = TAKES[cmd];
  const foreign = Object.keys(v).filter((k) => k !== 'help' && takes !== undefined && !takes.includes(k));
  if (foreign.length > 0) {
    io.err.write(
      `twopass: ${foreign.map((k) => `--${k}`).join(', ')}: not an option of \`twopass ${cmd}\`\nRun \`twopass ${cmd} --help\` for its options.\n`,
    );
    return EXIT.config;
  }
  if (v.output !== undefined && v.output !== 'json' && v.output !== 'table') {
    io.err.write(`twopass: --output: expected json or table, got \`${v.output}\`\n`);
    return EXIT.config;
  }
  return undefined;
}

/** The commands that read the config: it is loaded, resolved and checked first. */
async function configCommand(
  cmd: string,
  rest: string[],
  v: Values,
  output: OutputMode,
  io: Io,
): Promise<number> {
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
  const { functionsOf } = await import('./catalogue.ts');
  const { checkFunctionsConfig } = await import('./runtime/settings.ts');
  checkFunctionsConfig(cfg.functions, functionsOf(cfg), `config ${cfg.source}`);
  // Where run and apply tell their metrics: flags over the environment.
  const pushgateway = v.pushgateway ?? io.env.TWOPASS_PUSHGATEWAY;
  const textfile = v['metrics-textfile'] ?? io.env.TWOPASS_METRICS_TEXTFILE;
  const metricsOut = { ...(pushgateway ? { pushgateway } : {}), ...(textfile ? { textfile } : {}) };
  switch (cmd) {
    case 'run':
      return await (await import('./cli/run.ts')).runCommand(rest, v.all === true, cfg, output, io, {
        ...(v.record === true ? { record: true } : {}),
        ...(v['save-snapshot'] ? { saveSnapshotDir: v['save-snapshot'] } : {}),
        ...(v.report ? { reportFile: v.report } : {}),
        ...(v.apply === true ? { apply: true } : {}),
        ...metricsOut,
      });
    case 'apply':
      return await (await import('./cli/run.ts')).applyCommand(
        rest,
        v['from-report'] ?? [],
        v.apart,
        cfg,
        output,
        io,
        {
          ...metricsOut,
        },
      );
    case 'schedule':
      return await (await import('./cli/run.ts')).scheduleCommand(cfg, output, io, v.listen);
    case 'functions':
      return (await import('./cli/functions.ts')).functionsCommand(cfg, output, io);
    case 'state':
      return await (await import('./cli/state.ts')).stateCommand(rest, cfg, output, io);
    case 'restore':
      return await (await import('./cli/restore.ts')).restoreCommand(
        rest,
        { keys: v.key ?? [], run: v.run, apply: v.apply === true },
        cfg,
        output,
        io,
      );
    case 'explain':
      return await (await import('./cli/explain.ts')).explainCommand(rest, cfg, output, io);
    case 'history':
      return await (await import('./cli/history.ts')).historyCommand(
        rest,
        { last: v.last, run: v.run },
        cfg,
        output,
        io,
      );
    default:
      io.err.write(`twopass: unknown command \`${cmd}\`\nRun \`twopass --help\` for usage.\n`);
      return EXIT.config;
  }
}

/** The process entry (bin/twopass.js): the real streams, a closed pipe tolerated. */
export async function cli(): Promise<void> {
  tolerateClosedPipe(process.stdout);
  tolerateClosedPipe(process.stderr);
  let time: Io['time'];
  try {
    time = timeFromEnv(process.env);
  } catch (err) {
    process.stderr.write(`twopass: ${(err as Error).message}\n`);
    process.exitCode = EXIT.config;
    return;
  }
  process.exitCode = await main(process.argv.slice(2), {
    time,
    out: process.stdout,
    err: process.stderr,
    env: process.env,
    isTTY: process.stdout.isTTY === true,
    errTTY: process.stderr.isTTY === true,
  });
}

if (import.meta.main) await cli();
