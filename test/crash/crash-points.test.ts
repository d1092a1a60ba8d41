/**
 * Crash points, injected: the run's Kubernetes client is wrapped, and at the chosen call
 * the process dies (that call and every later one fail before they reach the server, as
 * after a SIGKILL there). Each point is asserted to have been reached, with what had and
 * had not happened on the server at that moment; the clock is simulated, so the Lease left
 * behind expires and grace windows pass without waiting. The runs after the crash never
 * delete anything in use, never free an address twice, and still reclaim every orphan.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { danmEndpoints } from '../../functions/danm-endpoints/index.ts';
import { resolveConfig } from '../../shared/config.ts';
import { MINUTE } from '../../shared/contract/index.ts';
import type { KubeClient } from '../../shared/kube/ports.ts';
import { CONFIGMAPS, LEASES } from '../../shared/kube/resources.ts';
import { EXIT } from '../../shared/runtime/errors.ts';
import type { RunResult } from '../../shared/runtime/run.ts';
import { runFunction } from '../../shared/runtime/wire.ts';
import { type Call, type Crash, crashAt, type Done, describe } from '../helpers/intercept.ts';
import { captureLog } from '../helpers/memfn.ts';
import { type ManualTime, manualTime } from '../helpers/time.ts';
import { bits, LIVE, ORPHANS, present, SETTLED, STATE_NS, type World, world } from './world.ts';

const isStateWrite = (c: Call) =>
  (c.verb === 'create' || c.verb === 'replace') && c.resource === 'configmaps' && c.namespace === STATE_NS;
const epDeletes = (done: readonly Done[]) =>
  done.filter((d) => d.verb === 'delete' && d.resource === 'danmeps' && d.result === 'deleted');

type Point = Readonly<{
  name: string;
  at: (call: Call, done: readonly Done[]) => boolean;
  /** What must hold on the server right after the death: the proof the point was reached. */
  proof: (w: World, crash: Crash) => Promise<void>;
}>;

const allOrphansPresent = async (w: World) => {
  for (const ep of w.orphans) assert.ok(await present(w, ep), `${ep.metadata.name} not yet deleted`);
};

const POINTS: Point[] = [
  {
    name: 'after listing',
    at: (c, done) => c.verb !== 'list' && done.some((d) => d.verb === 'list' && d.resource === 'pods'),
    proof: allOrphansPresent,
  },
  {
    name: 'while holding the Lease, before listing',
    at: (c, done) => c.verb === 'list' && done.some((d) => d.resource === 'leases' && d.verb !== 'get'),
    proof: async (w, crash) => {
      assert.not.ok(
        crash.done.some((d) => d.verb === 'list'),
        'nothing listed',
      );
      const lease = await w.kube.get(LEASES, STATE_NS, 'twopass-danm-endpoints');
      assert.ok(
        (lease?.spec as { holderIdentity?: string } | undefined)?.holderIdentity,
        'the Lease is left held',
      );
    },
  },
  {
    name: 'before the state save',
    at: (c) => isStateWrite(c),
    proof: async (w, crash) => {
      assert.ok(
        crash.done.some((d) => d.verb === 'list' && d.resource === 'pods'),
        'the run had observed',
      );
      await allOrphansPresent(w);
    },
  },
  {
    name: 'after the state save, before the re-check',
    at: (_c, done) => done.some(isStateWrite),
    proof: async (w) => {
      await allOrphansPresent(w);
      const saved = await w.kube.listAll(CONFIGMAPS, { namespace: STATE_NS });
      assert.ok(saved.items.length > 0, 'the state was saved');
    },
  },
  {
    // The network's batch deletes its DanmEps first, then clears their bits in one write.
    name: "between a network's DanmEp deletes and its bit clear",
    at: (c, done) => c.verb === 'replace' && c.resource === 'danmnets' && epDeletes(done).length > 0,
    proof: async (w, crash) => {
      const gone = epDeletes(crash.done);
      assert.is(gone.length, w.orphans.length, 'every orphan DanmEp of the network was deleted first');
      for (const g of gone)
        assert.not.ok(await present(w, w.orphans.find((e) => e.metadata.name === g.name)!));
      const set = await bits(w);
      for (const ip of ORPHANS) assert.ok(set.includes(ip), `${ip}: no DanmEp's bit cleared yet`);
    },
  },
  {
    name: 'between two deletes',
    at: (c, done) => c.verb === 'delete' && c.resource === 'danmeps' && epDeletes(done).length === 1,
    proof: async (w, crash) => {
      const deleted = [];
      for (const ep of w.orphans) if (!(await present(w, ep))) deleted.push(ep.metadata.name);
      assert.equal(deleted, [epDeletes(crash.done)[0]!.name], 'exactly the first DELETE was applied');
    },
  },
  {
    name: 'after the last delete, before the run ends',
    at: (c, done) => c.verb === 'replace' && c.resource === 'leases' && epDeletes(done).length === 3,
    proof: async (w) => {
      for (const ep of w.orphans) assert.not.ok(await present(w, ep));
    },
  },
];

