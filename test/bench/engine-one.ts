/** One engine measurement: decide() or the Set floor, at N targets, 1% candidates. Prints JSON. */
import { decide } from '../../shared/engine/decide.ts';
import type { Candidate, Snapshot, State, Target } from '../../shared/engine/types.ts';
import { arg, peakRssMiB } from './common.ts';

const n = Number(arg('n'));
const what = arg('what');
const T0 = 1_800_000_000_000;
const targets: Target[] = new Array(n);
const used: string[] = [];
const candidates: Record<string, Candidate> = {};
for (let i = 0; i < n; i++) {
  const key = `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
  targets[i] = { key, kind: 'DanmEp', fingerprint: `${key}|${i}`, name: `ns/pod-${i}`, keep: false };
  if (i % 100 === 0)
    candidates[key] = {
      kind: 'DanmEp',
      name: `ns/pod-${i}`,
      fingerprint: `${key}|${i}`,
      firstUnusedAt: T0,
      lastUnusedAt: T0,
      observations: 1,
    };
  else used.push(key);
}
const snapshot: Snapshot = {
  id: 's',
  function: 'bench',
  takenAt: T0 + 60_000,
  sources: [
    { name: 't', role: 'target', count: n, complete: true },
    { name: 'e', role: 'evidence', count: used.length, complete: true },
  ],
  targets,
  used,
  indeterminate: [],
};
const state: State = { schemaVersion: 1, function: 'bench', candidates };
(globalThis as { gc?: () => void }).gc?.();
const base = process.memoryUsage().rss;
const t = performance.now();
let out = 0;
if (what === 'decide') {
  const d = decide(
    state,
    snapshot,
    { graceMs: 30_000, maxDeletions: n, maxDeletionPercent: 100, maxEvidenceDropPercent: 100 },
    T0 + 60_000,
  );
  out = d.actions.length;
} else {
  // the floor: a Set of the used keys, and the targets not in it
  const s = new Set(used);
  for (const x of targets) if (!s.has(x.key)) out++;
}
const elapsed = performance.now() - t;
console.log(
  JSON.stringify({
    n,
    what,
    ms: elapsed,
    result: out,
    peakRssMiB: peakRssMiB(),
    rssDeltaMiB: Math.round((process.memoryUsage().rss - base) / 2 ** 20),
  }),
);
