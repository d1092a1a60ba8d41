import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { decide } from '../../shared/engine/decide.ts';
import { MIN, policy, snapshot, state, target } from '../helpers/engine.ts';

const T0 = 1_800_000_000_000;

test('first unused observation makes a candidate, never an action', () => {
  const d = decide(state(), snapshot(T0, [target('a')]), policy(), T0);
  assert.equal(d.actions.length, 0);
  assert.ok(d.nextState.candidates.a);
  assert.is(d.nextState.candidates.a?.observations, 1);
  assert.ok(d.diff.events.some((e) => e.event === 'candidate.new'));
});

test('a second observation after grace confirms; before grace it is pending', () => {
  const s1 = decide(state(), snapshot(T0, [target('a')]), policy(), T0).nextState;
  const early = decide(s1, snapshot(T0 + 5 * MIN, [target('a')]), policy(), T0 + 5 * MIN);
  assert.equal(early.actions.length, 0);
  const pending = early.diff.events.find((e) => e.event === 'candidate.pending');
  assert.ok(pending && pending.event === 'candidate.pending' && pending.timeLeftMs === 5 * MIN);
  const late = decide(early.nextState, snapshot(T0 + 10 * MIN, [target('a')]), policy(), T0 + 10 * MIN);
  assert.equal(
    late.actions.map((a) => a.target.key),
    ['a'],
  );
  assert.is(late.actions[0]?.candidate.observations, 3);
});

test('use in between rescues and restarts observation', () => {
  let s = decide(state(), snapshot(T0, [target('a')]), policy(), T0).nextState;
  const used = decide(s, snapshot(T0 + 5 * MIN, [target('a')], ['a']), policy(), T0 + 5 * MIN);
  assert.ok(used.diff.events.some((e) => e.event === 'candidate.rescued'));
  assert.not.ok(used.nextState.candidates.a);
  s = decide(used.nextState, snapshot(T0 + 11 * MIN, [target('a')]), policy(), T0 + 11 * MIN).nextState;
  const d = decide(s, snapshot(T0 + 12 * MIN, [target('a')]), policy(), T0 + 12 * MIN);
  assert.equal(d.actions.length, 0, 'grace counts from the new first unused observation');
});

test('indeterminate targets are never candidates and reset existing ones', () => {
  const s = decide(state(), snapshot(T0, [target('a')]), policy(), T0).nextState;
  const d = decide(
    s,
    snapshot(T0 + 20 * MIN, [target('a')], [], { indeterminate: [{ key: 'a', reason: 'empty PodUID' }] }),
    policy(),
    T0 + 20 * MIN,
  );
  assert.equal(d.actions.length, 0);
  assert.not.ok(d.nextState.candidates.a);
  assert.ok(d.diff.events.some((e) => e.event === 'target.indeterminate' && e.reason === 'empty PodUID'));
});

test('a snapshot-wide blocker makes every target indeterminate', () => {
  const s = decide(state(), snapshot(T0, [target('a')]), policy(), T0).nextState;
  const d = decide(
    s,
    snapshot(T0 + 20 * MIN, [target('a')], [], { blockers: ['Service x is being placed'] }),
    policy(),
    T0 + 20 * MIN,
  );
  assert.equal(d.actions.length, 0);
  assert.is(d.diff.summary.indeterminate, 1);
});

test('incomplete snapshot: no actions, state unchanged, aborted', () => {
  const s = decide(state(), snapshot(T0, [target('a')]), policy(), T0).nextState;
  const snap = snapshot(T0 + 20 * MIN, [target('a')]);
  const bad = {
    ...snap,
    sources: [snap.sources[0]!, { ...snap.sources[1]!, complete: false, reason: '403' }],
  };
  const d = decide(s, bad, policy(), T0 + 20 * MIN);
  assert.equal(d.actions.length, 0);
  assert.is(d.nextState, s);
  assert.is(d.diff.outcome, 'aborted');
});

test('a snapshot without sources cannot be proven complete', () => {
  const d = decide(state(), snapshot(T0, [target('a')], [], { sources: [] }), policy(), T0);
  assert.is(d.diff.outcome, 'aborted');
});

test('fingerprint change resets the candidate', () => {
  const s = decide(state(), snapshot(T0, [target('a')]), policy(), T0).nextState;
  const d = decide(
    s,
    snapshot(T0 + 20 * MIN, [target('a', { fingerprint: 'a@2' })]),
    policy(),
    T0 + 20 * MIN,
  );
  assert.equal(d.actions.length, 0);
  assert.is(d.nextState.candidates.a?.firstUnusedAt, T0 + 20 * MIN);
  assert.ok(d.diff.events.some((e) => e.event === 'candidate.reset' && e.reason === 'fingerprint changed'));
});

