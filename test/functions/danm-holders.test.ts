/**
 * The holder index of a pool's bits: the same answers whether it stays a map (a sparse pool)
 * or becomes a slot per bit (a pool not much larger than its holders).
 */
import fc from 'fast-check';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { BitHolders } from '../../functions/danm-endpoints/holders.ts';
import type { Endpoint } from '../../functions/danm-endpoints/model.ts';

const ep = (n: number): Endpoint => ({
  uid: `ep-${n}`,
  name: `ep-${n}`,
  namespace: 'ns',
  resourceVersion: '1',
  pod: `p-${n}`,
  podUID: `u-${n}`,
  networkType: 'DanmNet',
  network: 'net',
  iface: 'eth0',
});

test('dense or sparse, each bit answers its holders in the order they were added, and a free bit none', () => {
  fc.assert(
    fc.property(fc.integer({ min: 1, max: 600 }), fc.array(fc.nat(), { maxLength: 200 }), (bits, picks) => {
      const h = new BitHolders(bits);
      const want = new Map<number, Endpoint[]>();
      for (const [i, p] of picks.entries()) {
        const index = p % bits;
        const e = ep(i);
        h.add(index, e);
        want.set(index, [...(want.get(index) ?? []), e]);
      }
      h.seal();
      for (let index = 0; index < bits; index++) {
        const got = h.at(index);
        const w = want.get(index);
        if (w === undefined) assert.is(got, undefined, `bit ${index} free`);
        else if (w.length === 1) assert.is(got, w[0], `bit ${index} held once`);
        else assert.equal(got, w, `bit ${index} held ${w.length} times`);
      }
    }),
    { numRuns: 300 },
  );
});

test('a pool not much larger than its holders becomes slots; a sparse one stays a map; adding after seal is a bug', () => {
  const dense = new BitHolders(16);
  for (let i = 0; i < 4; i++) dense.add(i * 3, ep(i));
  dense.seal();
  assert.ok(
    (dense as unknown as { slots?: Int32Array }).slots instanceof Int32Array,
    '16 bits, 4 holders: dense',
  );
  const sparse = new BitHolders(1 << 20);
  sparse.add(7, ep(1));
  sparse.seal();
  assert.is((sparse as unknown as { slots?: Int32Array }).slots, undefined, '2^20 bits, one holder: a map');
  assert.is((sparse.at(7) as Endpoint).uid, 'ep-1');
  assert.is(dense.at(5), undefined);
  assert.is((dense.at(9) as Endpoint).uid, 'ep-3');
  assert.throws(() => dense.add(1, ep(9)), /after seal/);
});

test.run();
