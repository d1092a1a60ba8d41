import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { MINUTE as MIN } from '../../shared/contract/index.ts';
import type { Policy, Snapshot } from '../../shared/engine/types.ts';
import { ListIncompleteError } from '../../shared/errors.ts';
import { EXIT } from '../../shared/runtime/errors.ts';
import { type RunDeps, type RunRequest, run } from '../../shared/runtime/run.ts';
import { StateConflictError } from '../../shared/state/errors.ts';
import { FileLock, FileStateStore } from '../../shared/state/file.ts';
import type { StateStore } from '../../shared/state/store.ts';
import { evidenceWindowThroughStore } from '../helpers/engine.ts';
import { captureLog, MEM, memFunction, type World, world } from '../helpers/memfn.ts';
import { testTime } from '../helpers/time.ts';

const T0 = Date.parse('2026-12-02T10:00:00Z');
const test = suite<{ dir: string }>('run loop', { dir: '' });
test.before.each((ctx) => {
  ctx.dir = mkdtempSync(join(tmpdir(), 'twopass-run-'));
});
test.after.each((ctx) => rmSync(ctx.dir, { recursive: true, force: true }));

const policy: Policy = {
  graceMs: 10 * MIN,
  maxDeletions: 100,
  maxDeletionPercent: 100,
  maxEvidenceDropPercent: 100,
};

function setup(dir: string, w: World, opts: { store?: StateStore; lockPid?: number } = {}) {
  let now = T0;
  const clock = () => now;
  const cap = captureLog(clock);
  let n = 0;
  const deps: RunDeps<World, World> = {
    fn: memFunction(),
    reader: w,
    writer: w,
    store: opts.store ?? new FileStateStore(dir),
    lock: new FileLock(dir, clock, opts.lockPid),
    time: testTime(clock),
    log: cap.log,
    newId: () => `id-${++n}`,
  };
  const req = (over: Partial<RunRequest> = {}): RunRequest => ({
    apply: true,
    record: false,
    policy,
    deadlineMs: 60_000,
    concurrency: 2,
    ...over,
  });
  return { deps, req, cap, advance: (ms: number) => (now += ms) };
}

test('dry run is the default: nothing removed, no state unless --record', async ({ dir }) => {
  const w = world(['a']);
  const s = setup(dir, w);
  const r1 = await run(s.deps, s.req({ apply: false }));
  assert.is(r1.exitCode, EXIT.ok);
  assert.throws(() => readFileSync(join(dir, `${MEM}.json`)), /ENOENT/);
  await run(s.deps, s.req({ apply: false, record: true }));
  s.advance(11 * MIN);
  const r3 = await run(s.deps, s.req({ apply: false, record: true }));
  assert.equal(r3.confirmed, ['a']);
  assert.equal(w.writes, []);
  assert.ok(w.things.has('a'));
  const confirmed = s.cap.events('candidate.confirmed');
  assert.is(confirmed[0]?.dryRun, true);
});

test('apply: two observations a grace window apart, re-check, delete, confirm by a read', async ({ dir }) => {
  const w = world(['a', 'b'], { u1: 'b' });
  const s = setup(dir, w);
  const r1 = await run(s.deps, s.req());
  assert.equal(r1.deleted, []);
  s.advance(10 * MIN);
  const r2 = await run(s.deps, s.req());
  assert.equal(r2.deleted, ['a']);
  assert.equal(w.writes, ['delete a']);
  assert.ok(w.things.has('b'));
  const del = s.cap.events('resource.deleted');
  assert.is(del.length, 1);
  for (const e of s.cap.lines) {
    assert.is(e.function, MEM);
    assert.ok(e.runId);
  }
  assert.ok(
    s.cap.events('candidate.new').every((e) => e.snapshotId),
    'diff events carry the snapshot id',
  );
  const stored = JSON.parse(readFileSync(join(dir, `${MEM}.json`), 'utf8'));
  assert.equal(Object.keys(stored.state.candidates), [], 'deleted candidates leave the state');
});

test('a re-check that finds use skips and resets; not a run failure', async ({ dir }) => {
  const w = world(['a']);
  const s = setup(dir, w);
  await run(s.deps, s.req());
  s.advance(10 * MIN);
  w.between = () => {}; // nothing in between observe lists
  const fn = s.deps.fn;
  const recheck = fn.recheck.bind(fn);
  (s.deps as { fn: typeof fn }).fn = {
    ...fn,
    recheck: async (r, t, c) => {
      w.users.set('late', 'a');
      return recheck(r, t, c);
    },
  };
  const r = await run(s.deps, s.req());
  assert.is(r.exitCode, EXIT.ok);
  assert.equal(r.skipped, ['a']);
  assert.equal(w.writes, []);
  assert.match(String(s.cap.events('delete.skipped')[0]?.reason), /in use/);
  const stored = JSON.parse(readFileSync(join(dir, `${MEM}.json`), 'utf8'));
  assert.not.ok(stored.state.candidates.a, 'the candidate starts over');
});

