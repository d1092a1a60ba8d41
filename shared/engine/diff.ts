/** diffSnapshots(): what appeared, vanished and changed between two saved snapshots. Pure. */
import type { Snapshot, Target } from './types.ts';

export type SnapshotDiff = Readonly<{
  appeared: readonly Target[];
  vanished: readonly Target[];
  changed: readonly Readonly<{ before: Target; after: Target }>[];
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
  const byKey = (x: Target, y: Target) => (x.key < y.key ? -1 : x.key > y.key ? 1 : 0);
  return {
    appeared: appeared.sort(byKey),
    vanished: vanished.sort(byKey),
    changed: changed.sort((x, y) => byKey(x.after, y.after)),
    becameUsed: becameUsed.sort(),
    becameUnused: becameUnused.sort(),
    becameIndeterminate: becameIndeterminate.sort(),
  };
}
