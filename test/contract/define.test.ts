/**
 * What `defineFunction` does with the targets a function builds: only targets that may be
 * removed keep their data, checked against the kind's schema at the end of the observation
 * and when dispatched; the data of a target in use is dropped unchecked.
 */
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { z } from 'zod';
import { defineFunction, MINUTE } from '../../shared/contract/index.ts';
import type { KubeReadWriter } from '../../shared/kube/ports.ts';
import { memFunction, TEST_DEFAULTS, world } from '../helpers/memfn.ts';
import { parsed } from '../helpers/settings.ts';

const ctx = { now: 0, signal: new AbortController().signal, settings: parsed(memFunction()), note: () => {} };
const test = suite('defineFunction: target data');

test('a target in use keeps no removal data; unused and indeterminate targets keep theirs, checked', async () => {
  const w = world(['a', 'b', 'c'], { u1: 'a' });
  const fn = memFunction();
  const obs = await fn.observe(w, ctx);
  const by = new Map(obs.targets.map((t) => [t.key, t]));
  assert.equal(obs.used, ['a']);
  assert.is(by.get('a')?.data, undefined, 'in use: never removed in this run, so no data');
  assert.equal(by.get('b')?.data, { id: 'b', version: 1 });
  assert.equal(by.get('c')?.data, { id: 'c', version: 1 });
  // the data kept is what a removal dispatches
  assert.equal(await fn.recheck(w, by.get('b')!, ctx), { ok: true });
});

/** A kind whose re-check, removal and read-back always succeed: these tests look at targets only. */
const inert = <D extends z.ZodType>(data: D) => ({
  data,
  unused: 'never',
  removal: 'nothing',
  touches: () => [],
  recheck: async () => ({ ok: true as const }),
  remove: async () => ({ outcome: 'deleted' as const }),
  confirmGone: async () => true,
});

const strict = (build: { id: string; version: number }, use: 'used' | 'indeterminate' | 'none') =>
  defineFunction<z.ZodObject, null, null, { Thing: { id: string; version: number } }>({
    name: 'strict',
    description: 'test-only',
    access: { cluster: [] },
    settings: z.object({}).strict(),
    defaults: {
      schedule: '* * * * *',
      graceMs: MINUTE,
      maxDeletions: 1,
      maxDeletionPercent: 100,
      maxEvidenceDropPercent: 100,
    },
    kinds: { Thing: inert(z.object({ id: z.string().min(1), version: z.number().int() })) },
    async observe(_r, c) {
      c.source('things', 'target', { items: [1] });
      const v = c.target('Thing', { key: 'k', fingerprint: 'f', name: 'n', data: build });
      if (use === 'used') v.used();
      if (use === 'indeterminate') v.indeterminate('why');
    },
  });

for (const use of ['indeterminate', 'none'] as const)
  test(`data that does not fit its kind is a bug of the function, thrown by the observation (target ${use})`, async () => {
    try {
      await strict({ id: '', version: 1.5 }, use).observe(null, ctx);
      assert.unreachable('observe should throw');
    } catch (err) {
      assert.match(String((err as Error).message), /strict: Thing k: `id`: .*; `version`: /);
    }
  });

test('the data of a target in use is never checked: it is dropped (a schema check of each of 300,000 targets cost 0.5-1 s)', async () => {
  let checked = 0;
  const spied = { id: 'x', version: 1 };
  const fn = strict(
    new Proxy(spied, {
      get(t, p, r) {
        checked++;
        return Reflect.get(t, p, r);
      },
    }),
    'used',
  );
  const obs = await fn.observe(null, ctx);
  assert.equal(obs.used, ['k']);
  assert.is(checked, 0, 'its fields were not read');
  const bad = await strict({ id: '', version: 1.5 }, 'used').observe(null, ctx);
  assert.equal(bad.used, ['k'], 'data that does not fit, in use: nothing to throw for');
});

/** Six targets, each used, undecided or unused in its own way (decision 0017). */
const sixWays = defineFunction<z.ZodObject, null, null, { Thing: { id: string } }>({
  name: 'six-ways',
  description: 'test-only',
  access: { cluster: [] },
  settings: z.object({}).strict(),
  defaults: TEST_DEFAULTS,
  kinds: { Thing: inert(z.object({ id: z.string() })) },
  async observe(_r, c) {
    c.source('things', 'target', { items: [1, 2, 3, 4, 5, 6] });
    const thing = (key: string, keep = false) =>
      c.target('Thing', {
        key,
        fingerprint: 'f',
        name: `thing ${key}`,
        data: { id: key },
        ...(keep ? { marks: [{ annotations: { 'twopass.io/keep': 'true' } }] } : {}),
      });
    thing('a').used(); // counted
    thing('b', true).used(); // keep-marked: counted as kept, so held
    thing('c').used(); // a stored candidate: rescued, so held
    const d = thing('d');
    d.indeterminate('first undecided');
    d.used();
    const e = thing('e');
    e.used();
    e.indeterminate('then undecided'); // held again
    thing('f'); // unused
  },
});

