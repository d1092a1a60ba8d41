/**
 * Properties of decide(). Each one fails when its rule is broken (checked by
 * breaking the rule in decide.ts and watching the property fail).
 */
import fc from 'fast-check';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { decide, targetCount } from '../../shared/engine/decide.ts';
import type { Policy, Snapshot, State, Target } from '../../shared/engine/types.ts';
import { deepFreeze, FN, MIN, sources, state } from '../helpers/engine.ts';

const RUNS = Number(process.env.TWOPASS_PROPERTY_RUNS ?? 300);
const T0 = 1_800_000_000_000;

const keyArb = fc.constantFrom('a', 'b', 'c', 'd', 'e', 'f');
/** One observed world: targets, which are used, which indeterminate, whether complete. */
const worldArb = fc.record({
  targets: fc.uniqueArray(
    fc.record({
      key: keyArb,
      kind: fc.constantFrom('Thing', 'Bit'),
      fingerprint: fc.constantFrom('v1', 'v2'),
      keep: fc.boolean(),
      createdOffset: fc.option(fc.integer({ min: -120, max: 120 }), { nil: undefined }),
    }),
    { selector: (t) => t.key, maxLength: 6 },
  ),
  used: fc.subarray(['a', 'b', 'c', 'd', 'e', 'f']),
  indeterminate: fc.subarray(['a', 'b', 'c', 'd', 'e', 'f'], { maxLength: 2 }),
  complete: fc.boolean(),
  evidence: fc.integer({ min: 0, max: 50 }),
  stepMinutes: fc.integer({ min: -5, max: 30 }),
});
type World = typeof worldArb extends fc.Arbitrary<infer W> ? W : never;

const policyArb: fc.Arbitrary<Policy> = fc
  .record({
    graceMs: fc.integer({ min: 1, max: 30 }).map((m) => m * MIN),
    kindGraceMs: fc.option(fc.record({ Bit: fc.integer({ min: 1, max: 30 }).map((m) => m * MIN) }), {
      nil: undefined,
    }),
    minAgeMs: fc.option(
      fc.integer({ min: 0, max: 60 }).map((m) => m * MIN),
      { nil: undefined },
    ),
    maxDeletions: fc.integer({ min: 0, max: 6 }),
    maxDeletionPercent: fc.integer({ min: 0, max: 100 }),
    maxEvidenceDropPercent: fc.integer({ min: 0, max: 100 }),
  })
  .map((p) => {
    const out: Record<string, unknown> = { ...p };
    for (const k of Object.keys(out)) if (out[k] === undefined) delete out[k];
    return JSON.parse(JSON.stringify(out)) as Policy;
  });

function toSnapshot(w: World, at: number): Snapshot {
  const targets: Target[] = w.targets.map((t) => ({
    key: t.key,
    kind: t.kind,
    fingerprint: t.fingerprint,
    name: `t ${t.key}`,
    keep: t.keep,
    ...(t.createdOffset !== undefined ? { createdAt: T0 + t.createdOffset * MIN } : {}),
  }));
  const src = sources(targets.length, w.evidence, w.complete);
  return {
    id: `s${at}`,
    function: FN,
    takenAt: at,
    sources: src,
    targets,
    used: w.used,
    indeterminate: w.indeterminate.map((key) => ({ key, reason: 'unknown' })),
  };
}

/** Runs a sequence of worlds through decide, yielding each step. */
function* replay(worlds: World[], p: Policy, start: State = state()) {
  let s = start;
  let at = T0;
  for (const w of worlds) {
    at += w.stepMinutes * MIN;
    const snap = toSnapshot(w, at);
    const d = decide(s, snap, p, at);
    yield { before: s, snap, d, at };
    s = d.nextState;
  }
}

const seqArb = fc.array(worldArb, { minLength: 1, maxLength: 12 });

test('one observation never confirms', () => {
  fc.assert(
    fc.property(worldArb, policyArb, (w, p) => {
      const d = decide(state(), toSnapshot({ ...w, complete: true }, T0), p, T0);
      return d.actions.length === 0;
    }),
    { numRuns: RUNS },
  );
});