test('a failed precondition is delete.skipped', async ({ dir }) => {
  const w = world(['a']);
  const s = setup(dir, w);
  await run(s.deps, s.req());
  s.advance(10 * MIN);
  w.faults.remove = () => {
    w.things.get('a')!.version = 2; // changed between re-check and delete
  };
  const r = await run(s.deps, s.req());
  assert.equal(r.skipped, ['a']);
  assert.ok(w.things.has('a'));
  assert.match(String(s.cap.events('delete.skipped')[0]?.reason), /precondition/);
});

test('a delete that reports success but a read still finds is delete.failed (exit 1)', async ({ dir }) => {
  const w = world(['a']);
  w.lyingDelete = true;
  const s = setup(dir, w);
  await run(s.deps, s.req());
  s.advance(10 * MIN);
  const r = await run(s.deps, s.req());
  assert.is(r.exitCode, EXIT.error);
  assert.equal(r.failed, ['a']);
  assert.equal(s.cap.events('resource.deleted'), []);
  assert.is(s.cap.events('delete.failed').length, 1);
});

test('a delete whose own answer shows it gone is not read back; one whose answer does not is', async ({
  dir,
}) => {
  const w = world(['a', 'b']);
  const s = setup(dir, w);
  await run(s.deps, s.req());
  s.advance(10 * MIN);
  let reads = 0;
  w.faults.confirm = () => void reads++;
  w.answerShowsGone = true;
  const r = await run(s.deps, s.req());
  assert.is(r.exitCode, EXIT.ok);
  assert.equal([...r.deleted].sort(), ['a', 'b']);
  assert.is(reads, 0, 'read back although the answer showed it gone');
  // the same deletions answered without that: each is read back
  const w2 = world(['c']);
  const s2 = setup(join(dir, 'second'), w2);
  await run(s2.deps, s2.req());
  s2.advance(10 * MIN);
  w2.faults.confirm = () => void reads++;
  assert.equal((await run(s2.deps, s2.req())).deleted, ['c']);
  assert.is(reads, 1);
});

test('an observation that fails aborts with exit 3: nothing deleted, state intact', async ({ dir }) => {
  const w = world(['a']);
  const s = setup(dir, w);
  await run(s.deps, s.req());
  const before = readFileSync(join(dir, `${MEM}.json`), 'utf8');
  s.advance(10 * MIN);
  w.faults.observe = () => {
    throw new ListIncompleteError('list users', '403 Forbidden');
  };
  const r = await run(s.deps, s.req());
  assert.is(r.exitCode, EXIT.incomplete);
  assert.equal(w.writes, []);
  assert.is(readFileSync(join(dir, `${MEM}.json`), 'utf8'), before);
  const ab = s.cap.events('run.aborted')[0];
  assert.is(ab?.call, 'list users');
  assert.match(String(ab?.reason), /403/);
});

test('the guard refuses with exit 4 and deletes nothing', async ({ dir }) => {
  const w = world(['a', 'b', 'c']);
  const s = setup(dir, w);
  await run(s.deps, s.req({ policy: { ...policy, maxDeletions: 2 } }));
  s.advance(10 * MIN);
  const r = await run(s.deps, s.req({ policy: { ...policy, maxDeletions: 2 } }));
  assert.is(r.exitCode, EXIT.refused);
  assert.equal(w.writes, []);
  assert.match(String(s.cap.events('run.refused')[0]?.reason), /maxDeletions 2/);
});

test('a second run while the lock is held exits 5 and writes nothing', async ({ dir }) => {
  const w = world(['a']);
  const s = setup(dir, w);
  const holder = await new FileLock(dir, Date.now).acquire(MEM);
  const r = await run(s.deps, s.req());
  assert.is(r.exitCode, EXIT.locked);
  assert.throws(() => readFileSync(join(dir, `${MEM}.json`)), /ENOENT/);
  await holder.release();
  assert.is((await run(s.deps, s.req())).exitCode, EXIT.ok);
});

