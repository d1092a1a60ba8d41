/** `twopass history <function> [--last N] [--run RUN_ID]`: what the function's last runs did, and why. */

import { requireFunction } from '../catalogue.ts';
import type { Config } from '../config.ts';
import { formatDuration } from '../engine/duration.ts';
import { ConfigError } from '../errors.ts';
import { createLogger, type OutputMode } from '../log/logger.ts';
import { EXIT } from '../runtime/errors.ts';
import { connectKube, stateFor } from '../runtime/wire.ts';
import { HISTORY_LISTS, type HistoryList, type RunRecord } from '../state/history.ts';
import type { Io } from './io.ts';

/** The table's columns of counts, in the diff log's words. */
const COLUMNS: readonly [HistoryList, string][] = [
  ['new', 'NEW'],
  ['pending', 'PENDING'],
  ['rescued', 'RESCUED'],
  ['reset', 'RESET'],
  ['indeterminate', 'INDET'],
  ['confirmed', 'CONFIRMED'],
  ['deleted', 'DELETED'],
];

/** What each list means, for the one-run view. */
const MEANS: Readonly<Record<HistoryList, string>> = {
  new: 'first seen unused',
  pending: 'unused again, waiting for the grace or a second observation',
  rescued: 'in use again: observation started over',
  reset: 'changed identity (fingerprint) or kind: observation started over',
  indeterminate: 'could not be judged: left alone',
  confirmed: 'unused in two complete snapshots a grace apart',
  deleted: 'deleted by this run (tombstone written, precondition sent, read back)',
  alreadyGone: 'confirmed, found gone when deleted (not deleted by twopass)',
  held: 'confirmed, held: a producer that hands out from memory was running',
  skipped: 'confirmed, not deleted: changed or in use at the re-check',
  failed: 'confirmed, the deletion failed',
};

export async function historyCommand(
  args: readonly string[],
  opts: Readonly<{ last?: string | undefined; run?: string | undefined }>,
  cfg: Config,
  output: OutputMode,
  io: Io,
): Promise<number> {
  const [name, ...extra] = args;
  if (!name || extra.length > 0)
    throw new ConfigError('usage: twopass history <function> [--last N] [--run RUN_ID]');
  requireFunction(name, cfg);
  const last = opts.last === undefined ? 20 : Number(opts.last);
  if (!Number.isInteger(last) || last < 1)
    throw new ConfigError(`--last: expected a whole number of runs (1 or more), got \`${opts.last}\``);
  const kube =
    cfg.state.kind === 'configmap'
      ? await connectKube(cfg, { time: io.time, log: createLogger({ output: 'json' }) })
      : undefined;
  try {
    const { store } = stateFor(cfg, kube, io.time);
    const history = store.history;
    if (!history) throw new ConfigError(`${store.description} keeps no history of runs`);
    const all = await history.list(name);
    const damage = history.damage(name);
    if (damage) io.err.write(`twopass: history: ${damage}\n`);
    if (opts.run !== undefined) return showRun(all, opts.run, name, history.description, output, io);
    const runs = all.slice(Math.max(0, all.length - last)).reverse();
    if (output === 'json') {
      io.out.write(
        `${JSON.stringify({ function: name, store: history.description, kept: all.length, runs })}\n`,
      );
      return EXIT.ok;
    }
    if (all.length === 0) {
      io.out.write(
        `${name}: no runs recorded in ${history.description} (deleting runs and dry runs with --record write one each)\n`,
      );
      return EXIT.ok;
    }
    io.out.write(
      `${name}: the last ${runs.length} of ${all.length} runs kept in ${history.description}, newest first\n`,
    );
    const rows = [
      ['STARTED', 'RUN', 'MODE', 'OUTCOME', ...COLUMNS.map(([, h]) => h), 'TOOK'],
      ...runs.map((r) => [
        new Date(r.startedAt).toISOString().replace(/\.\d{3}Z$/, 'Z'),
        r.runId.slice(0, 8),
        r.dryRun ? 'dry' : 'apply',
        `${r.outcome}${r.exitCode !== 0 ? ` (${r.exitCode})` : ''}`,
        ...COLUMNS.map(([l]) => String(r.lists[l]?.n ?? 0)),
        formatDuration(r.durationMs),
      ]),
    ];
    const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)));
    for (const row of rows)
      io.out.write(
        `${row
          .map((c, i) => c.padEnd(widths[i]!))
          .join('  ')
          .trimEnd()}\n`,
      );
    io.out.write(`One run in full: twopass history ${name} --run RUN\n`);
    return EXIT.ok;
  } finally {
    await kube?.close();
  }
}

function showRun(
  all: readonly RunRecord[],
  id: string,
  name: string,
  where: string,
  output: OutputMode,
  io: Io,
): number {
  const found = all.filter((r) => r.runId === id || r.runId.startsWith(id));
  if (found.length !== 1)
    throw new ConfigError(
      found.length === 0
        ? `no run \`${id}\` in the history of ${name} in ${where} (\`twopass history ${name}\` lists the runs kept)`
        : `\`${id}\` is the start of ${found.length} runs' ids: give more of it`,
    );
  const r = found[0]!;
  if (output === 'json') {
    io.out.write(`${JSON.stringify({ function: name, store: where, run: r })}\n`);
    return EXIT.ok;
  }
  io.out.write(
    `${name} run ${r.runId}${r.snapshotId ? ` (snapshot ${r.snapshotId})` : ''}\n  started ${new Date(r.startedAt).toISOString()}, took ${formatDuration(r.durationMs)}, ${r.dryRun ? 'dry run' : 'deleting run'}: ${r.outcome}, exit ${r.exitCode}${r.error ? ` (${r.error})` : ''}\n`,
  );
  if (r.summary)
    io.out.write(
      `  ${Object.entries(r.summary)
        .map(([k, n]) => `${k}=${n}`)
        .join(' ')}\n`,
    );
  for (const n of r.notices ?? []) io.out.write(`  ${n}\n`);
  for (const list of HISTORY_LISTS) {
    const l = r.lists[list];
    if (!l || l.n === 0) continue;
    io.out.write(`${list} (${l.n}): ${MEANS[list]}\n`);
    for (const i of l.items)
      io.out.write(
        `  ${[i.kind, i.name].filter(Boolean).join(' ')} [${i.key}]${i.why ? `: ${i.why}` : ''}\n`,
      );
    if (l.n > l.items.length) io.out.write(`  ... and ${l.n - l.items.length} more (not kept)\n`);
  }
  return EXIT.ok;
}
