/** The fake API server's generated names, as the apiserver makes them (RetryGenerateName). */
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { generateName } from '../../shared/sandbox/kube/made.ts';

const test = suite('the fake API server: generated names');

test('a generated name that is taken is generated again, up to 8 tries', () => {
  let asked = 0;
  const name = generateName('twopass-', () => ++asked <= 3);
  assert.is(asked, 4, 'three taken, the fourth free');
  assert.match(name, /^twopass-[bcdfghjklmnpqrstvwxz2456789]{5}$/);
  let tries = 0;
  generateName('x-', () => {
    tries++;
    return true;
  });
  assert.is(
    tries,
    7,
    'eight names made, the last one not asked about: its create answers 409 if it is taken',
  );
});

test.run();
