/** `twopass explain`: what the engine decides for one target now, next to the stored state. */
import { findFunction } from '../../functions/index.ts';
import { type Config, describePolicy, functionConfig } from '../config.ts';
import { decide } from '../engine/decide.ts';
import { formatDuration } from '../engine/duration.ts';
import type { Snapshot } from '../engine/types.ts';
import { ConfigError } from '../errors.ts';
import { createLogger } from '../log/logger.ts';
import { EXIT } from '../runtime/errors.ts';
import { validateSettings } from '../runtime/settings.ts';
import { connectKube, connectPorts, stateFor } from '../runtime/wire.ts';
import type { Io } from './io.ts';

export async function explainCommand(args: readonly string[], cfg: Config, io: Io): Promise<number> {
  const [name, key] = args;
  if (!name || !key) throw new ConfigError('usage: twopass explain <function> <key>');
  const fn = findFunction(name);
  if (!fn) throw new ConfigError(`unknown function \`${name}\``);
  const kube = await connectKube(cfg, { time: io.time, log: createLogger({ output: 'json' }) });
  try {
    const { store } = stateFor(cfg, kube, io.time);
    const { state } = await store.load(name);
    const fc = functionConfig(cfg, name, fn.defaults);
    const settings = validateSettings(fn, { pageSize: cfg.pageSize, ...fc.settings }, `config ${cfg.source}`);
    const now = io.time.now();
    const ports = await connectPorts(fn, kube, cfg, settings, io.env, io.time);
    const obs = await fn.observe(ports.reader, {
      now,
      signal: io.time.timeout(cfg.deadlineMs),
      settings,
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
    const note = target ? fn.kindNotes[target.kind] : undefined;
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
