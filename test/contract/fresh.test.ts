/**
 * The act phase's evidence cache: one read shared while younger than the bound, read again
 * once older (age counted from the start of the read), on demand after a conflict, and a
 * failed read never served.
 */
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { EvidenceCache, freshEvidence } from '../../shared/contract/index.ts';

const test = suite('evidence cache (fresh evidence per batch)');

const counter = () => {
  let n = 0;
  return { read: async () => ++n, reads: () => n };
};

test('batches share one read while it is younger than the bound', async () => {
  let now = 1_000;
  const cache = new EvidenceCache(() => now, 30_000);
  const c = counter();
  const a = await cache.get('pods', c.read);
  now += 30_000; // exactly the bound: still fresh
  const b = await cache.get('pods', c.read);
  assert.is(c.reads(), 1);
  assert.is(a.value, b.value);
  assert.is(a.readAt, 1_000);
  now += 1; // one millisecond past the bound: read again
  const d = await cache.get('pods', c.read);
  assert.is(c.reads(), 2);
  assert.is(d.readAt, now);
  assert.ok(d.generation > a.generation);
  assert.is(cache.total(), 2);
});

test('age counts from the start of the read, not its end', async () => {
  let now = 0;
  const cache = new EvidenceCache(() => now, 30_000);
  let n = 0;
  const slow = async () => {
    now += 25_000; // the read itself takes 25 s
    return ++n;
  };
  await cache.get('k', slow);
  now += 6_000; // 31 s after the read began, 6 s after it ended
  await cache.get('k', slow);
  assert.is(n, 2, 'older than the bound from its start: read again');
});

test('concurrent batches share the read in flight', async () => {
  const cache = new EvidenceCache(() => 0, 30_000);
  let n = 0;
  let release!: () => void;
  const gate = new Promise<void>((r) => {
    release = r;
  });
  const read = async () => {
    n++;
    await gate;
    return n;
  };
  const both = Promise.all([cache.get('k', read), cache.get('k', read)]);
  release();
  const [a, b] = await both;
  assert.is(n, 1);
  assert.is(a, b);
});

test('newerThan: a read shown stale by a conflict is replaced once, and shared by every batch that saw it', async () => {
  const cache = new EvidenceCache(() => 0, 30_000);
  const c = counter();
  const first = await cache.get('k', c.read);
  const [x, y] = await Promise.all([
    cache.get('k', c.read, { newerThan: first }),
    cache.get('k', c.read, { newerThan: first }),
  ]);
  assert.is(c.reads(), 2, 'one new read for both');
  assert.is(x, y);
  assert.ok(x.generation > first.generation);
  // a batch that still holds the first read and asks for newer gets the second, not a third
  await cache.get('k', c.read, { newerThan: first });
  assert.is(c.reads(), 2);
});

test('a failed read is not served: the next ask reads again', async () => {
  const cache = new EvidenceCache(() => 0, 30_000);
  let n = 0;
  const failing = async () => {
    n++;
    if (n === 1) throw new Error('list pods: 503');
    return n;
  };
  const err = await cache.get('k', failing).then(
    () => undefined,
    (e: Error) => e.message,
  );
  assert.is(err, 'list pods: 503');
  assert.is((await cache.get('k', failing)).value, 2);
});

test('keys are separate: one rule`s lists never answer for another`s', async () => {
  const cache = new EvidenceCache(() => 0, 30_000);
  const a = await cache.get('rule:a', async () => 'a');
  const b = await cache.get('rule:b', async () => 'b');
  assert.is(a.value, 'a');
  assert.is(b.value, 'b');
});

test('without a cache (a read-only command), every ask reads', async () => {
  const c = counter();
  await freshEvidence({}, 'k', c.read);
  await freshEvidence({}, 'k', c.read);
  assert.is(c.reads(), 2);
});

test.run();