test('a run that counts targets in use drops those it reads nothing of, and holds the rest (decision 0017)', async () => {
  const previous = (key: string) => (key === 'c' ? { fingerprint: 'f' } : undefined);
  const all = await sixWays.observe(null, { ...ctx, previous });
  assert.equal(
    all.targets.map((t) => t.key),
    ['a', 'b', 'c', 'd', 'e', 'f'],
    'not asked to count: every target held (explain, a saved snapshot)',
  );
  assert.is(all.counted, undefined);
  const some = await sixWays.observe(null, { ...ctx, previous, countUsed: true });
  assert.equal(
    some.targets.map((t) => t.key),
    ['b', 'c', 'd', 'e', 'f'],
  );
  assert.is(some.counted, 1);
  assert.equal(some.used, ['a', 'b', 'c', 'd', 'e'], 'a counted target is still in use by its key');
  assert.equal(
    some.indeterminate.map((i) => i.key),
    ['d', 'e'],
  );
  assert.equal(some.targets.find((t) => t.key === 'f')?.data, { id: 'f' }, 'the unused keeps its data');
  assert.is(some.targets.find((t) => t.key === 'e')?.name, 'thing e', 'held again whole');
});

test('a target whose data does not fit its kind is never dispatched: re-check refuses, removal skips', async () => {
  const fn = strict({ id: 'x', version: 1 }, 'none');
  const t = { key: 'k', kind: 'Thing', fingerprint: 'f', name: 'n', keep: false, data: { id: 'x' } };
  const r = await fn.recheck(null, t, ctx);
  assert.is(r.ok, false);
  assert.match((r as { reason: string }).reason, /does not fit kind Thing/);
  const removed = await fn.remove(null, t, ctx);
  assert.is(removed.outcome, 'skipped');
  assert.equal(await fn.recheck(null, { ...t, data: undefined }, ctx), {
    ok: false,
    reason: 'target has no removal data',
  });
});

test('settings are parsed once, where the config loads: every call of a run gets that very object', async () => {
  let parses = 0;
  const seen = new Set<unknown>();
  const counted = defineFunction<z.ZodObject, null, null, { Thing: { id: string } }>({
    name: 'counted',
    description: 'test-only',
    access: { cluster: [] },
    settings: z
      .object({
        n: z.number().refine(() => {
          parses++;
          return true;
        }),
      })
      .strict(),
    defaults: TEST_DEFAULTS,
    kinds: {
      Thing: {
        data: z.object({ id: z.string() }),
        unused: 'never',
        removal: 'nothing',
        touches: () => [],
        recheck: async (_r, _t, c) => {
          seen.add(c.settings);
          return { ok: true };
        },
        remove: async (_w, _t, c) => {
          seen.add(c.settings);
          return { outcome: 'deleted' };
        },
        confirmGone: async () => true,
      },
    },
    async observe(_r, c) {
      seen.add(c.settings);
      c.source('things', 'target', { items: [1] });
      c.target('Thing', { key: 'k', fingerprint: 'f', name: 'n', data: { id: 'x' } });
    },
  });
  const settings = parsed(counted, { n: 3 });
  assert.is(parses, 1, 'the one parse');
  const c = { now: 0, signal: new AbortController().signal, settings, note: () => {} };
  const obs = await counted.observe(null, c);
  assert.ok((await counted.recheck(null, obs.targets[0]!, c)).ok);
  assert.is((await counted.remove(null, obs.targets[0]!, c)).outcome, 'deleted');
  assert.is(parses, 1, 'observe, re-check and removal parse nothing again');
  assert.is(seen.size, 1, 'one settings object throughout');
  assert.is([...seen][0], settings, "the parsed object itself, as the function's own type");
  try {
    parsed(counted, { n: 'three' });
    assert.unreachable('a wrong type is refused where the config loads');
  } catch (e) {
    assert.match(String(e), /test: `functions\.counted\.settings\.n`: /);
  }
  try {
    parsed(counted, { n: 1, m: 2 });
    assert.unreachable('an unknown key is refused where the config loads');
  } catch (e) {
    assert.match(String(e), /`functions\.counted\.settings`: unknown key\(s\) `m` \(known: n\)/);
  }
});

test.run();

// A function's writer cannot make a delete without preconditions: the plain DELETE is not on
// its type (typecheck fails here if it ever is).
{
  const writer = {} as KubeReadWriter;
  // @ts-expect-error a function's writer has no plain delete
  void (() => writer.delete);
  // @ts-expect-error nor the status subresource's write
  void (() => writer.replaceStatus);
}