test("a target's note is stored with its candidate, renewed at each unused observation, and decides nothing", () => {
  const at = (n: number) => T0 + n * MIN;
  const s1 = decide(state(), snapshot(at(0), [target('a', { note: 'r1' })]), policy(), at(0)).nextState;
  assert.is(s1.candidates.a?.note, 'r1');
  const s2 = decide(s1, snapshot(at(5), [target('a', { note: 'r2' })]), policy(), at(5)).nextState;
  assert.is(s2.candidates.a?.note, 'r2', 'renewed');
  assert.is(s2.candidates.a?.firstUnusedAt, at(0), 'the candidate kept its first observation');
  // the same runs without notes, or with other notes, decide the same
  for (const other of [undefined, 'x']) {
    const t = (n: string | undefined) => target('a', n === undefined ? {} : { note: n });
    const o1 = decide(state(), snapshot(at(0), [t(other)]), policy(), at(0)).nextState;
    const o2 = decide(o1, snapshot(at(5), [t(other)]), policy(), at(5)).nextState;
    const o3 = decide(o2, snapshot(at(10), [t(other)]), policy(), at(10));
    const n3 = decide(s2, snapshot(at(10), [target('a', { note: 'r3' })]), policy(), at(10));
    assert.equal(o3.diff.events, n3.diff.events);
    assert.equal(
      o3.actions.map((a) => a.target.key),
      n3.actions.map((a) => a.target.key),
    );
  }
});

test('keep-mark protects', () => {
  const s = decide(state(), snapshot(T0, [target('a', { keep: true })]), policy(), T0).nextState;
  assert.equal(Object.keys(s.candidates), []);
});

test('targets younger than minAge are never confirmed', () => {
  const young = target('a', { createdAt: T0 - MIN });
  const p = policy({ minAgeMs: 60 * MIN });
  const s = decide(state(), snapshot(T0, [young]), p, T0).nextState;
  const d = decide(s, snapshot(T0 + 20 * MIN, [young]), p, T0 + 20 * MIN);
  assert.equal(d.actions.length, 0);
  const e = d.diff.events.find((x) => x.event === 'candidate.pending');
  assert.ok(e && e.event === 'candidate.pending' && e.waitingFor === 'minimum age');
  const later = decide(d.nextState, snapshot(T0 + 60 * MIN, [young]), p, T0 + 60 * MIN);
  assert.equal(later.actions.length, 1);
});

test('time going backwards confirms nothing and restarts observation', () => {
  const s = decide(state(), snapshot(T0, [target('a')]), policy(), T0).nextState;
  const back = decide(s, snapshot(T0 - 60 * MIN, [target('a')]), policy(), T0 - 60 * MIN);
  assert.equal(back.actions.length, 0);
  assert.is(back.nextState.candidates.a?.firstUnusedAt, T0 - 60 * MIN);
  const d = decide(back.nextState, snapshot(T0 + 5 * MIN, [target('a')]), policy(), T0 + 5 * MIN);
  assert.equal(d.actions.length, 1, 'observation restarted at T0-60m, so 65 minutes later it confirms');
});

test('per-kind grace', () => {
  const p = policy({ graceMs: 60 * MIN, kindGraceMs: { Bit: 5 * MIN } });
  const ts = [target('a'), target('b', { kind: 'Bit' })];
  const s = decide(state(), snapshot(T0, ts), p, T0).nextState;
  const d = decide(s, snapshot(T0 + 5 * MIN, ts), p, T0 + 5 * MIN);
  assert.equal(
    d.actions.map((a) => a.target.key),
    ['b'],
  );
});

test('guard: too many deletions refuses all and keeps the state', () => {
  const ts = ['a', 'b', 'c'].map((k) => target(k));
  const p = policy({ maxDeletions: 2 });
  const s = decide(state(), snapshot(T0, ts), p, T0).nextState;
  const d = decide(s, snapshot(T0 + 20 * MIN, ts), p, T0 + 20 * MIN);
  assert.equal(d.actions.length, 0);
  assert.is(d.diff.outcome, 'refused');
  assert.is(d.nextState, s);
});

