/** `twopass explain`: what the engine decides for one target now, next to the stored state. */

import { findFunction } from '../catalogue.ts';
import { type Config, describePolicy } from '../config.ts';
import { formatDuration } from '../engine/duration.ts';
import type { Candidate, Target } from '../engine/types.ts';
import { ConfigError } from '../errors.ts';
import type { OutputMode } from '../log/logger.ts';
import { EXIT } from '../runtime/errors.ts';
import { observeAndDecide } from '../runtime/explain.ts';
import { type KeyTrail, type RunRecord, trailOf } from '../state/history.ts';
import type { Io } from './io.ts';

type Match = {
  key: string;
  kind?: string;
  name?: string;
  target?: Target;
  stored?: Candidate;
  /** What a run now would say about it, in the diff log's words. */
  now: string[];
  /** Where the kept history of runs saw it: first unused, rescued, confirmed, deleted. */
  history: KeyTrail;
};

/** The trail as one line: "first seen unused in run X at T; confirmed in run Y at T". */
function describeTrail(t: KeyTrail, runs: readonly RunRecord[]): string {
  const at = (p: { runId: string; at: number }) =>
    `run ${p.runId.slice(0, 8)} at ${new Date(p.at).toISOString()}`;
  const parts = [
    t.firstUnused && `first seen unused in ${at(t.firstUnused)}`,
    t.rescued && `rescued in ${at(t.rescued)}${t.rescued.why ? ` (${t.rescued.why})` : ''}`,
    t.confirmed && `confirmed in ${at(t.confirmed)}`,
    t.deleted && `deleted in ${at(t.deleted)}`,
  ].filter(Boolean);
  if (parts.length > 0) return `${parts.join('; ')} (\`twopass history <function> --run RUN\` shows a run)`;
  return runs.length === 0
    ? 'no runs recorded'
    : `not named in the ${runs.length} runs kept (since ${new Date(runs[0]!.startedAt).toISOString()})`;
}

export async function explainCommand(
  args: readonly string[],
  cfg: Config,
  output: OutputMode,
  io: Io,
): Promise<number> {
  const [name, query, ...extra] = args;
  if (!name || !query || extra.length > 0)
    throw new ConfigError(
      'usage: twopass explain <function> <key or name> (the key or the name a diff log or `state show` prints; quote names with spaces)',
    );
  const fn = findFunction(name, cfg);
  if (!fn) throw new ConfigError(`unknown function \`${name}\``);
  const {
    state,
    snapshot,
    decision: d,
    policy,
    runs,
  } = await observeAndDecide(fn, cfg, {
    time: io.time,
    processEnv: io.env,
  });
  // A name matches whole or by its leading words: `ns/pod`, `ns/pod eth0` (or `pod` alone)
  // find every DanmEp of the pod, whatever address and pod UID follow.
  const keys = new Set<string>();
  const named = (n: string | undefined) =>
    n !== undefined &&
    (n === query ||
      n.startsWith(`${query} `) ||
      (!query.includes('/') && (n.split(' ')[0]!.endsWith(`/${query}`) || n.includes(`/${query} `))));
  for (const t of snapshot.targets) if (t.key === query || named(t.name)) keys.add(t.key);
  for (const [k, c] of Object.entries(state.candidates)) if (k === query || named(c.name)) keys.add(k);
  // what is gone (deleted, or gone by itself) is still found in the kept history of runs
  const remembered = new Map<string, { kind?: string | undefined; name?: string | undefined }>();
  for (const r of runs)
    for (const l of Object.values(r.lists))
      for (const i of l.items)
        if (i.key === query || named(i.name)) {
          keys.add(i.key);
          remembered.set(i.key, { kind: i.kind, name: i.name });
        }
  const matches: Match[] = [...keys].map((key) => matchOf(key, snapshot, state, d, runs, remembered));
  const refused =
    d.diff.outcome === 'ok'
      ? undefined
      : `this run would be ${d.diff.outcome}: ${d.diff.events
          .filter((e) => e.event === 'run.refused' || e.event === 'run.aborted')
          .map((e) => ('reason' in e ? e.reason : ''))
          .join('; ')}`;
  if (output === 'json') {
    io.out.write(
      `${JSON.stringify({ function: name, query, matches, ...(refused ? { run: refused } : {}), policy })}\n`,
    );
    return EXIT.ok;
  }
  if (matches.length === 0) {
    io.out.write(
      `${name}: nothing called \`${query}\`: no target of a fresh snapshot, no stored candidate and no run kept in the history has that key or name\n`,
    );
    return EXIT.ok;
  }
  if (matches.length > 1)
    io.out.write(`${name}: ${matches.length} objects are called \`${query}\`; each by its key (UID):\n`);
  for (const m of matches) {
    io.out.write(`${name} ${m.key}${m.kind ? ` ${m.kind}` : ''}${m.name ? ` ${m.name}` : ''}\n`);
    if (m.target) io.out.write(`  target: fingerprint ${m.target.fingerprint}\n`);
    const note = m.kind ? fn.kindNotes[m.kind] : undefined;
    if (note) io.out.write(`  note: ${note}\n`);
    io.out.write(
      m.stored
        ? `  stored: candidate since ${new Date(m.stored.firstUnusedAt).toISOString()}, seen unused ${m.stored.observations}x, fingerprint ${m.stored.fingerprint}\n`
        : '  stored: not a candidate\n',
    );
    for (const s of m.now) io.out.write(`  now: ${s}\n`);
    io.out.write(`  history: ${describeTrail(m.history, runs)}\n`);
  }
  if (refused) io.out.write(`  ${refused}\n`);
  io.out.write(`  policy: ${describePolicy(policy)}\n`);
  return EXIT.ok;
}

/** What a fresh snapshot, the state and the kept runs say of one key. */
function matchOf(
  key: string,
  snapshot: Explained['snapshot'],
  state: Explained['state'],
  d: Explained['decision'],
  runs: Explained['runs'],
  remembered: ReadonlyMap<string, { kind?: string | undefined; name?: string | undefined }>,
): Match {
  const target = snapshot.targets.find((t) => t.key === key);
  const stored = state.candidates[key];
  const events = d.diff.events.filter((e) => 'key' in e && e.key === key);
  const said = events.map(
    (e) =>
      `${e.event}${'reason' in e ? `: ${e.reason}` : ''}${'timeLeftMs' in e ? `: ${formatDuration(e.timeLeftMs)} left (${e.waitingFor})` : ''}${'unusedForMs' in e ? ` (unused for ${formatDuration(e.unusedForMs)})` : ''}`,
  );
  if (target && events.length === 0) said.push('in use (evidence found), not a candidate');
  if (!target) said.push("not a target in a fresh snapshot (gone, out of scope, or not this function's)");
  const kind = target?.kind ?? stored?.kind ?? remembered.get(key)?.kind;
  const label = target?.name ?? stored?.name ?? remembered.get(key)?.name;
  return {
    key,
    ...(kind ? { kind } : {}),
    ...(label ? { name: label } : {}),
    ...(target ? { target } : {}),
    ...(stored ? { stored } : {}),
    now: said,
    history: trailOf(runs, key),
  };
}

type Explained = Awaited<ReturnType<typeof observeAndDecide>>;
