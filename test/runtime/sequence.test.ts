/**
 * The act sequence of a batch (shared/runtime/sequence.ts), run for a kind made here: the
 * runtime, not the kind, writes the tombstones before the write, pauses and plans again
 * after a write that lost, holds at the gate, fails only what a plan that threw was
 * planning, stops where told, and reads back an answer it could not read.
 */
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { z } from 'zod';
import {
  type BatchSpec,
  defineFunction,
  type FunctionContext,
  type Step,
  type TombstoneEntry,
  type WritePlan,
} from '../../shared/contract/index.ts';
import type { Target } from '../../shared/engine/types.ts';
import { removeBatch } from '../../shared/runtime/sequence.ts';
import { TEST_DEFAULTS } from '../helpers/memfn.ts';
import { parsed } from '../helpers/settings.ts';

type Data = { id: string; box: string };
/** What a test's kind does: its steps, built per batch. */
type Steps = (
  targets: readonly { key: string; data: Data }[],
  ctx: FunctionContext,
) => Step<Data, Log, Log>[];
/** The reader and the writer: one log of what happened, in order. */
type Log = { events: string[] };

function kindWith(steps: Steps) {
  const batch: BatchSpec<Data, Log, Log, Record<string, unknown>> = {
    key: (d) => d.box,
    steps: (_r, ts, ctx) => steps(ts, ctx as FunctionContext),
  };
  return defineFunction<z.ZodObject, Log, Log, { Item: Data }>({
    name: 'boxes',
    description: 'test-only',
    settings: z.object({}).strict(),
    defaults: TEST_DEFAULTS,
    access: { cluster: [] },
    kinds: {
      Item: {
        data: z.object({ id: z.string(), box: z.string() }),
        unused: 'test',
        removal: 'test',
        touches: () => [],
        batch,
      },
    },
    async observe() {},
  });
}

const item = (id: string): Target => ({
  key: id,
  kind: 'Item',
  name: id,
  fingerprint: id,
  keep: false,
  data: { id, box: 'b' },
});

/** Runs one batch of `ids`; the log holds every plan, tombstone, gate, write and pause. */
async function run(
  steps: Steps,
  ids: readonly string[],
  opts: { tombstone?: 'fails'; concurrency?: number; stop?: (r: string) => void } = {},
) {
  const fn = kindWith(steps);
  const log: Log = { events: [] };
  const ctx: FunctionContext = {
    now: 0,
    signal: new AbortController().signal,
    settings: parsed(fn, {}),
    note: () => {},
    concurrency: opts.concurrency ?? 1,
    sleep: async (ms) => void log.events.push(`pause ${ms >= 0 ? 'taken' : ms}`),
    tombstone: async (entries: readonly TombstoneEntry[]) => {
      if (opts.tombstone === 'fails') throw new Error('the store refused');
      log.events.push(`tombstone ${entries.map((e) => e.key).join(',')}`);
    },
    ...(opts.stop ? { stop: opts.stop } : {}),
  };
  const results = await removeBatch(fn, log, log, ids.map(item), ctx);
  return { results: new Map(results.map((r) => [r.key, r])), events: log.events };
}

/** A plan that removes every pending target in one write, which `write` performs. */
const removeAll =
  (write: (w: Log, attempt: number) => Promise<unknown>, extra: Partial<WritePlan<Log, Log>> = {}) =>
  async (r: Log, pending: readonly { key: string; kind: string; name: string }[], attempt: number) => {
    r.events.push(`plan ${attempt} ${pending.map((t) => t.key).join(',')}`);
    return {
      removing: pending.map((t) => ({ target: t, object: { was: t.key } })),
      write: (w: Log) => write(w, attempt),
      readBack: async () => ({
        results: pending.map((t) => ({ key: t.key, outcome: 'deleted' as const, detail: `${t.key} gone` })),
      }),
      ...extra,
    } satisfies WritePlan<Log, Log>;
  };

const test = suite('the act sequence of a batch');

test('plan, then the tombstones durable, then the write, then the read-back: the runtime keeps the order', async () => {
  const { results, events } = await run(
    () => [
      {
        takes: () => true,
        plan: removeAll(async (w) => void w.events.push('write')),
      },
    ],
    ['a', 'b'],
  );
  assert.equal(events, ['plan 1 a,b', 'tombstone a,b', 'write']);
  assert.is(results.get('a')?.outcome, 'deleted');
  assert.is(results.get('b')?.outcome, 'deleted');
});

test('a write that lost to another writer pauses on the run clock and is planned again, never resent blind; after the last attempt its targets are kept, contended', async () => {
  const lost = new Error('conflict');
  const steps = (wins: number) => () => [
    {
      takes: () => true,
      attempts: 3,
      contended: (err: unknown) => err === lost,
      plan: removeAll(async (w, attempt) => {
        w.events.push(`write ${attempt}`);
        if (attempt < wins) throw lost;
      }),
    },
  ];
  const won = await run(steps(2), ['a']);
  assert.equal(won.events, [
    'plan 1 a',
    'tombstone a',
    'write 1',
    'pause taken',
    'plan 2 a',
    'tombstone a',
    'write 2',
  ]);
  assert.is(won.results.get('a')?.outcome, 'deleted');
  const never = await run(steps(99), ['a']);
  assert.is(never.events.filter((e) => e.startsWith('write')).length, 3);
  assert.is(never.events.filter((e) => e.startsWith('plan')).length, 3, 'each attempt on a fresh plan');
  const r = never.results.get('a');
  assert.is(r?.outcome, 'skipped');
  assert.ok(r?.outcome === 'skipped' && r.contended === true, 'kept with its age for the next run');
});