test('every confirmation rests on two complete observations with the same fingerprint, a grace window apart', () => {
  fc.assert(
    fc.property(seqArb, policyArb, (worlds, p) => {
      // Track, independently of decide, when each key was last seen unused with which fingerprint.
      const history = new Map<string, { first: number; fp: string; count: number }>();
      let lastAt: number | undefined;
      for (const { snap, d, at } of replay(worlds, p)) {
        const complete = snap.sources.every((s) => s.complete);
        for (const a of d.actions) {
          const h = history.get(a.target.key);
          if (!complete || !h) return false;
          if (h.fp !== a.target.fingerprint) return false;
          const grace = p.kindGraceMs?.[a.target.kind] ?? p.graceMs;
          if (at - h.first < grace) return false;
          if (h.count < 1) return false;
          if (a.target.keep) return false;
          if (snap.used.includes(a.target.key)) return false;
          if (snap.indeterminate.some((i) => i.key === a.target.key)) return false;
        }
        if (!complete || d.diff.outcome !== 'ok') continue;
        if (lastAt !== undefined && at < lastAt) history.clear();
        lastAt = at;
        const seen = new Set<string>();
        for (const t of snap.targets) {
          seen.add(t.key);
          const unused =
            !t.keep && !snap.used.includes(t.key) && !snap.indeterminate.some((i) => i.key === t.key);
          const h = history.get(t.key);
          if (!unused) history.delete(t.key);
          else if (!h || h.fp !== t.fingerprint)
            history.set(t.key, { first: at, fp: t.fingerprint, count: 1 });
          else h.count++;
        }
        for (const k of [...history.keys()]) if (!seen.has(k)) history.delete(k);
      }
      return true;
    }),
    { numRuns: RUNS },
  );
});

test('an incomplete snapshot never confirms and never advances the state', () => {
  fc.assert(
    fc.property(seqArb, worldArb, policyArb, (worlds, w, p) => {
      let last: State = state();
      for (const step of replay(worlds, p)) last = step.d.nextState;
      const at = (last.lastSnapshot?.takenAt ?? T0) + 60 * MIN;
      const d = decide(last, toSnapshot({ ...w, complete: false }, at), p, at);
      return d.actions.length === 0 && d.nextState === last && d.diff.outcome === 'aborted';
    }),
    { numRuns: RUNS },
  );
});

test('before grace nothing is confirmed', () => {
  fc.assert(
    fc.property(seqArb, policyArb, (worlds, p) => {
      // All steps forward and the total span shorter than the smallest grace.
      const minGrace = Math.min(p.graceMs, p.kindGraceMs?.Bit ?? p.graceMs);
      let span = 0;
      const short = worlds.map((w) => ({ ...w, stepMinutes: 0 }));
      for (const { d, at } of replay(short, p)) {
        span = at - T0;
        if (span < minGrace && d.actions.length > 0) return false;
      }
      return true;
    }),
    { numRuns: RUNS },
  );
});

test('a fingerprint change resets the candidate', () => {
  fc.assert(
    fc.property(policyArb, fc.integer({ min: 1, max: 100 }), (p, later) => {
      const t: Target = { key: 'a', kind: 'Thing', fingerprint: 'v1', name: 'a', keep: false };
      const s1 = decide(
        state(),
        {
          id: '1',
          function: FN,
          takenAt: T0,
          sources: sources(1, 1),
          targets: [t],
          used: [],
          indeterminate: [],
        },
        p,
        T0,
      ).nextState;
      const at = T0 + later * MIN;
      const d = decide(
        s1,
        {
          id: '2',
          function: FN,
          takenAt: at,
          sources: sources(1, 1),
          targets: [{ ...t, fingerprint: 'v2' }],
          used: [],
          indeterminate: [],
        },
        p,
        at,
      );
      return (
        d.actions.length === 0 && (d.diff.outcome !== 'ok' || d.nextState.candidates.a?.firstUnusedAt === at)
      );
    }),
    { numRuns: RUNS },
  );
});

test('keep-marked targets are never confirmed', () => {
  fc.assert(
    fc.property(seqArb, policyArb, (worlds, p) => {
      for (const { d } of replay(worlds, p)) if (d.actions.some((a) => a.target.keep)) return false;
      return true;
    }),
    { numRuns: RUNS },
  );
});