test('a lock left by a dead process is taken over', async ({ dir }) => {
  writeFileSync(
    join(dir, `${MEM}.lock`),
    JSON.stringify({
      pid: 2 ** 22 + 12345,
      host: (await import('node:os')).hostname(),
      token: 'x',
      acquiredAt: 'then',
    }),
  );
  const s = setup(dir, world(['a']));
  assert.is((await run(s.deps, s.req())).exitCode, EXIT.ok);
});

test('corrupt state: a clear error, exit 1, nothing deleted', async ({ dir }) => {
  const w = world(['a']);
  const s = setup(dir, w);
  writeFileSync(
    join(dir, `${MEM}.json`),
    '{"revision": 3, "state": {"schemaVersion": 1, "function": "mem-things", "candidates": {"a": {"kind": 5}}}}',
  );
  const r = await run(s.deps, s.req());
  assert.is(r.exitCode, EXIT.error);
  assert.match(String(r.error), /state reset mem-things/);
  assert.equal(w.writes, []);
  writeFileSync(join(dir, `${MEM}.json`), '{not json');
  assert.is((await run(s.deps, s.req())).exitCode, EXIT.error);
  writeFileSync(
    join(dir, `${MEM}.json`),
    '{"revision": 1, "state": {"schemaVersion": 99, "function": "mem-things", "candidates": {}}}',
  );
  const r3 = await run(s.deps, s.req());
  assert.match(String(r3.error), /schemaVersion 99/);
});

test('a state write that lost the race aborts before any deletion (exit 3)', async ({ dir }) => {
  const w = world(['a']);
  const inner = new FileStateStore(dir);
  let saves = 0;
  const racing: StateStore = {
    description: 'racing',
    load: (fn) => inner.load(fn),
    save: async (fn, st, v) => {
      saves++;
      if (saves === 2) throw new StateConflictError('another writer saved state first');
      return inner.save(fn, st, v);
    },
    reset: (fn) => inner.reset(fn),
  };
  const s = setup(dir, w, { store: racing });
  await run(s.deps, s.req());
  s.advance(10 * MIN);
  const r = await run(s.deps, s.req());
  assert.is(r.exitCode, EXIT.incomplete);
  assert.equal(w.writes, []);
  assert.is(s.cap.events('run.aborted')[0]?.call, 'state.save');
});

test('the file store refuses a stale writer', async ({ dir }) => {
  const store = new FileStateStore(dir);
  const { state } = await store.load('x');
  const v1 = await store.save('x', state, undefined);
  await store.save('x', state, v1);
  try {
    await store.save('x', state, v1);
    assert.unreachable('stale save accepted');
  } catch (err) {
    assert.instance(err, StateConflictError);
  }
});

test('secrets are redacted in logs', async () => {
  const cap = captureLog(() => T0);
  cap.log.info(
    { event: 'x', auth: { password: 'hunter2', token: 'abc' }, headers: { authorization: 'Bearer abc' } },
    'x',
  );
  const text = JSON.stringify(cap.lines);
  assert.not.ok(text.includes('hunter2'));
  assert.not.ok(text.includes('Bearer abc'));
});

/**
 * A diff log that can be lost, as the CLI's stdout is by `| head -1`: at once (`lose`), or
 * as the `loseAt`-th hand-over (barrier) finds it, which is where a closed pipe's EPIPE
 * surfaces: a deterministic stand-in for the reader that goes away at any point.
 */
function sink(loseAt?: number) {
  const gone = new AbortController();
  let why: string | undefined;
  let barriers = 0;
  const warned: string[] = [];
  const lose = () => {
    why = 'its reader closed the pipe';
    gone.abort(new Error('gone'));
  };
  return {
    logSink: {
      lost: () => why,
      signal: gone.signal,
      warn: (m: string) => warned.push(m),
      barrier: async () => {
        if (++barriers === loseAt) lose();
      },
    },
    lose,
    warned,
    barriers: () => barriers,
  };
}