test('tombstones that cannot be written: the write is never sent, its removals fail, and the plan says what it left', async () => {
  const { results, events } = await run(
    () => [
      {
        takes: () => true,
        plan: removeAll(async (w) => void w.events.push('write'), {
          notWritten: (why) => ({ notes: [['a', `left: ${why}`]] }),
        }),
      },
    ],
    ['a'],
    { tombstone: 'fails' },
  );
  assert.not.ok(events.includes('write'), 'nothing written');
  const r = results.get('a');
  assert.is(r?.outcome, 'failed');
  assert.match(r?.outcome === 'failed' ? r.error : '', /nothing deleted: the store refused/);
});

test("the gate's reason holds what the write would remove: tombstoned, never written", async () => {
  const { results, events } = await run(
    () => [
      {
        takes: () => true,
        plan: removeAll(async (w) => void w.events.push('write'), { gate: async () => 'the producer runs' }),
      },
    ],
    ['a'],
  );
  assert.equal(events, ['plan 1 a', 'tombstone a']);
  assert.equal(results.get('a'), { key: 'a', outcome: 'held', reason: 'the producer runs' });
});

test("a later step's plan that throws fails only what it was planning: what an earlier step deleted stays deleted, with the notes it got", async () => {
  const { results } = await run(
    () => [
      {
        takes: (t) => t.data.id === 'first',
        plan: removeAll(async () => undefined),
      },
      {
        takes: (t) => t.data.id !== 'first',
        forCarried: true,
        plan: async () => {
          throw new Error('fresh evidence: list incomplete');
        },
      },
    ],
    ['first', 'second'],
  );
  assert.is(results.get('first')?.outcome, 'deleted');
  assert.equal(results.get('second'), {
    key: 'second',
    outcome: 'failed',
    error: 'fresh evidence: list incomplete',
  });
});

test('a step that carries to the next: the later plan gets what was carried, and its notes join the detail of what was deleted', async () => {
  let seen: readonly unknown[] = [];
  const { results } = await run(
    () => [
      {
        takes: () => true,
        each: true,
        plan: async (_r, [t]) => ({
          removing: [{ target: t!, object: {} }],
          write: async () => undefined,
          readBack: async () => ({
            results: [{ key: t!.key, outcome: 'deleted' as const, detail: `${t!.key} deleted` }],
            carry: [t!.key],
          }),
        }),
      },
      {
        takes: () => false,
        forCarried: true,
        plan: async (_r, _p, _a, carried) => {
          seen = carried;
          return { removing: [], notes: carried.map((k) => [String(k), 'its address cleared'] as const) };
        },
      },
    ],
    ['a', 'b'],
  );
  assert.equal([...seen].sort(), ['a', 'b']);
  assert.equal(results.get('a'), { key: 'a', outcome: 'deleted', detail: 'a deleted; its address cleared' });
});

test('one write per target runs up to the run concurrency at once', async () => {
  let now = 0;
  let most = 0;
  await run(
    () => [
      {
        takes: () => true,
        each: true,
        plan: removeAll(async () => {
          most = Math.max(most, ++now);
          await new Promise((r) => setTimeout(r, 5));
          now--;
        }),
      },
    ],
    ['a', 'b', 'c', 'd', 'e'],
    { concurrency: 2 },
  );
  assert.is(most, 2);
});

test('a stop after a step: the steps not begun are held, never planned', async () => {
  let stopped: string | undefined;
  const { results, events } = await run(
    (_ts, ctx) => [
      {
        takes: (t) => t.data.id === 'a',
        plan: removeAll(async () => undefined),
        after: async () => ctx.stop?.('the producer started'),
      },
      { takes: (t) => t.data.id === 'b', plan: removeAll(async () => undefined) },
    ],
    ['a', 'b'],
    {
      stop: (r) => {
        stopped = r;
      },
    },
  );
  assert.is(stopped, 'the producer started', 'the run is told');
  assert.not.ok(events.some((e) => e.startsWith('plan 1 b')));
  assert.is(results.get('a')?.outcome, 'deleted');
  assert.equal(results.get('b'), {
    key: 'b',
    outcome: 'held',
    reason: 'not attempted: the producer started',
  });
});

test('an answer that cannot be read is read back as unknown, never taken as done', async () => {
  let told: unknown;
  const { results } = await run(
    () => [
      {
        takes: () => true,
        plan: removeAll(
          async () => {
            throw new Error('connection reset after sending');
          },
          {
            readBack: async (_r, out) => {
              told = out;
              return { results: [{ key: 'a', outcome: 'failed', error: 'still there' }] };
            },
          },
        ),
      },
    ],
    ['a'],
  );
  assert.equal(told, { unknown: 'connection reset after sending' });
  assert.is(results.get('a')?.outcome, 'failed');
});

test('a write its kind reads nothing back from is not taken as done', async () => {
  const { results } = await run(
    () => [
      {
        takes: () => true,
        plan: async (_r, pending) => ({
          removing: pending.map((t) => ({ target: t, object: {} })),
          write: async () => 'ok',
        }),
      },
    ],
    ['a'],
  );
  assert.equal(results.get('a'), {
    key: 'a',
    outcome: 'failed',
    error: 'the write answered, but its kind reads nothing back',
  });
});

test.run();
