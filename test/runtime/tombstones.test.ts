/**
 * The file store of tombstones (gzip members of JSON lines, appended and fsynced, compacted
 * to the retention) and the act phase's writer, which groups the writes of units in flight.
 */
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { TwopassFunction } from '../../shared/contract/index.ts';
import { TombstoneWriter } from '../../shared/runtime/tombstones.ts';
import { FileTombstones, MemoryTombstones, type Tombstone } from '../../shared/state/tombstones.ts';

const tomb = (i: number, at: number): Tombstone => ({
  key: `k-${i}`,
  kind: 'DanmEp',
  name: `ep-${i}`,
  object: { i },
  function: 'f',
  runId: 'r',
  snapshotId: 's',
  fingerprint: `fp-${i}`,
  reason: 'gone',
  at,
});

test('file tombstones: appends are read back by another store; the file is compacted to the retention; a file that is not gzip is said, not fatal', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'twopass-tombs-'));
  let now = 1_000_000;
  const store = new FileTombstones(dir, () => now, { maxAgeMs: 10_000, maxEntries: 8 });
  for (let i = 0; i < 5; i++) await store.append('f', [tomb(i, now)]);
  const other = new FileTombstones(dir, () => now, { maxAgeMs: 10_000, maxEntries: 8 });
  assert.equal(
    (await other.list('f')).map((t) => t.key),
    ['k-0', 'k-1', 'k-2', 'k-3', 'k-4'],
  );
  const size = readFileSync(store.path('f')).length;
  for (let i = 5; i < 30; i++) await store.append('f', [tomb(i, now)]);
  const kept = await other.list('f');
  assert.ok(kept.length <= 8 && kept.at(-1)?.key === 'k-29', kept.map((t) => t.key).join(' '));
  assert.ok(readFileSync(store.path('f')).length < size * 4, 'compacted, not grown without end');
  now += 20_000;
  assert.equal(await other.list('f'), [], 'older than the retention: not listed');
  writeFileSync(store.path('f'), 'not gzip');
  assert.equal(await other.list('f'), [], 'nothing readable');
  assert.match(String(other.damage('f')), /damaged gzip member/);
});

test('a torn last write (a crash during an append) leaves the intact tombstones usable: listed, said, and kept beside the file when it is compacted', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'twopass-tombs-'));
  const now = 1_000_000;
  const store = new FileTombstones(dir, () => now);
  await store.append('f', [tomb(1, now), tomb(2, now)]);
  await store.append('f', [tomb(3, now)]);
  // a third append torn by a crash: half a gzip member at the end
  const whole = readFileSync(store.path('f'));
  const member = gzipSync(Buffer.from(`${JSON.stringify(tomb(4, now))}\n`));
  writeFileSync(store.path('f'), Buffer.concat([whole, member.subarray(0, member.length - 10)]));
  const fresh = new FileTombstones(dir, () => now);
  const kept = (await fresh.list('f')).map((t) => t.key);
  assert.ok(
    ['k-1', 'k-2', 'k-3'].every((k) => kept.includes(k)),
    `the intact ones: ${kept}`,
  );
  assert.match(String(fresh.damage('f')), /torn by a crash.*kept the \d+ intact/);
  // the next process's first append compacts: the damaged file is kept beside, the new one is clean
  await fresh.append('f', [tomb(5, now)]);
  assert.ok(
    readdirSync(dir).some((f) => f.startsWith('f.tombstones.json.gz.damaged-')),
    readdirSync(dir).join(' '),
  );
  const again = new FileTombstones(dir, () => now);
  const after = (await again.list('f')).map((t) => t.key);
  assert.ok(
    ['k-1', 'k-2', 'k-3', 'k-5'].every((k) => after.includes(k)),
    `${after}`,
  );
  assert.is(again.damage('f'), undefined, 'clean after compaction');
  // a torn member in the middle: the members after it are found again
  const clean = readFileSync(store.path('f'));
  const next = gzipSync(Buffer.from(`${JSON.stringify(tomb(6, now))}\n`));
  writeFileSync(store.path('f'), Buffer.concat([clean, member.subarray(0, 20), next]));
  const mid = (await new FileTombstones(dir, () => now).list('f')).map((t) => t.key);
  assert.ok(mid.includes('k-6') && mid.includes('k-1'), `${mid}`);
});

test("the act phase's writer groups the tombstones of units in flight into one store write, and fails each of them when the store does", async () => {
  const store = new MemoryTombstones();
  let appends = 0;
  const counting = {
    append: async (fn: string, e: readonly Tombstone[]) => {
      appends++;
      await new Promise((r) => setTimeout(r, 5));
      await store.append(fn, e);
    },
    list: (fn: string) => store.list(fn),
  };
  const fn = {
    name: 'f',
    kindReport: { DanmEp: { unused: 'its Pod is gone', removal: '' } },
  } as unknown as TwopassFunction<unknown, unknown>;
  const targets = Array.from({ length: 20 }, (_, i) => ({
    key: `k-${i}`,
    kind: 'DanmEp',
    name: `ep-${i}`,
    fingerprint: `fp-${i}`,
    keep: false,
  }));
  const w = new TombstoneWriter({
    store: counting,
    fn,
    run: { runId: 'r', snapshotId: 's' },
    now: () => 5,
    targets,
    signal: new AbortController().signal,
  });
  await Promise.all(targets.map((t) => w.write([{ key: t.key, kind: t.kind, name: t.name, object: {} }])));
  const kept = await store.list('f');
  assert.is(kept.length, 20);
  assert.ok(appends <= 2, `grouped: ${appends} store writes for 20`);
  assert.equal(kept[3], {
    key: 'k-3',
    kind: 'DanmEp',
    name: 'ep-3',
    object: {},
    function: 'f',
    runId: 'r',
    snapshotId: 's',
    fingerprint: 'fp-3',
    reason: 'its Pod is gone',
    at: 5,
  });
  store.failing = 'disk full';
  const results = await Promise.allSettled(
    targets.slice(0, 3).map((t) => w.write([{ key: t.key, kind: t.kind, name: t.name, object: {} }])),
  );
  assert.ok(
    results.every(
      (r) => r.status === 'rejected' && /tombstones not written: disk full/.test(String(r.reason)),
    ),
  );
  const none = new TombstoneWriter({
    store: undefined,
    fn,
    run: { runId: 'r', snapshotId: 's' },
    now: () => 5,
    targets,
    signal: new AbortController().signal,
  });
  await none.write([{ key: 'k-0', kind: 'DanmEp', name: 'x', object: {} }]).then(
    () => assert.unreachable('a store without tombstones'),
    (err) => assert.match(String(err), /keeps no tombstones: nothing may be deleted/),
  );
});

test.run();
