/** diffSnapshots(): what appeared, vanished and changed between two saved snapshots. Pure. */
import type { Snapshot, Target } from './types.ts';

export type SnapshotDiff = Readonly<{
  appeared: readonly Target[];
  vanished: readonly Target[];
  changed: readonly Readonly<{ before: Target; after: Target }>[];
  /**
   * Targets whose fingerprints changed together, from one shared value to another (the bits
   * of a network whose resourceVersion is their fingerprint, after one write of the network):
   * one entry a group, not one line a target.
   */
  changedTogether: readonly Readonly<{
    kind: string;
    before: string;
    after: string;
    keys: readonly string[];
  }>[];
  becameUsed: readonly string[];
  becameUnused: readonly string[];
  becameIndeterminate: readonly string[];
}>;

export function diffSnapshots(a: Snapshot, b: Snapshot): SnapshotDiff {
  const before = new Map(a.targets.map((t) => [t.key, t]));
  const after = new Map(b.targets.map((t) => [t.key, t]));
  const usedA = new Set(a.used);
  const usedB = new Set(b.used);
  const indA = new Set(a.indeterminate.map((i) => i.key));
  const indB = new Set(b.indeterminate.map((i) => i.key));
  const appeared: Target[] = [];
  const changed: { before: Target; after: Target }[] = [];
  const becameUsed: string[] = [];
  const becameUnused: string[] = [];
  const becameIndeterminate: string[] = [];
  for (const [key, t] of after) {
    const old = before.get(key);
    if (!old) {
      appeared.push(t);
      continue;
    }
    if (old.fingerprint !== t.fingerprint) changed.push({ before: old, after: t });
    if (!usedA.has(key) && usedB.has(key)) becameUsed.push(key);
    if (usedA.has(key) && !usedB.has(key)) becameUnused.push(key);
    if (!indA.has(key) && indB.has(key)) becameIndeterminate.push(key);
  }
  const vanished = [...before.values()].filter((t) => !after.has(t.key));
  const groups = new Map<string, { before: Target; after: Target }[]>();
  for (const c of changed) {
    const id = `${c.after.kind}\u0000${c.before.fingerprint}\u0000${c.after.fingerprint}`;
    const g = groups.get(id);
    if (g) g.push(c);
    else groups.set(id, [c]);
  }
  const together = [...groups.values()].filter((g) => g.length > 1);
  const grouped = new Set(together.flatMap((g) => g.map((c) => c.after.key)));
  const byKey = (x: Target, y: Target) => (x.key < y.key ? -1 : x.key > y.key ? 1 : 0);
  return {
    appeared: appeared.sort(byKey),
    vanished: vanished.sort(byKey),
    changed: changed.filter((c) => !grouped.has(c.after.key)).sort((x, y) => byKey(x.after, y.after)),
    changedTogether: together.map((g) => ({
      kind: g[0]!.after.kind,
      before: g[0]!.before.fingerprint,
      after: g[0]!.after.fingerprint,
      keys: g.map((c) => c.after.key).sort(),
    })),
    becameUsed: becameUsed.sort(),
    becameUnused: becameUnused.sort(),
    becameIndeterminate: becameIndeterminate.sort(),
  };
}
