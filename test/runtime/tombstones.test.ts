/**
 * The file store of tombstones (gzip members of JSON lines, appended and fsynced, compacted
 * to the retention) and the act phase's writer, which groups the writes of units in flight.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { TwopassFunction } from '../../shared/contract/index.ts';
import { TombstoneWriter } from '../../shared/runtime/tombstones.ts';
import { StateCorruptError } from '../../shared/state/errors.ts';
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

test('file tombstones: appends are read back by another store; the file is compacted to the retention; a corrupt file is an error', async () => {
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
  try {
    await other.list('f');
    assert.unreachable('a corrupt file');
  } catch (err) {
    assert.instance(err, StateCorruptError);
  }
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
