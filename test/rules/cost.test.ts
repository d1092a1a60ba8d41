/**
 * A rule cannot hang the process: `matches` runs on RE2 (linear time), an expression's
 * cost is bounded when the rule loads and again on each object before it is evaluated,
 * a condition may not scan a whole evidence index, and a run's signal (its deadline,
 * SIGTERM) stops evaluation between objects.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { WorldReader } from '../../shared/cli/rules.ts';
import { ConfigError } from '../../shared/errors.ts';
import type { KubeObject } from '../../shared/kube/resources.ts';
import { compile, RUNTIME_COST_LIMIT } from '../../shared/rules/cel.ts';
import { pacer } from '../../shared/rules/evidence.ts';
import { judge, ruleFunction } from '../../shared/rules/function.ts';
import { compileRule } from '../../shared/rules/rule.ts';
import { parsed } from '../helpers/settings.ts';
import { widgetsRule } from './widgets.ts';

const withRule = (change: Record<string, unknown>) => ({ ...widgetsRule(), ...change });
const refusal = (doc: unknown): string => {
  try {
    compileRule(doc, 'test');
  } catch (err) {
    assert.instance(err, ConfigError);
    return (err as Error).message;
  }
  assert.unreachable(`accepted: ${JSON.stringify(doc)}`);
  return '';
};
const pods = new Map<string, unknown[]>();

test('matches() is RE2: a backtracking pattern against a crafted name is decided at once', () => {
  const r = compileRule(
    withRule({ inUse: 'object.metadata.name.matches("^(a+)+$") || object.spec.podUID in evidence.pods' }),
    'test',
  );
  // On a backtracking engine this one object takes 2^40 steps (hours).
  const crafted = { metadata: { name: `${'a'.repeat(40)}!` }, spec: { podUID: 'p' } };
  assert.equal(judge(r, crafted, { pods }), { unused: true });
  assert.equal(judge(r, { metadata: { name: 'aaaa' }, spec: { podUID: 'p' } }, { pods }), { used: true });
});

test('matches() stays RE2 when a comment inside the call says "matches" too, or one stands between the receiver and the dot', () => {
  // A backreference: RE2 refuses it (indeterminate), a backtracking engine would answer true.
  const obj = { metadata: { name: 'aa', labels: { p: '(a)\\1' } }, spec: { podUID: 'p' } };
  for (const inUse of [
    'object.metadata.name.matches(\n  // matches the pattern in the label\n  object.metadata.labels.p) || object.spec.podUID in evidence.pods',
    'object.metadata.name // matches below\n  .matches(object.metadata.labels.p) || object.spec.podUID in evidence.pods',
    'object.metadata.name . matches ( // matches\n object.metadata.labels.p ) || object.spec.podUID in evidence.pods',
  ]) {
    const v = judge(compileRule(withRule({ inUse }), 'test'), obj, { pods });
    assert.ok('indeterminate' in v, `${inUse}: ${JSON.stringify(v)}`);
    assert.match((v as { indeterminate: string }).indeterminate, /RE2 syntax/);
  }
  // and the crafted name of the issue is decided at once, the comment notwithstanding
  const r = compileRule(
    withRule({
      inUse: 'object.metadata.name.matches(\n // matches\n "^(a+)+$") || object.spec.podUID in evidence.pods',
    }),
    'test',
  );
  assert.equal(judge(r, { metadata: { name: `${'a'.repeat(34)}!` }, spec: { podUID: 'p' } }, { pods }), {
    unused: true,
  });
});

test('the global form matches(s, p) cannot reach the backtracking engine: refused when the rule loads', () => {
  assert.match(
    refusal(
      withRule({ inUse: 'matches(object.metadata.name, "^a$") || object.spec.podUID in evidence.pods' }),
    ),
    /could not be bound to the linear-time engine|found no matching overload|matches/,
  );
});

test('a pattern RE2 does not accept (lookbehind, backreference) is refused when the rule loads, with its position', () => {
  for (const p of ['(?<=a)b', '(a)\\\\1'])
    assert.match(
      refusal(withRule({ inUse: `object.metadata.name.matches("${p}")` })),
      /rule widgets: `inUse`: line 1, column \d+: invalid regular expression \(RE2 syntax/,
    );
});

test('a pattern built at run time that RE2 refuses makes the target indeterminate', () => {
  const r = compileRule(withRule({ inUse: 'object.metadata.name.matches(object.spec.pattern)' }), 'test');
  const v = judge(r, { metadata: { name: 'x' }, spec: { pattern: '(a' } }, { pods });
  assert.ok('indeterminate' in v, JSON.stringify(v));
  assert.match((v as { indeterminate: string }).indeterminate, /invalid regular expression `\(a`/);
  assert.not.match((v as { indeterminate: string }).indeterminate, /re2mtch/);
});

test('cost at load: nested comprehensions above the limit are refused', () => {
  assert.match(
    refusal(
      withRule({
        inUse:
          'object.spec.a.exists(x, object.spec.b.exists(y, object.spec.c.exists(z, x == y && y == z))) || object.spec.podUID in evidence.pods',
      }),
    ),
    /costs about [\d,]+ steps an object .* above the limit of 1,000,000/,
  );
  const one = compile('t', 'object.spec.a.exists(x, x == "b")', 'object', ['bool']);
  assert.ok(one.cost > 1000 && one.cost < 1_000_000, `one comprehension: ${one.cost}`);
});

test('cost at run time: an object whose sizes would make one evaluation too costly is indeterminate, not evaluated', () => {
  const r = compileRule(
    withRule({ inUse: 'object.spec.a.exists(x, x == "z") || object.spec.podUID in evidence.pods' }),
    'test',
  );
  const big = Array.from({ length: 2_000_000 }, () => 'a');
  const v = judge(r, { metadata: { name: 'w' }, spec: { a: big, podUID: 'p' } }, { pods });
  assert.ok('indeterminate' in v, JSON.stringify(v).slice(0, 200));
  assert.match(
    (v as { indeterminate: string }).indeterminate,
    new RegExp(
      `not evaluated: .*a list of 2000000.* above the limit of ${RUNTIME_COST_LIMIT.toLocaleString('en')}`,
    ),
  );
  assert.equal(judge(r, { metadata: { name: 'w' }, spec: { a: ['z'], podUID: 'p' } }, { pods }), {
    used: true,
  });
});

test('a condition that scans a whole evidence index is refused; a lookup by key is not', () => {
  assert.match(
    refusal(withRule({ inUse: 'evidence.pods.exists(p, p == object.spec.podUID)' })),
    /`inUse`: iterates a whole evidence index/,
  );
  compileRule(withRule({ inUse: 'object.spec.podUID in evidence.pods' }), 'test');
  compileRule(
    withRule({
      inUse:
        'object.spec.podUID in evidence.pods && evidence.pods[object.spec.podUID].all(p, has(p.metadata))',
    }),
    'test',
  );
});

test('a constant inUse is refused: it would call every target unused', () => {
  for (const c of ['false', 'true', '1 == 2'])
    assert.match(refusal(withRule({ inUse: c })), /reads neither the object nor the evidence/);
});

test("a run's signal stops a rule's evaluation between objects (a deadline, SIGTERM)", async () => {
  const r = compileRule(
    withRule({ inUse: 'object.metadata.name.matches("^w-[0-9]+$") && object.spec.podUID in evidence.pods' }),
    'test',
  );
  const objects: KubeObject[] = Array.from({ length: 100_000 }, (_, i) => ({
    apiVersion: 'example.com/v1',
    kind: 'Widget',
    metadata: { namespace: 'default', name: `w-${i}`, uid: `u-${i}`, resourceVersion: '1' },
    spec: { podUID: `p-${i}` },
  }));
  const ac = new AbortController();
  setImmediate(() => ac.abort(new Error('the run deadline (10s) passed')));
  let judged = -1;
  const fn = ruleFunction(r);
  const err = await fn
    .observe(new WorldReader(objects), {
      now: Date.parse('2026-12-04T10:00:00Z'),
      signal: ac.signal,
      settings: parsed(fn),
      note: () => {},
    })
    .then(
      (o) => {
        judged = o.targets.length;
        return undefined;
      },
      (e: Error) => e,
    );
  assert.ok(err, `evaluated all ${judged} objects after the signal`);
  assert.match(err!.message, /deadline/);
});

test('one blocked evaluation is enough: the next object gives up the turn and an aborted run stops there', async () => {
  const ac = new AbortController();
  const pace = pacer(ac.signal, 10);
  assert.is(pace(), undefined, 'a quick object keeps the turn');
  // one object whose evaluation held the thread past the slice (the old pacer waited for 64)
  const t0 = performance.now();
  while (performance.now() - t0 < 12) {
    /* blocked */
  }
  ac.abort(new Error('the run deadline (5s) passed'));
  const turn = pace();
  assert.ok(turn, 'the turn is given up after one slow object');
  const err = await turn!.then(
    () => undefined,
    (e: Error) => e,
  );
  assert.match(String(err?.message), /deadline/);
});

test.run();
