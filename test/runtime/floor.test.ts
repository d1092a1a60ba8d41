/**
 * The act phase's fresh evidence is held to the snapshot that decided (evidenceFloorOf):
 * a drop larger than the evidence guard allows is not absence; a source the run itself
 * deletes from is not held (it shrinks by the run's own deletions).
 */
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { checkFreshCount } from '../../shared/contract/index.ts';
import type { Snapshot } from '../../shared/engine/types.ts';
import { ListIncompleteError } from '../../shared/errors.ts';
import { evidenceFloorOf } from '../../shared/runtime/phases.ts';

const test = suite('the fresh evidence floor');

const snapshot = (sources: Snapshot['sources']): Snapshot => ({
  id: 's',
  function: 'f',
  takenAt: 0,
  sources,
  targets: [],
  used: [],
  indeterminate: [],
});

const snap = snapshot([
  { name: 'pods', role: 'evidence', count: 100, complete: true },
  { name: 'danmeps', role: 'target+evidence', count: 100, complete: true },
  { name: 'networks', role: 'target', count: 10, complete: true },
  { name: 'empty', role: 'evidence', count: 0, complete: true },
]);

test('a drop within the guard passes; one beyond it is refused, with both counts', () => {
  const floor = evidenceFloorOf(snap, 30);
  assert.is(floor('pods', 100), undefined);
  assert.is(floor('pods', 150), undefined, 'more is never doubt');
  assert.is(floor('pods', 70), undefined, 'exactly the allowed drop');
  const why = floor('pods', 69);
  assert.match(
    String(why),
    /^69 pods now against 100 in the snapshot that decided, a drop of 31% \(maxEvidenceDropPercent 30%\)/,
  );
  assert.match(String(evidenceFloorOf(snap, 0)('pods', 99)), /a drop of 1%/);
});

test('sources the run deletes from, targets, unknown names and an empty baseline are not held', () => {
  const floor = evidenceFloorOf(snap, 30);
  assert.is(floor('danmeps', 1), undefined, 'target+evidence: the run deletes from it itself');
  assert.is(floor('networks', 0), undefined);
  assert.is(floor('services', 0), undefined);
  assert.is(floor('empty', 0), undefined);
});

test('checkFreshCount throws a list-incomplete error naming the fresh source; without a floor it passes', () => {
  const floor = evidenceFloorOf(snap, 30);
  try {
    checkFreshCount({ evidenceFloor: floor }, 'pods', 3);
    assert.unreachable('a 97% drop is refused');
  } catch (e) {
    assert.instance(e, ListIncompleteError);
    assert.match((e as Error).message, /^fresh pods: list incomplete: 3 pods now against 100/);
  }
  checkFreshCount({}, 'pods', 0);
  checkFreshCount({ evidenceFloor: floor }, 'pods', 99);
});

test.run();
