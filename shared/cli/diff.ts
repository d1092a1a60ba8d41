/** `twopass diff`: two saved snapshots compared. */
import { readFileSync } from 'node:fs';
import { diffSnapshots } from '../engine/diff.ts';
import type { Snapshot } from '../engine/types.ts';
import { ConfigError } from '../errors.ts';
import { EXIT } from '../runtime/errors.ts';
import type { Io } from './io.ts';

export function diffCommand(args: readonly string[], io: Io): number {
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
