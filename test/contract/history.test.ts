/**
 * Reading a watch's answer as an object's history (shared/kube/history.ts): every state up to
 * the version asked for, or why not. The server sides (fake and real) are in the contract.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { reached, replayed } from '../../shared/kube/history.ts';
import type { KubeObject } from '../../shared/kube/resources.ts';

const ev = (type: string, rv: string, v = rv) =>
  JSON.stringify({ type, object: { metadata: { name: 'n', resourceVersion: rv }, data: { v } } });
const v = (o: KubeObject) => (o as unknown as { data: { v: string } }).data.v;

test('every state up to the version asked for; bookmarks skipped; later events ignored', () => {
  const text = [
    ev('MODIFIED', '11'),
    ev('BOOKMARK', '12'),
    ev('MODIFIED', '13'),
    ev('MODIFIED', '14'),
    '',
  ].join('\n');
  assert.equal(replayed(text, '13', v), { states: ['11', '13'] });
  assert.equal(replayed(text, '11', v), { states: ['11'] });
});

test('broken: an ERROR event (410), a deletion, an end before the version, an unreadable line', () => {
  const gone = JSON.stringify({
    type: 'ERROR',
    object: { kind: 'Status', code: 410, reason: 'Expired', message: 'too old resource version: 5 (9)' },
  });
  const cases: [string, RegExp][] = [
    [`${gone}\n`, /no longer has that history \(410: too old resource version: 5 \(9\)\)/],
    [`${ev('MODIFIED', '11')}\n${ev('DELETED', '12')}\n`, /deleted/],
    [`${ev('MODIFIED', '11')}\n`, /ended before resourceVersion 13/],
    ['', /ended before/],
    [`${ev('MODIFIED', '11')}\n{"type":"MODIF`, /not JSON/],
    [`${JSON.stringify({ type: 'SOMETHING', object: {} })}\n`, /cannot read/],
  ];
  for (const [text, why] of cases) {
    const r = replayed(text, '13', v);
    assert.ok('broken' in r && why.test(r.broken), `${JSON.stringify(r)} for ${text}`);
  }
});

test('reached: only a whole event line naming the version (the reader may stop there)', () => {
  const enough = reached('13');
  assert.not.ok(enough(ev('MODIFIED', '11')));
  assert.not.ok(enough(`${ev('MODIFIED', '11')}\n${ev('MODIFIED', '13')}`), 'the line is not whole yet');
  assert.ok(enough(`${ev('MODIFIED', '11')}\n${ev('MODIFIED', '13')}\n`));
  assert.not.ok(enough(`${ev('MODIFIED', '131')}\n`), 'another version that starts the same');
});

test.run();
