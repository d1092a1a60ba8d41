/** `twopass state show|reset|accept-evidence`. */

import { Writable } from 'node:stream';
import { requireFunction } from '../catalogue.ts';
import type { Config } from '../config.ts';
import type { AnyFunction } from '../contract/index.ts';
import { formatDuration } from '../engine/duration.ts';
import { ConfigError } from '../errors.ts';
import { createLogger, type OutputMode } from '../log/logger.ts';
import { EXIT } from '../runtime/errors.ts';
import { connectKube, runFunction, stateFor } from '../runtime/wire.ts';
import type { Io } from './io.ts';

export async function stateCommand(
  args: readonly string[],
  cfg: Config,
  output: OutputMode,
  io: Io,
): Promise<number> {
  const [sub, name] = args;
  if ((sub !== 'show' && sub !== 'reset' && sub !== 'accept-evidence') || !name)
    throw new ConfigError('usage: twopass state show|reset|accept-evidence <function>');
  const entry = requireFunction(name, cfg);
  if (sub === 'accept-evidence') return acceptEvidenceCommand(entry, cfg, output, io);
  const kube =
    cfg.state.kind === 'configmap'
      ? await connectKube(cfg, { time: io.time, log: createLogger({ output: 'json' }) })
      : undefined;
  try {
    const { store } = stateFor(cfg, kube, io.time);
    if (sub === 'reset') {
      const removed = await store.reset(name);
      if (output === 'json') {
        io.out.write(`${JSON.stringify({ function: name, store: store.description, reset: removed })}\n`);
        return EXIT.ok;
      }
      io.out.write(
        removed
          ? `state of ${name} in ${store.description} reset: observation starts over (no resource was deleted)\n`
          : `no state for ${name} in ${store.description}\n`,
      );
      return EXIT.ok;
    }
    const { state, version } = await store.load(name);
    const cands = Object.entries(state.candidates).sort((a, b) => a[1].firstUnusedAt - b[1].firstUnusedAt);
    if (output === 'json') {
      io.out.write(
        `${JSON.stringify({
          function: name,
          store: store.description,
          version: version ?? null,
          lastSnapshot: state.lastSnapshot ?? null,
          evidenceDrop: state.evidenceDrop ?? null,
          candidates: cands.map(([key, c]) => ({ key, ...c })),
        })}\n`,
      );
      return EXIT.ok;
    }
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
    if (state.evidenceDrop) {
      const d = state.evidenceDrop;
      io.out.write(
        `evidence lower than the baseline since ${new Date(d.firstSeenAt).toISOString()} (${d.snapshots} snapshots, held ${formatDuration(d.lastSeenAt - d.firstSeenAt)}): ${Object.entries(
          d.counts,
        )
          .map(([k, c]) => `${k}=${c}`)
          .join(' ')}\n`,
      );
    }
    io.out.write(`${cands.length} candidate(s)\n`);
    for (const [key, c] of cands) {
      io.out.write(
        `  ${c.kind.padEnd(25)} ${c.name.padEnd(40)} unused since ${new Date(c.firstUnusedAt).toISOString()} (${c.observations}x, for ${formatDuration(io.time.now() - c.firstUnusedAt)})  key ${key}\n`,
      );
    }
    return EXIT.ok;
  } finally {
    await kube?.close();
  }
}

/** A dry run that records, with the evidence guard's drop accepted: nothing is deleted. */
async function acceptEvidenceCommand(
  fn: AnyFunction,
  cfg: Config,
  output: OutputMode,
  io: Io,
): Promise<number> {
  // The run's own diff log is not this command's output: its result says what happened.
  const quiet = createLogger({ output: 'json', stream: new Writable({ write: (_c, _e, cb) => cb() }) });
  const r = await runFunction(
    fn,
    { ...cfg, apply: false },
    { time: io.time, log: quiet, processEnv: io.env },
    { apply: false, record: true, acceptEvidence: true },
  );
  const accepted = r.notices.find((e) => e.event === 'evidence.accepted');
  if (r.exitCode !== EXIT.ok) {
    const said = r.notices.find((e) => e.event === 'run.refused' || e.event === 'run.aborted');
    const why = said && 'reason' in said ? String(said.reason) : (r.error ?? r.outcome);
    if (output === 'json')
      io.out.write(
        `${JSON.stringify({ function: fn.name, accepted: false, exitCode: r.exitCode, reason: why, deleted: 0 })}\n`,
      );
    io.err.write(
      `twopass: ${fn.name}: nothing accepted, the snapshot was not taken or was refused: ${why}\n`,
    );
    return r.exitCode;
  }
  const counts = (accepted && 'counts' in accepted ? accepted.counts : {}) as Record<
    string,
    { was: number; now: number }
  >;
  const baseline = r.evidence ?? {};
  if (output === 'json') {
    io.out.write(
      `${JSON.stringify({
        function: fn.name,
        snapshotId: r.snapshotId,
        accepted: accepted !== undefined,
        counts,
        baseline,
        candidatesKept: true,
        deleted: 0,
      })}\n`,
    );
    return EXIT.ok;
  }
  io.out.write(
    accepted
      ? `${fn.name}: accepted the evidence counts of snapshot ${r.snapshotId} as the new baseline: ${Object.entries(
          counts,
        )
          .map(([k, c]) => `${k} ${c.was} -> ${c.now}`)
          .join(', ')}. The candidates were kept; nothing was deleted.\n`
      : `${fn.name}: no evidence drop to accept; the baseline is now snapshot ${r.snapshotId} (${Object.entries(
          baseline,
        )
          .map(([k, n]) => `${k}=${n}`)
          .join(' ')}). Nothing was deleted.\n`,
  );
  return EXIT.ok;
}
