/** `twopass diff`: what appeared, vanished and changed; changes shared by many targets are one entry. */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { diffSnapshots } from '../../shared/engine/diff.ts';
import { snapshot, target } from '../helpers/engine.ts';

const T0 = 1_800_000_000_000;

test('one write of a network: its bits changed together are one entry, an own change stays its own', () => {
  const bits = (rv: string) =>
    Array.from({ length: 250 }, (_, i) =>
      target(`net/4/10.0.${i >> 8}.${i & 255}`, { kind: 'DanmBit', fingerprint: `net@${rv}` }),
    );
  const a = snapshot(T0, [...bits('7'), target('ep1', { kind: 'DanmEp', fingerprint: '11' })]);
  const b = snapshot(T0 + 60_000, [...bits('8'), target('ep1', { kind: 'DanmEp', fingerprint: '12' })]);
  const d = diffSnapshots(a, b);
  assert.is(d.changedTogether.length, 1);
  assert.is(d.changedTogether[0]!.kind, 'DanmBit');
  assert.is(d.changedTogether[0]!.keys.length, 250);
  assert.equal([d.changedTogether[0]!.before, d.changedTogether[0]!.after], ['net@7', 'net@8']);
  assert.equal(
    d.changed.map((c) => c.after.key),
    ['ep1'],
    'the DanmEp that changed itself is listed alone',
  );
});

test('nothing changed: no entries', () => {
  const ts = [target('a'), target('b')];
  const d = diffSnapshots(snapshot(T0, ts), snapshot(T0 + 1, ts));
  assert.equal(
    [d.changed.length, d.changedTogether.length, d.appeared.length, d.vanished.length],
    [0, 0, 0, 0],
  );
});

test.run();