test('the guard bounds every run', () => {
  fc.assert(
    fc.property(seqArb, policyArb, (worlds, p) => {
      for (const { d, snap } of replay(worlds, p)) {
        const n = d.actions.length;
        if (n > p.maxDeletions) return false;
        if (n > 0 && (n / snap.targets.length) * 100 > p.maxDeletionPercent) return false;
      }
      return true;
    }),
    { numRuns: RUNS },
  );
});

test('decide is deterministic and never mutates its inputs', () => {
  fc.assert(
    fc.property(seqArb, worldArb, policyArb, (worlds, w, p) => {
      let s: State = state();
      for (const step of replay(worlds, p)) s = step.d.nextState;
      const at = (s.lastSnapshot?.takenAt ?? T0) + w.stepMinutes * MIN;
      const snap = toSnapshot(w, at);
      const before = structuredClone({ s, snap, p });
      deepFreeze(s);
      deepFreeze(snap);
      deepFreeze(p);
      const a = decide(s, snap, p, at); // frozen inputs: a write would throw in strict mode
      const b = decide(s, snap, p, at);
      assert.equal(a, b);
      assert.equal({ s, snap, p }, before);
      return true;
    }),
    { numRuns: RUNS },
  );
});

/** The snapshot a run that counts targets in use holds (decision 0017): those it reads nothing of are dropped. */
function counting(snap: Snapshot, s: State): Snapshot {
  const used = new Set(snap.used);
  const undecided = new Set(snap.indeterminate.map((i) => i.key));
  const drop = (t: Target) =>
    used.has(t.key) && !t.keep && !undecided.has(t.key) && !Object.hasOwn(s.candidates, t.key);
  const targets = snap.targets.filter((t) => !drop(t));
  const counted = snap.targets.length - targets.length;
  return { ...snap, targets, ...(counted > 0 ? { counted } : {}) };
}

test('counting the targets in use, instead of holding them, changes no decision', () => {
  fc.assert(
    fc.property(seqArb, policyArb, fc.boolean(), (worlds, p, blocked) => {
      for (const { before, snap, d, at } of replay(worlds, p)) {
        const full = blocked ? { ...snap, blockers: ['a Service is being placed'] } : snap;
        const a = decide(before, full, p, at);
        const small = counting(full, before);
        const b = decide(before, small, p, at);
        assert.equal(targetCount(small), full.targets.length);
        assert.equal(b.actions, a.actions);
        assert.equal(b.nextState, a.nextState);
        assert.equal(b.diff.summary, a.diff.summary);
        assert.equal(b.diff.outcome, a.diff.outcome);
        // under a blocker a counted target is counted undecided, without an event of its own
        const held = new Set(small.targets.map((t) => t.key));
        const said = a.diff.events.filter((e) => e.event !== 'target.indeterminate' || held.has(e.key));
        assert.equal(b.diff.events, blocked ? said : a.diff.events);
        if (!blocked) assert.equal(d, a);
      }
      return true;
    }),
    { numRuns: RUNS },
  );
});

test('liveness: unused in every snapshot for longer than grace + one interval is confirmed', () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 30 }),
      fc.integer({ min: 1, max: 20 }),
      fc.uniqueArray(keyArb, { minLength: 1 }),
      (graceMin, intervalMin, keys) => {
        const p: Policy = {
          graceMs: graceMin * MIN,
          maxDeletions: 100,
          maxDeletionPercent: 100,
          maxEvidenceDropPercent: 100,
        };
        const targets: Target[] = keys.map((key) => ({
          key,
          kind: 'Thing',
          fingerprint: 'v1',
          name: key,
          keep: false,
        }));
        let s: State = state();
        const confirmed = new Set<string>();
        for (let at = T0; at <= T0 + (graceMin + intervalMin) * MIN; at += intervalMin * MIN) {
          const d = decide(
            s,
            {
              id: String(at),
              function: FN,
              takenAt: at,
              sources: sources(targets.length, 5),
              targets,
              used: [],
              indeterminate: [],
            },
            p,
            at,
          );
          for (const a of d.actions) confirmed.add(a.target.key);
          s = d.nextState;
        }
        return keys.every((k) => confirmed.has(k));
      },
    ),
    { numRuns: RUNS },
  );
});

test.run();