test('the diff log lost after the act phase began: the unit not yet started is not, the deletion made keeps its Event, exit 1, stderr says what is true', async ({
  dir,
}) => {
  const w = world(['a', 'b']);
  const s = setup(dir, w);
  const k = sink(2); // the first unit's lines got through; the pipe is found closed at the second's
  const events: string[] = [];
  const deps = {
    ...s.deps,
    fn: {
      ...s.deps.fn,
      eventFor: (removed: readonly { target: { key: string } }[]) => ({
        namespace: 'default',
        involved: { apiVersion: 'v1', kind: 'Thing', name: removed[0]!.target.key },
        reason: 'Reclaimed',
        message: 'deleted',
      }),
    },
    logSink: k.logSink,
    // as the HTTP client does: a call under an aborted signal is refused
    recordEvent: async (note: { involved: { name: string } }, signal: AbortSignal) => {
      if (signal.aborted) throw new Error('aborted');
      events.push(note.involved.name);
    },
  };
  await run(deps, s.req({ concurrency: 1 }));
  s.advance(11 * MIN);
  const r = await run(deps, s.req({ concurrency: 1 }));
  assert.is(r.exitCode, EXIT.error);
  assert.is(r.deleted.length, 1, 'the unit whose lines reached the log');
  assert.is(w.writes.length, 1, 'the other was not started');
  assert.equal(events, r.deleted, 'the deletion made has its Event');
  const started = s.cap.events('delete.started').map((e) => e.key);
  assert.ok(started.includes(r.deleted[0]!), 'its delete.started line came before it');
  assert.match(k.warned.join('\n'), /went away while deleting .*1 deletion\(s\) made .*1 not started/);
  assert.not.ok(k.warned.join('\n').includes('abandoned'));
});

test('the diff log found lost only after the last deletion: every deletion made, yet never exit 0', async ({
  dir,
}) => {
  const w = world(['a', 'b']);
  const s = setup(dir, w);
  const k = sink(3); // two units, then the hand-over after the act phase
  const deps = { ...s.deps, logSink: k.logSink };
  await run(deps, s.req({ concurrency: 1 }));
  s.advance(11 * MIN);
  const r = await run(deps, s.req({ concurrency: 1 }));
  assert.is(k.barriers(), 3);
  assert.is(r.deleted.length, 2);
  assert.is(r.exitCode, EXIT.error, 'a run that lost its log while acting never exits 0');
  assert.match(k.warned.join('\n'), /2 deletion\(s\) made .*0 not started.*twopass restore/);
});

test('a deleting run whose diff log is gone does not start deleting: exit 1, said on stderr', async ({
  dir,
}) => {
  const w = world(['a', 'b']);
  const s = setup(dir, w);
  const k = sink();
  const deps = { ...s.deps, logSink: k.logSink };
  await run(deps, s.req());
  s.advance(11 * MIN);
  k.lose();
  const r = await run(deps, s.req());
  assert.is(r.exitCode, EXIT.error);
  assert.equal(r.deleted, []);
  assert.equal(w.writes, [], 'nothing deleted');
  assert.match(k.warned.join('\n'), /diff log is gone .*nothing deleted, 2 confirmed deletions not started/);
});

test('a run that loses its diff log while deleting stops and says so on stderr', async ({ dir }) => {
  const w = world(['a', 'b', 'c']);
  const s = setup(dir, w);
  const k = sink();
  const deps = { ...s.deps, logSink: k.logSink, hooks: { deleted: () => k.lose() } };
  await run(deps, s.req({ concurrency: 1 }));
  s.advance(11 * MIN);
  const r = await run(deps, s.req({ concurrency: 1 }));
  assert.is(r.deleted.length, 1, 'the deletion in flight finished; none started after');
  assert.is(w.writes.length, 1);
  assert.is(r.exitCode, EXIT.error);
  assert.match(k.warned.join('\n'), /went away while deleting/);
});

test("the file store keeps the evidence guard's window across runs: a drop is accepted on its own", async ({
  dir,
}) => {
  const w = await evidenceWindowThroughStore(new FileStateStore(dir));
  assert.is(w.held.length, 4, 'four refused runs');
  assert.ok(
    w.held.every((at) => at !== undefined && at === w.held[0]),
    `one window, not a new one each run: ${w.held}`,
  );
  assert.ok(w.storedDrop, 'the stored state holds the window');
  assert.is(w.final, 'ok');
});

test('run --apply --report: the report of what the run set out to delete is written before it deletes', async ({
  dir,
}) => {
  const w = world(['a', 'b']);
  const s = setup(dir, w);
  await run(s.deps, s.req());
  s.advance(11 * MIN);
  const written: { entries: number; writesBefore: number }[] = [];
  const r = await run(
    s.deps,
    s.req({
      report: async (rep) => {
        written.push({ entries: rep.entries.length, writesBefore: w.writes.length });
        return join(dir, 'r.json');
      },
    }),
  );
  assert.equal([...r.deleted].sort(), ['a', 'b']);
  assert.equal(written, [{ entries: 2, writesBefore: 0 }], 'written once, before the first deletion');
  assert.match(String(s.cap.events('report.written')[0]?.why), /apply/);
});

