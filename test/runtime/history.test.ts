/**
 * The history of runs: each run that writes state leaves a record of what it did and why,
 * bounded, beside the state; one that cannot be written never stops a deletion.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { MINUTE as MIN } from '../../shared/contract/index.ts';
import type { DiffEvent, Policy } from '../../shared/engine/types.ts';
import { EXIT } from '../../shared/runtime/errors.ts';
import { type RunDeps, type RunRequest, run } from '../../shared/runtime/run.ts';
import { FileLock, FileStateStore } from '../../shared/state/file.ts';
import { FileHistory, MemoryHistory, type RunRecord, recordOf, trailOf } from '../../shared/state/history.ts';
import type { StateStore } from '../../shared/state/store.ts';
import { captureLog, MEM, memFunction, type World, world } from '../helpers/memfn.ts';
import { testTime } from '../helpers/time.ts';

const T0 = Date.parse('2026-12-06T10:00:00Z');
const test = suite<{ dir: string }>('history of runs', { dir: '' });
test.before.each((ctx) => {
  ctx.dir = mkdtempSync(join(tmpdir(), 'twopass-history-'));
});
test.after.each((ctx) => rmSync(ctx.dir, { recursive: true, force: true }));

const policy: Policy = {
  graceMs: 10 * MIN,
  maxDeletions: 100,
  maxDeletionPercent: 100,
  maxEvidenceDropPercent: 100,
};

function setup(dir: string, w: World, store: StateStore = new FileStateStore(dir)) {
  let now = T0;
  const clock = () => now;
  const cap = captureLog(clock);
  let n = 0;
  const deps: RunDeps<World, World> = {
    fn: memFunction(),
    reader: w,
    writer: w,
    store,
    lock: new FileLock(dir, clock),
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

const facts = (events: DiffEvent[], over: Partial<Parameters<typeof recordOf>[0]> = {}) => ({
  function: 'f',
  runId: 'r1',
  startedAt: T0,
  durationMs: 5,
  dryRun: false,
  outcome: 'ok',
  exitCode: 0,
  events,
  deleted: [],
  held: [],
  skipped: [],
  failed: [],
  ...over,
});

test('a record holds each list with its reasons; a list is cut to its first entries and keeps its whole count', () => {
  const pending: DiffEvent[] = Array.from({ length: 7 }, (_, i) => ({
    event: 'candidate.pending',
    key: `p${i}`,
    kind: 'K',
    name: `pend-${i}`,
    observations: 2,
    timeLeftMs: 4 * MIN,
    waitingFor: 'the grace',
  }));
  const r = recordOf(
    facts(
      [
        { event: 'candidate.new', key: 'n1', kind: 'K', name: 'new-1' },
        ...pending,
        { event: 'candidate.rescued', key: 'r1', kind: 'K', name: 'res-1', unusedForMs: 3 * MIN },
        { event: 'candidate.reset', key: 's1', kind: 'K', name: 'reset-1', reason: 'fingerprint changed' },
        { event: 'target.indeterminate', key: 'i1', kind: 'K', name: 'ind-1', reason: 'owner unreadable' },
        {
          event: 'candidate.confirmed',
          key: 'c1',
          kind: 'K',
          name: 'conf-1',
          unusedForMs: 11 * MIN,
          observations: 2,
        },
        { event: 'run.refused', reason: 'too many', guards: ['max-deletions'] },
      ],
      { deleted: ['c1'] },
    ),
    5,
  );
  assert.equal(r.lists.new, { n: 1, items: [{ key: 'n1', kind: 'K', name: 'new-1' }] });
  assert.is(r.lists.pending?.n, 7);
  assert.is(r.lists.pending?.items.length, 5, 'cut to 5');
  assert.match(String(r.lists.pending?.items[0]?.why), /seen unused 2x, 4m.* left \(the grace\)/);
  assert.match(String(r.lists.rescued?.items[0]?.why), /in use again after 3m/);
  assert.is(r.lists.reset?.items[0]?.why, 'fingerprint changed');
  assert.is(r.lists.indeterminate?.items[0]?.why, 'owner unreadable');
  assert.match(String(r.lists.confirmed?.items[0]?.why), /unused for 11m.*2x/);
  assert.equal(
    r.lists.deleted,
    { n: 1, items: [{ key: 'c1', kind: 'K', name: 'conf-1' }] },
    'a deleted key carries the name its confirmation gave',
  );
  assert.equal(r.notices, ['run.refused: too many']);
});

test('file history: appended records are read back by another store, newest last, the oldest dropped past the count', async ({
  dir,
}) => {
  const h = new FileHistory(dir, { runs: 3, items: 10, bytes: 100_000 });
  for (let i = 1; i <= 5; i++)
    await h.append('f', recordOf(facts([], { runId: `r${i}`, startedAt: T0 + i })));
  const other = new FileHistory(dir, { runs: 3, items: 10, bytes: 100_000 });
  assert.equal(
    (await other.list('f')).map((r) => r.runId),
    ['r3', 'r4', 'r5'],
  );
  assert.equal(await other.list('g'), [], 'another function: nothing');
  assert.is(other.damage('f'), undefined);
});

test('file history: bounded in bytes (the oldest records go first), and one record over the bound is refused, not cut silently', async ({
  dir,
}) => {
  const big = (i: number) =>
    recordOf(
      facts(
        Array.from({ length: 200 }, (_, j) => ({
          event: 'candidate.new' as const,
          key: `k-${i}-${j}-${'x'.repeat(40)}`,
          kind: 'K',
          name: `${Math.random().toString(36)}${Math.random().toString(36)}`,
        })),
        { runId: `r${i}` },
      ),
    );
  const h = new FileHistory(dir, { runs: 50, items: 200, bytes: 20_000 });
  for (let i = 1; i <= 12; i++) await h.append('f', big(i));
  const kept = await h.list('f');
  assert.ok(kept.length > 0 && kept.length < 12, `kept ${kept.length}`);
  assert.is(kept.at(-1)?.runId, 'r12', 'the newest is always kept');
  assert.ok(readFileSync(h.path('f')).length <= 20_000);
  const tiny = new FileHistory(dir, { runs: 50, items: 200, bytes: 500 });
  try {
    await tiny.append('f', big(13));
    assert.unreachable('a record over the bound is refused');
  } catch (err) {
    assert.match((err as Error).message, /one run's record is \d+ bytes gzipped, above 500/);
  }
});

test('file history: a damaged file is said, kept beside, and a new history starts; a record that does not parse is left out', async ({
  dir,
}) => {
  const h = new FileHistory(dir);
  writeFileSync(h.path('f'), 'not gzip');
  assert.equal(await h.list('f'), []);
  assert.match(String(h.damage('f')), /not gzipped JSON/);
  await h.append('f', recordOf(facts([], { runId: 'after' })));
  assert.ok(
    readdirSync(dir).some((f) => f.startsWith('f.history.json.gz.damaged-')),
    readdirSync(dir).join(' '),
  );
  assert.equal(
    (await h.list('f')).map((r) => r.runId),
    ['after'],
  );
  assert.is(h.damage('f'), undefined);
  // a record of another shape beside a good one
  const raw = JSON.parse(gunzipSync(readFileSync(h.path('f'))).toString()) as { runs: unknown[] };
  raw.runs.unshift({ runId: 7 });
  const { gzipSync } = await import('node:zlib');
  writeFileSync(h.path('f'), gzipSync(JSON.stringify(raw)));
  assert.equal(
    (await h.list('f')).map((r) => r.runId),
    ['after'],
  );
  assert.match(String(h.damage('f')), /1 unreadable run record/);
});

test('trail: first seen unused, confirmed and deleted; a key new again after a rescue starts a new trail', () => {
  const rec = (runId: string, at: number, events: DiffEvent[], deleted: string[] = []): RunRecord =>
    recordOf(facts(events, { runId, startedAt: at, deleted }));
  const nw = (key: string): DiffEvent => ({ event: 'candidate.new', key, kind: 'K', name: key });
  const runs = [
    rec('a', 1, [nw('x')]),
    rec('b', 2, [{ event: 'candidate.rescued', key: 'x', kind: 'K', name: 'x', unusedForMs: 1 }]),
    rec('c', 3, [nw('x')]),
    rec(
      'd',
      4,
      [{ event: 'candidate.confirmed', key: 'x', kind: 'K', name: 'x', unusedForMs: 9, observations: 2 }],
      ['x'],
    ),
  ];
  assert.equal(trailOf(runs, 'x'), {
    firstUnused: { runId: 'c', at: 3 },
    confirmed: { runId: 'd', at: 4 },
    deleted: { runId: 'd', at: 4 },
  });
  assert.equal(trailOf(runs, 'y'), {});
});

test('run: each deleting run leaves its record, with what it deleted by name; a dry run without --record leaves none', async ({
  dir,
}) => {
  const w = world(['a', 'b'], { u1: 'b' });
  const store = new FileStateStore(dir);
  const s = setup(dir, w, store);
  await run(s.deps, s.req({ apply: false }));
  assert.equal(await store.history.list(MEM), [], 'a plain dry run writes nothing');
  await run(s.deps, s.req());
  s.advance(10 * MIN);
  const r2 = await run(s.deps, s.req());
  assert.equal(r2.deleted, ['a']);
  const runs = await new FileStateStore(dir).history.list(MEM);
  assert.equal(
    runs.map((r) => [r.runId, r.dryRun, r.outcome]),
    [
      ['id-3', false, 'ok'],
      ['id-5', false, 'ok'],
    ],
  );
  assert.equal(
    runs[0]?.lists.new?.items.map((i) => i.key),
    ['a'],
  );
  assert.equal(runs[1]?.lists.deleted?.items, [{ key: 'a', kind: 'Thing', name: 'thing a' }]);
  assert.is(runs[1]?.snapshotId, r2.snapshotId);
  assert.is(runs[1]?.summary?.confirmed, 1);
});

test('a history that cannot be written never stops a deletion: the deletion happens, history.write-failed is logged, the run exits 1', async ({
  dir,
}) => {
  const w = world(['a']);
  const history = new MemoryHistory();
  const files = new FileStateStore(dir);
  const store: StateStore = {
    description: files.description,
    load: (fn) => files.load(fn),
    save: (fn, st, v) => files.save(fn, st, v),
    reset: (fn) => files.reset(fn),
    tombstones: files.tombstones,
    history,
  };
  const s = setup(dir, w, store);
  await run(s.deps, s.req());
  s.advance(10 * MIN);
  history.failing = 'ConfigMap write refused';
  const r = await run(s.deps, s.req());
  assert.equal(r.deleted, ['a'], 'deleted all the same');
  assert.not.ok(w.things.has('a'));
  assert.is(r.exitCode, EXIT.error);
  assert.is(r.sideFailures, 1);
  const warned = s.cap.events('history.write-failed');
  assert.is(warned.length, 1);
  assert.match(String(warned[0]?.error), /ConfigMap write refused/);
  assert.is(history.kept.get(MEM)?.length, 1, 'the first run was recorded');
});

test('an aborted run is recorded with its reason; a run refused the lock is not (another run is writing)', async ({
  dir,
}) => {
  const w = world(['a']);
  const store = new FileStateStore(dir);
  const s = setup(dir, w, store);
  w.faults.observe = () => {
    throw new Error('list pods: 503');
  };
  const r = await run(s.deps, s.req());
  assert.is(r.exitCode, EXIT.incomplete);
  const [rec] = await store.history.list(MEM);
  assert.is(rec?.outcome, 'aborted');
  assert.match(String(rec?.error), /503/);
  assert.is(rec?.exitCode, EXIT.incomplete);
  delete w.faults.observe;
  const holder = await new FileLock(dir, Date.now).acquire(MEM);
  assert.is((await run(s.deps, s.req())).exitCode, EXIT.locked);
  await holder.release();
  assert.is((await store.history.list(MEM)).length, 1, 'the locked-out run left no record');
});

test.run();