test('guard: percentage of targets', () => {
  const ts = ['a', 'b', 'c', 'd'].map((k) => target(k));
  const p = policy({ maxDeletionPercent: 50 });
  let s = decide(state(), snapshot(T0, ts), p, T0).nextState;
  const used = ['c', 'd'];
  // only a and b confirmable: 50% is allowed
  s = decide(state(), snapshot(T0, ts, used), p, T0).nextState;
  const ok = decide(s, snapshot(T0 + 20 * MIN, ts, used), p, T0 + 20 * MIN);
  assert.equal(ok.actions.length, 2);
  const s2 = decide(state(), snapshot(T0, ts, ['d']), p, T0).nextState;
  const refused = decide(s2, snapshot(T0 + 20 * MIN, ts, ['d']), p, T0 + 20 * MIN);
  assert.is(refused.diff.outcome, 'refused');
});

const withUsers = (at: number, ts: ReturnType<typeof target>[], users: number, used: string[] = []) =>
  snapshot(at, ts, used, {
    sources: [
      { name: 'things', role: 'target', count: ts.length, complete: true },
      { name: 'users', role: 'evidence', count: users, complete: true },
    ],
  });

test('guard: evidence that shrank sharply refuses and does not become the baseline', () => {
  const ts = [target('a')];
  const p = policy({ maxEvidenceDropPercent: 50 });
  const s = decide(state(), snapshot(T0, ts, ['a']), p, T0).nextState; // evidence 101
  const broken = withUsers(T0 + 20 * MIN, ts, 0);
  const d = decide(s, broken, p, T0 + 20 * MIN);
  assert.is(d.diff.outcome, 'refused');
  assert.equal(d.nextState.lastSnapshot, s.lastSnapshot, 'the baseline did not move');
  assert.equal(d.nextState.candidates, s.candidates);
  const reason = String(d.diff.events.find((e) => e.event === 'run.refused')?.reason);
  assert.match(reason, /evidence users shrank from 101 to 0/);
  assert.match(reason, /twopass state accept-evidence test-fn/, 'the refusal names the way out');
  assert.match(reason, /raise maxEvidenceDropPercent to at least 100/);
  const again = decide(d.nextState, { ...broken, takenAt: T0 + 40 * MIN }, p, T0 + 40 * MIN);
  assert.is(again.diff.outcome, 'refused', 'still compared with the last good snapshot');
});

test("evidence baseline: a snapshot that did not list a source keeps that source's baseline; the next broken list of it is refused", () => {
  const ts = [target('a')];
  const p = policy({ maxEvidenceDropPercent: 50 });
  const s = decide(state(), withUsers(T0, ts, 100, ['a']), p, T0).nextState;
  const without = snapshot(T0 + 5 * MIN, ts, ['a'], {
    sources: [{ name: 'things', role: 'target', count: 1, complete: true }],
  });
  const kept = decide(s, without, p, T0 + 5 * MIN);
  assert.is(kept.diff.outcome, 'ok');
  assert.is(kept.nextState.lastSnapshot?.counts.users, 100, 'the baseline of users is kept');
  assert.is(kept.nextState.lastSnapshot?.evidence?.users, true);
  const broken = decide(kept.nextState, withUsers(T0 + 10 * MIN, ts, 85), p, T0 + 10 * MIN);
  assert.is(broken.diff.outcome, 'ok', 'within the bound');
  const worse = decide(kept.nextState, withUsers(T0 + 10 * MIN, ts, 10), p, T0 + 10 * MIN);
  assert.is(worse.diff.outcome, 'refused', 'held to the kept baseline');
});

test('evidence baseline: a lower count held over the acceptance window is accepted on its own; the candidates stay', () => {
  const ts = [target('a'), target('b')];
  const p = policy({ maxEvidenceDropPercent: 30, acceptEvidenceDropAfterMs: 60 * MIN });
  let s = decide(state(), withUsers(T0, ts, 4, ['a']), p, T0).nextState; // b: first unused observation
  const first = decide(s, withUsers(T0 + 5 * MIN, ts, 2, ['a']), p, T0 + 5 * MIN);
  assert.is(first.diff.outcome, 'refused', 'a single snapshot with a sharp drop refuses');
  assert.match(
    String(first.diff.events.find((e) => e.event === 'run.refused')?.reason),
    /accepted on its own once held for 1h/,
  );
  s = first.nextState;
  for (const m of [10, 30, 60]) {
    const d = decide(s, withUsers(T0 + m * MIN, ts, 2, ['a']), p, T0 + m * MIN);
    assert.is(d.diff.outcome, 'refused', `held ${m - 5} min: not yet`);
    s = d.nextState;
  }
  const accepted = decide(s, withUsers(T0 + 66 * MIN, ts, 2, ['a']), p, T0 + 66 * MIN);
  assert.is(accepted.diff.outcome, 'ok');
  const ev = accepted.diff.events.find((e) => e.event === 'evidence.accepted');
  assert.ok(ev && ev.event === 'evidence.accepted' && ev.how === 'automatic');
  assert.is(accepted.nextState.lastSnapshot?.counts.users, 2, 'the lower count is the new baseline');
  assert.is(accepted.nextState.evidenceDrop, undefined);
  assert.ok(
    accepted.actions.some((a) => a.target.key === 'b'),
    'the pending candidate was kept and confirmed',
  );
  const later = decide(accepted.nextState, withUsers(T0 + 70 * MIN, ts, 2, ['a']), p, T0 + 70 * MIN);
  assert.is(later.diff.outcome, 'ok', 'no longer refused');
});

