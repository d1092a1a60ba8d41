/** `twopass diff`: two saved snapshots compared. */

import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { diffSnapshots } from '../engine/diff.ts';
import type { Snapshot } from '../engine/types.ts';
import { ConfigError, issuesText } from '../errors.ts';
import type { OutputMode } from '../log/logger.ts';
import { EXIT } from '../runtime/errors.ts';
import type { Io } from './io.ts';

/** What `--save-snapshot` writes, checked as far as the diff reads it. */
const savedSnapshot = z.looseObject({
  id: z.string(),
  function: z.string(),
  takenAt: z.number(),
  targets: z.array(
    z.looseObject({ key: z.string(), kind: z.string(), name: z.string(), fingerprint: z.string() }),
  ),
  used: z.array(z.string()),
  indeterminate: z.array(z.looseObject({ key: z.string() })),
});

function load(path: string): Snapshot {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new ConfigError(`${path}: not a saved snapshot: ${(err as Error).message}`);
  }
  const r = savedSnapshot.safeParse(raw);
  if (!r.success) {
    throw new ConfigError(
      `${path}: not a saved snapshot (\`twopass run --save-snapshot DIR\` writes them): ${issuesText(r.error, { first: true })}`,
    );
  }
  return r.data as unknown as Snapshot;
}

export function diffCommand(args: readonly string[], output: OutputMode, io: Io): number {
  const [a, b, ...extra] = args;
  if (!a || !b || extra.length > 0) throw new ConfigError('usage: twopass diff A.json B.json');
  const sa = load(a);
  const sb = load(b);
  if (sa.function !== sb.function)
    throw new ConfigError(`${a} is a snapshot of ${sa.function}, ${b} of ${sb.function}: nothing to compare`);
  const d = diffSnapshots(sa, sb);
  if (output === 'json') {
    io.out.write(`${JSON.stringify({ function: sa.function, from: sa.id, to: sb.id, ...d })}\n`);
    return EXIT.ok;
  }
  io.out.write(
    `${sa.function} ${new Date(sa.takenAt).toISOString()} -> ${new Date(sb.takenAt).toISOString()}\n`,
  );
  for (const t of d.appeared) io.out.write(`+ appeared     ${t.kind} ${t.name} (${t.key})\n`);
  for (const t of d.vanished) io.out.write(`- vanished     ${t.kind} ${t.name} (${t.key})\n`);
  for (const c of d.changed)
    io.out.write(
      `~ changed      ${c.after.kind} ${c.after.name}: ${c.before.fingerprint} -> ${c.after.fingerprint}\n`,
    );
  for (const g of d.changedTogether)
    io.out.write(
      `~ changed      ${g.keys.length} ${g.kind}s together: ${g.before} -> ${g.after} (one shared value, e.g. the network they are bits of was written; each may or may not have changed itself)\n`,
    );
  for (const k of d.becameUsed) io.out.write(`  now used     ${k}\n`);
  for (const k of d.becameUnused) io.out.write(`  now unused   ${k}\n`);
  for (const k of d.becameIndeterminate) io.out.write(`? indeterminate ${k}\n`);
  const n = Object.values(d).reduce((sum, list) => sum + list.length, 0);
  if (n === 0) io.out.write('no differences\n');
  return EXIT.ok;
}