test('a run counts the targets in use it reads nothing of; a saved snapshot holds them all (decision 0017)', async ({
  dir,
}) => {
  const w = world(['a', 'b', 'c'], { u1: 'a' });
  const s = setup(dir, w);
  const saved: Snapshot[] = [];
  await run(s.deps, s.req({ apply: false, record: true }));
  const taken = s.cap.events('snapshot.taken')[0]!;
  assert.equal([taken.targets, taken.counted, taken.used], [3, 1, 1], 'a is counted in use, not held');
  assert.equal(
    s.cap.events('candidate.new').map((e) => e.key),
    ['b', 'c'],
  );
  // b comes into use: a stored candidate is held, so that its rescue is said
  w.users.set('u2', 'b');
  s.advance(11 * MIN);
  const r = await run({ ...s.deps, saveSnapshot: async (x: Snapshot) => `mem ${saved.push(x)}` }, s.req());
  assert.equal(r.deleted, ['c']);
  assert.equal(
    s.cap.events('candidate.rescued').map((e) => e.key),
    ['b'],
  );
  assert.equal(
    saved[0]?.targets.map((t) => t.key),
    ['a', 'b', 'c'],
    'a saved snapshot holds every target',
  );
  assert.is(saved[0]?.counted, undefined);
  s.advance(11 * MIN);
  await run(s.deps, s.req());
  const last = s.cap.events('snapshot.taken').at(-1)!;
  assert.equal([last.targets, last.counted, last.used], [2, 2, 2]);
  const { targets, used, newCandidates, pending, confirmed } = s.cap.events('run.finished').at(-1)!
    .summary as Record<string, number>;
  assert.equal(
    [targets, used, newCandidates, pending, confirmed],
    [2, 2, 0, 0, 0],
    'the counted are in the summary',
  );
});

test('a dry run without --record says that its observations are not recorded', async ({ dir }) => {
  const s = setup(dir, world(['a']));
  await run(s.deps, s.req({ apply: false }));
  const said = s.cap.events('state.not-recorded');
  assert.is(said.length, 1);
  assert.match(String(said[0]!.reason), /not saved, so the next run sees every candidate as new again/);
  await run(s.deps, s.req({ apply: false, record: true }));
  assert.is(s.cap.events('state.not-recorded').length, 1, 'a recording run does not say it');
});

test('run() owns every outcome: a snapshot file, a report or a hook that fails is logged and counted, and the run still ends with run.finished', async ({
  dir,
}) => {
  const w = world(['a']);
  const s = setup(dir, w);
  const deps = {
    ...s.deps,
    saveSnapshot: async () => {
      throw new Error('ENOSPC: no space left');
    },
    hooks: {
      deleted: () => {
        throw new Error('metrics registry broke');
      },
      finished: () => {
        throw new Error('webhook hook broke');
      },
    },
  };
  const failingReport = async () => {
    throw new Error('EACCES: report dir');
  };
  const dry = await run(deps, s.req({ apply: false, record: true, report: failingReport }));
  assert.is(dry.exitCode, EXIT.error, 'a lost side output makes a clean run exit 1');
  assert.is(dry.sideFailures, 2, 'the snapshot file and the report');
  assert.equal(
    s.cap.lines.filter((l) => String(l.event).endsWith('failed')).map((l) => l.event),
    ['snapshot.save-failed', 'report.failed', 'hook.failed'],
  );
  assert.is(s.cap.events('run.finished').length, 1);
  s.advance(11 * MIN);
  const applied = await run(deps, s.req());
  assert.equal(applied.deleted, ['a'], 'a hook that throws does not undo or fail the deletion');
  assert.equal(applied.failed, []);
  assert.ok(s.cap.events('hook.failed').some((e) => e.call === 'hooks.deleted'));
  assert.is(s.cap.events('run.finished').length, 2);
});

test('run() owns every outcome: anything a phase did not expect is a failed run with run.finished, exit 1, the lock released', async ({
  dir,
}) => {
  const w = world(['a']);
  const s = setup(dir, w);
  const fn = {
    ...s.deps.fn,
    batchOf: () => {
      throw new Error('a bug in batchOf');
    },
  };
  await run(s.deps, s.req());
  s.advance(11 * MIN);
  const r = await run({ ...s.deps, fn }, s.req());
  assert.is(r.outcome, 'failed');
  assert.is(r.exitCode, EXIT.error);
  assert.match(String(r.error), /a bug in batchOf/);
  const fin = s.cap.events('run.finished');
  assert.is(fin.at(-1)?.exitCode, EXIT.error);
  const again = await run(s.deps, s.req());
  assert.is(again.outcome, 'ok', 'the lock was released');
});

test.run();
