/**
 * Law 1's "no object comes twice", as a list's proof keeps it: UIDs as seeded 64-bit hashes.
 */
import fc from 'fast-check';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { ListProof } from '../../shared/kube/proof.ts';
import { PODS } from '../../shared/kube/resources.ts';
import { SeenUids } from '../../shared/kube/seen.ts';

test('a UID is new once and a repeat after, across growth of the table, whatever the seeds', () => {
  fc.assert(
    fc.property(
      fc.array(fc.uuid(), { minLength: 1, maxLength: 3000 }),
      fc.array(fc.nat({ max: 2999 }), { maxLength: 50 }),
      fc.tuple(fc.nat(), fc.nat()),
      (uids, again, seeds) => {
        const seen = new SeenUids(seeds);
        const set = new Set<string>();
        for (const u of [...uids, ...again.map((i) => uids[i % uids.length]!)]) {
          assert.is(seen.add(u), !set.has(u), u);
          set.add(u);
        }
        assert.is(seen.size, set.size);
      },
    ),
    { numRuns: 60 },
  );
});

test('strings that differ in one character, or only in length, are told apart', () => {
  const seen = new SeenUids([1, 2]);
  const base = '0123456789abcdef0123456789abcdef0123';
  assert.ok(seen.add(base));
  for (let i = 0; i < base.length; i++)
    assert.ok(seen.add(`${base.slice(0, i)}x${base.slice(i + 1)}`), `at ${i}`);
  assert.ok(seen.add(''));
  assert.ok(seen.add('\u0000'));
  assert.ok(seen.add('\u0000\u0000'));
  assert.not.ok(seen.add(base));
});

test('a list whose second page repeats an object of the first is refused: the pages overlap', () => {
  const proof = new ListProof(PODS, true);
  const page = (uids: string[], cont?: string) => ({
    kind: 'PartialObjectMetadataList',
    apiVersion: 'meta.k8s.io/v1',
    metadata: { resourceVersion: '7', ...(cont ? { continue: cont } : {}) },
    items: uids.map((uid, i) => ({ metadata: { name: `p-${i}`, uid } })),
  });
  proof.page(page(['u-1', 'u-2'], 'c1'), undefined);
  assert.throws(() => proof.page(page(['u-3', 'u-2']), 'c1'), /repeats p-1 \(UID u-2\): the pages overlap/);
});

test.run();
