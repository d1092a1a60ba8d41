/**
 * The mutation harness of decide() (test/engine/mutate.ts), run as part of the suite: every
 * rule of the engine broken in turn must be caught by the engine's own tests. A mutant whose
 * text no longer appears in decide.ts (the code moved on) fails here, so the harness cannot
 * rot into checking nothing; the unmutated copy must pass, so a kill is never a broken copy.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { MUTANTS, type MutantRun, mutationCopy } from './mutate.ts';

let copy: ReturnType<typeof mutationCopy>;
test.before(() => {
  copy = mutationCopy();
});
test.after(() => copy.remove());

const tail = (r: MutantRun) => r.output.split('\n').slice(-30).join('\n');

test('the unmutated copy of the engine passes its tests (a kill below is the mutant, not the copy)', () => {
  const r = copy.run();
  assert.ok(r.applied);
  assert.not.ok(r.killed, tail(r));
  assert.is(r.failing, 0);
});

for (const m of MUTANTS)
  test(`mutant "${m[0]}" applies to decide.ts and the engine tests catch it`, () => {
    const r = copy.run(m);
    assert.ok(
      r.applied,
      `the text it replaces is no longer in shared/engine/decide.ts: ${JSON.stringify(m[1])}`,
    );
    assert.ok(r.killed, `the engine tests pass with "${m[0]}" broken`);
    assert.ok(r.failing > 0, `the run failed without a failing test: ${tail(r)}`);
  });

test.run();