test('evidence baseline: a drop that keeps falling restarts the window; a drop to zero is never accepted on its own', () => {
  const ts = [target('a')];
  const p = policy({ maxEvidenceDropPercent: 30, acceptEvidenceDropAfterMs: 10 * MIN });
  let s = decide(state(), withUsers(T0, ts, 100, ['a']), p, T0).nextState;
  s = decide(s, withUsers(T0 + 5 * MIN, ts, 60, ['a']), p, T0 + 5 * MIN).nextState;
  const falling = decide(s, withUsers(T0 + 20 * MIN, ts, 20, ['a']), p, T0 + 20 * MIN);
  assert.is(falling.diff.outcome, 'refused', 'still falling: the window restarts');
  assert.is(falling.nextState.evidenceDrop?.firstSeenAt, T0 + 20 * MIN);
  let z = decide(state(), withUsers(T0, ts, 100, ['a']), p, T0).nextState;
  for (let m = 5; m <= 120; m += 5)
    z = decide(z, withUsers(T0 + m * MIN, ts, 0, ['a']), p, T0 + m * MIN).nextState;
  const zero = decide(z, withUsers(T0 + 125 * MIN, ts, 0, ['a']), p, T0 + 125 * MIN);
  assert.is(zero.diff.outcome, 'refused');
  assert.match(
    String(zero.diff.events.find((e) => e.event === 'run.refused')?.reason),
    /drop to zero is never accepted/,
  );
  const cmd = decide(z, withUsers(T0 + 125 * MIN, ts, 0, ['a']), p, T0 + 125 * MIN, { acceptEvidence: true });
  assert.is(cmd.diff.outcome, 'ok', 'the operator can accept it');
  assert.ok(cmd.diff.events.some((e) => e.event === 'evidence.accepted' && e.how === 'command'));
});

test('guard: the percentage applies only above minDeletionsForPercent; every refusal says what to raise', () => {
  const ts = ['a', 'b', 'c', 'd'].map((k) => target(k));
  const p = policy({ maxDeletionPercent: 20, minDeletionsForPercent: 20 });
  const s = decide(state(), snapshot(T0, ts, ['b', 'c', 'd']), p, T0).nextState;
  const one = decide(s, snapshot(T0 + 20 * MIN, ts, ['b', 'c', 'd']), p, T0 + 20 * MIN);
  assert.is(one.diff.outcome, 'ok', 'one deletion in a pool of four (25%) is allowed');
  const many = Array.from({ length: 30 }, (_, i) => target(`t${i}`));
  const strict = policy({ maxDeletions: 25, maxDeletionPercent: 20, minDeletionsForPercent: 20 });
  const s2 = decide(state(), snapshot(T0, many), strict, T0).nextState;
  const d = decide(s2, snapshot(T0 + 20 * MIN, many), strict, T0 + 20 * MIN);
  const reason = String(d.diff.events.find((e) => e.event === 'run.refused')?.reason);
  assert.match(reason, /raise maxDeletions to at least 30/);
  assert.match(reason, /raise maxDeletionPercent to at least 100/);
});

test('vanished candidates are dropped', () => {
  const s = decide(state(), snapshot(T0, [target('a')]), policy(), T0).nextState;
  const d = decide(s, snapshot(T0 + MIN, []), policy(), T0 + MIN);
  assert.equal(d.nextState.candidates, {});
  assert.ok(d.diff.events.some((e) => e.event === 'candidate.reset' && e.reason === 'target vanished'));
});

test('state of another function is refused', () => {
  const d = decide({ ...state(), function: 'other' }, snapshot(T0, [target('a')]), policy(), T0);
  assert.is(d.diff.outcome, 'aborted');
});

test.run();