function runner(w: World, time: ManualTime) {
  const cfg = resolveConfig(
    {
      state: `configmap:${STATE_NS}`,
      leaseDuration: MINUTE,
      concurrency: 1, // one call at a time: "between two deletes" is a moment that exists
      allowShortGrace: true,
      functions: {
        'danm-endpoints': {
          grace: MINUTE,
          minAge: 0,
          kindGrace: { DanmBit: MINUTE },
          maxDeletionPercent: 100,
          settings: { namespaces: [w.ns] },
        },
      },
    },
    'crash test',
  );
  return (crash?: (inner: KubeClient) => Crash): Promise<RunResult> =>
    runFunction(
      danmEndpoints,
      cfg,
      {
        time,
        log: captureLog(time.now).log,
        kubeOptions: w.t.options,
        ...(crash ? { intercept: (inner) => crash(inner).client } : {}),
      },
      { apply: true },
    );
}

for (const point of POINTS) {
  test(`crash ${point.name}: the point is reached; later runs delete nothing in use and reclaim every orphan`, async () => {
    const w = await world();
    const time = manualTime(Date.now()); // the fake stamps objects on the real clock
    const run = runner(w, time);
    try {
      assert.is((await run()).exitCode, EXIT.ok, 'first observation');
      await time.advance(MINUTE);
      const mark = w.t.fake!.requests.length;
      let crash: Crash | undefined;
      let atDeath = -1;
      const crashed = await run((inner) => {
        crash = crashAt(inner, (c, done) => {
          const dies = point.at(c, done);
          if (dies) atDeath = w.t.fake!.requests.length;
          return dies;
        });
        return crash;
      }).catch((err: Error) => err);
      assert.ok(crash?.diedAt, `the run reached "${point.name}" (${JSON.stringify(crashed)})`);
      // The process is gone: nothing it did after dying reached the server.
      assert.equal(
        w.t.fake!.requests.slice(atDeath).map((r) => `${r.method} ${r.path}`),
        [],
        'no request reached the server after the death',
      );
      await point.proof(w, crash);
      // Its Lease outlives it: a run now is refused, and writes nothing.
      const blocked = await run();
      assert.is(blocked.exitCode, EXIT.locked, `${describe(crash.diedAt)}: ${blocked.error}`);
      await time.advance(61_000);
      for (let i = 0; i < 8 && JSON.stringify(await bits(w)) !== JSON.stringify(SETTLED); i++) {
        const r = await run();
        assert.is(r.exitCode, EXIT.ok, r.error);
        for (const ep of w.live) assert.ok(await present(w, ep), 'a live DanmEp survived');
        for (const ip of LIVE) assert.ok((await bits(w)).includes(ip), `live address ${ip} kept`);
        await time.advance(MINUTE);
      }
      for (const ep of w.orphans) assert.not.ok(await present(w, ep), `${ep.metadata.name} reclaimed`);
      assert.equal(await bits(w), SETTLED, 'orphan addresses and the leaked bit freed');
      const clears = w.t
        .fake!.requests.slice(mark)
        .filter((r) => r.method === 'PUT' && r.path.includes('/danmnets/') && r.status === 200).length;
      assert.ok(clears <= ORPHANS.length + 1, `at most one clear per freed address (saw ${clears})`);
    } finally {
      await w.kube.close();
      await w.t.close();
    }
  });
}

test.run();
