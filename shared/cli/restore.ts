/**
 * `twopass restore <function> [--key KEY]... [--run RUN_ID] [--apply]`: brings deleted
 * targets back from their tombstones. Without a selector it lists the tombstones kept.
 * Dry run by default: each selected tombstone is checked against what exists now (an
 * address taken meanwhile, an object of that name) and said `ready` or `refused` with
 * why; `--apply` writes the ready ones. It holds the function's lock, as a run does.
 */

import { requireFunction } from '../catalogue.ts';
import type { Config } from '../config.ts';
import type { RestoreResult } from '../contract/index.ts';
import { ConfigError, messageOf } from '../errors.ts';
import { createLogger, type OutputMode } from '../log/logger.ts';
import { EXIT } from '../runtime/errors.ts';
import { validateSettings } from '../runtime/settings.ts';
import { connectKube, connectPorts, stateFor } from '../runtime/wire.ts';
import type { Tombstone } from '../state/tombstones.ts';
import type { Io } from './io.ts';

export type RestoreFlags = Readonly<{ keys: readonly string[]; run?: string | undefined; apply: boolean }>;

/** The tombstones a selection names: the newest of each key (a key deleted twice comes back as last deleted). */
export function selectTombstones(all: readonly Tombstone[], f: RestoreFlags): Tombstone[] {
  const picked = all.filter(
    (t) => (f.keys.length === 0 || f.keys.includes(t.key)) && (!f.run || t.runId === f.run),
  );
  const newest = new Map<string, Tombstone>();
  for (const t of picked) if ((newest.get(t.key)?.at ?? -1) <= t.at) newest.set(t.key, t);
  return [...newest.values()].sort((a, b) => a.at - b.at);
}

export async function restoreCommand(
  args: readonly string[],
  flags: RestoreFlags,
  cfg: Config,
  output: OutputMode,
  io: Io,
): Promise<number> {
  const [name, ...extra] = args;
  if (!name || extra.length > 0)
    throw new ConfigError('usage: twopass restore <function> [--key KEY]... [--run RUN_ID] [--apply]');
  const fn = requireFunction(name, cfg);
  const log = createLogger({ output: 'json', level: 'silent' });
  const kube = await connectKube(cfg, { time: io.time, log });
  const write = (o: Record<string, unknown>, text: string) =>
    io.out.write(output === 'json' ? `${JSON.stringify(o)}\n` : `${text}\n`);
  try {
    const { store, lock } = stateFor(cfg, kube, io.time);
    if (!store.tombstones) throw new ConfigError(`the state store ${store.description} keeps no tombstones`);
    const all = await store.tombstones.list(fn.name);
    // what could not be read is said, and what is intact is used
    const damage = store.tombstones.damage?.(fn.name);
    if (damage) {
      io.err.write(`twopass: ${fn.name}: ${damage}\n`);
      write({ event: 'tombstones.damaged', function: fn.name, reason: damage }, `damaged: ${damage}`);
    }
    if (flags.keys.length === 0 && !flags.run) {
      listTombstones(fn.name, all, store.description, output, io, write);
      return EXIT.ok;
    }
    const chosen = selectTombstones(all, flags);
    if (chosen.length === 0)
      throw new ConfigError(
        `no tombstone of ${fn.name} matches ${[...flags.keys.map((k) => `--key ${k}`), ...(flags.run ? [`--run ${flags.run}`] : [])].join(' ')} (\`twopass restore ${fn.name}\` lists them)`,
      );
    const fc = cfg.functions[fn.name];
    const settings = validateSettings(
      fn,
      { pageSize: cfg.pageSize, ...(fc?.settings ?? {}) },
      `config ${cfg.source}`,
    );
    const held = await lock.acquire(fn.name);
    const ports = await connectPorts(fn, kube, cfg, settings, io.env, io.time);
    let refused = 0;
    try {
      for (const t of chosen) {
        const r = await restoreOne(
          fn,
          ports,
          t,
          settings,
          AbortSignal.any([held.lost, io.time.timeout(cfg.deadlineMs)]),
          io,
          flags.apply,
        );
        if (r.outcome === 'refused') refused++;
        const said = r.outcome === 'refused' ? r.reason : r.detail;
        write(
          {
            event: `restore.${r.outcome}`,
            function: fn.name,
            key: t.key,
            kind: t.kind,
            name: t.name,
            runId: t.runId,
            ...(r.outcome === 'refused' ? { reason: r.reason } : { detail: r.detail }),
            ...('ids' in r && r.ids ? { ids: r.ids } : {}),
            dryRun: !flags.apply,
            object: t.object,
          },
          `${r.outcome.padEnd(8)} ${t.kind} ${t.name}: ${said}`,
        );
      }
    } finally {
      await ports.close();
      await held.release();
    }
    if (output !== 'json')
      io.out.write(
        flags.apply
          ? `${chosen.length - refused} restored, ${refused} refused\n`
          : `dry run: ${chosen.length - refused} ready, ${refused} refused; --apply restores the ready ones\n`,
      );
    return refused > 0 ? EXIT.error : EXIT.ok;
  } finally {
    await kube.close();
  }
}

type Write = (o: Record<string, unknown>, text: string) => void;

/** Every tombstone of the function, newest first, each with the object as it was before its deletion. */
function listTombstones(
  name: string,
  all: readonly Tombstone[],
  where: string,
  output: OutputMode,
  io: Io,
  write: Write,
): void {
  for (const t of [...all].reverse())
    write(
      {
        function: name,
        key: t.key,
        kind: t.kind,
        name: t.name,
        runId: t.runId,
        deletedAt: new Date(t.at).toISOString(),
        reason: t.reason,
        // the object as it was re-read before its deletion: for what cannot be restored, the way back
        object: t.object,
      },
      `${new Date(t.at).toISOString()}  run ${t.runId}  ${t.kind} ${t.name} [${t.key}]`,
    );
  if (output !== 'json')
    io.out.write(
      all.length === 0
        ? `no tombstones of ${name} in ${where}\n`
        : `${all.length} tombstone(s) of ${name}; restore with --key KEY or --run RUN_ID (a dry run unless --apply)\n`,
    );
}

/** One tombstone restored (or checked, in a dry run); an error is a refusal, said. */
async function restoreOne(
  fn: ReturnType<typeof requireFunction>,
  ports: Awaited<ReturnType<typeof connectPorts>>,
  t: Tombstone,
  settings: ReturnType<typeof validateSettings>,
  signal: AbortSignal,
  io: Io,
  apply: boolean,
): Promise<RestoreResult> {
  try {
    return await fn.restore(ports.reader, ports.writer, t, {
      now: io.time.now(),
      signal,
      settings,
      note: () => {},
      apply,
    });
  } catch (err) {
    return { outcome: 'refused', reason: `error: ${messageOf(err)}` };
  }
}
