/**
 * The laws at the ports (shared/runtime/guard.ts): no write of a function reaches a server
 * unless a target of the run declared the object, that target's tombstone is durable, and
 * the write carries its precondition. Proven three ways: the guard alone; the guard around
 * a port (a refused write never reaches it); and whole runs on the fake apiserver of kinds
 * that break one law each (the object survives, the run exits 1 and says `law.refused`),
 * beside the shipped functions, whose writes all pass through it.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { z } from 'zod';
import { danmEndpoints } from '../../functions/danm-endpoints/index.ts';
import { resolveConfig } from '../../shared/config.ts';
import {
  type BatchSpec,
  defineFunction,
  deleteAsObserved,
  kubeObject,
  MINUTE,
  openStackObject,
  pageSizeSetting,
} from '../../shared/contract/index.ts';
import { KubeHttpClient } from '../../shared/kube/client.ts';
import type { KubeReader, KubeReadWriter } from '../../shared/kube/ports.ts';
import { CONFIGMAPS, NAMESPACES } from '../../shared/kube/resources.ts';
import { NeutronClient } from '../../shared/openstack/neutron.ts';
import { OctaviaClient } from '../../shared/openstack/octavia.ts';
import { LawGuard, LawRefusal, patchTested } from '../../shared/runtime/guard.ts';
import { runFunction } from '../../shared/runtime/wire.ts';
import { installCrdsFromDir } from '../../shared/sandbox/crds.ts';
import { FakeKubeServer } from '../../shared/sandbox/kube/server.ts';
import {
  createEndpoint,
  createNetwork,
  createPod,
  forceDeletePod,
} from '../../shared/sandbox/scenarios/danm.ts';
import { captureLog, TEST_DEFAULTS } from '../helpers/memfn.ts';
import { testTime } from '../helpers/time.ts';

const CM = (ns: string, name: string) => kubeObject(CONFIGMAPS, ns, name);

/** The write is rejected with a LawRefusal. */
async function refused(p: Promise<unknown>): Promise<void> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(err instanceof LawRefusal, `refused by the guard: ${String(err)}`);
}

const unit = suite('the guard alone');

unit('a write of an object no target declared is refused, and recorded', () => {
  const g = new LawGuard([['t1', [{ object: CM('a', 'one') }]]]);
  g.markDurable(['t1']);
  assert.throws(
    () => g.check(CM('a', 'two'), 'deleteWithPreconditions', true),
    (e: unknown) => e instanceof LawRefusal,
  );
  assert.match(g.refusals[0]!, /no target of this run declares/);
  assert.is(g.writes.length, 0);
});

unit('a write before the tombstone of its target is durable is refused; after, it passes', () => {
  const g = new LawGuard([['t1', [{ object: CM('a', 'one') }]]]);
  assert.throws(
    () => g.check(CM('a', 'one'), 'deleteWithPreconditions', true),
    /tombstone of t1 is not durable/,
  );
  g.markDurable(['t1']);
  g.check(CM('a', 'one'), 'deleteWithPreconditions', true);
  assert.equal(g.writes, [
    { object: CM('a', 'one'), call: 'deleteWithPreconditions', key: 't1', precondition: true },
  ]);
});

unit('a write without its precondition is refused unless its target declared why it needs none', () => {
  const lb = openStackObject('octavia', 'loadbalancers', 'lb-1');
  const port = openStackObject('neutron', 'ports', 'p-1');
  const g = new LawGuard([
    ['lb', [{ object: lb, unconditional: 'Octavia offers none' }]],
    ['port', [{ object: port }]],
  ]);
  g.markDurable(['lb', 'port']);
  assert.throws(() => g.check(port, 'deletePort', false), /carries no server-side precondition/);
  g.check(lb, 'deleteLoadBalancer', false);
  assert.is(g.writes.at(-1)?.key, 'lb');
});

unit('a collection declared with * covers any of its objects, each write still preconditioned', () => {
  const g = new LawGuard([['sg', [{ object: openStackObject('neutron', 'ports', '*') }]]]);
  g.markDurable(['sg']);
  g.check(openStackObject('neutron', 'ports', 'any'), 'setPortSecurityGroups', true);
  assert.throws(
    () => g.check(openStackObject('neutron', 'ports', 'any'), 'deletePort', false),
    (e: unknown) => e instanceof LawRefusal,
  );
  assert.throws(
    () => g.check(openStackObject('neutron', 'floatingips', 'any'), 'deleteFloatingIp', true),
    /no target of this run declares/,
  );
});

unit('around a port: a refused write never reaches it; reads and allowed writes do', async () => {
  const calls: string[] = [];
  const kube = {
    get: async () => {
      calls.push('get');
      return undefined;
    },
    deleteWithPreconditions: async (_r: unknown, _n: unknown, name: string, _pre: unknown) => {
      calls.push(`delete ${name}`);
      return 'deleted';
    },
    mergePatch: async (_r: unknown, _n: unknown, name: string, _patch: unknown) => {
      calls.push(`patch ${name}`);
      return {};
    },
  };
  const neutron = {
    deletePort: async (id: string, _revision: number | undefined) => {
      calls.push(`delete port ${id}`);
      return 'deleted';
    },
  };
  const g = new LawGuard([
    ['t', [{ object: CM('a', 'mine') }, { object: openStackObject('neutron', 'ports', 'p') }]],
  ]);
  const w = g.wrap({ kube, neutron, other: 1 });
  assert.is(w.other, 1);
  await refused(w.kube.deleteWithPreconditions(CONFIGMAPS, 'a', 'mine', { uid: 'u', resourceVersion: '1' }));
  g.markDurable(['t']);
  await w.kube.get();
  await w.kube.deleteWithPreconditions(CONFIGMAPS, 'a', 'mine', { uid: 'u', resourceVersion: '1' });
  await refused(
    w.kube.deleteWithPreconditions(CONFIGMAPS, 'a', 'theirs', { uid: 'u', resourceVersion: '1' }),
  );
  await refused(w.kube.deleteWithPreconditions(CONFIGMAPS, 'a', 'mine', { uid: '', resourceVersion: '1' }));
  await refused(w.kube.mergePatch(CONFIGMAPS, 'a', 'mine', { data: {} }));
  await w.kube.mergePatch(CONFIGMAPS, 'a', 'mine', { metadata: { resourceVersion: '7' } });
  await refused(w.neutron.deletePort('p', undefined));
  await w.neutron.deletePort('p', 3);
  assert.equal(calls, ['get', 'delete mine', 'patch mine', 'delete port p']);
  assert.is(g.refusals.length, 5);
});

unit("a Kubernetes write its function's access does not allow is refused (RBAC would, in a cluster)", () => {
  const access = [
    { apiGroups: [''], resources: ['configmaps'], verbs: ['list', 'get', 'update'] },
    { apiGroups: ['x.io'], resources: ['things'], verbs: ['patch'] },
  ];
  const thing = kubeObject({ group: 'x.io', plural: 'things', namespaced: true }, 'a', 'one');
  const g = new LawGuard(
    [
      ['t1', [{ object: CM('a', 'one') }]],
      ['t2', [{ object: thing }]],
    ],
    access,
  );
  g.markDurable(['t1', 't2']);
  g.check(CM('a', 'one'), 'replace', true);
  g.check(thing, 'jsonPatch', true);
  assert.throws(
    () => g.check(CM('a', 'one'), 'deleteWithPreconditions', true),
    /access declares no deleteWithPreconditions of configmaps \(core\)/,
  );
  assert.throws(() => g.check(thing, 'replace', true), /access declares no replace of things \(x.io\)/);
  assert.throws(() => g.check(CM('a', 'one'), 'replaceStatus', true), /access declares no replaceStatus/);
  assert.is(g.writes.length, 2);
  assert.is(g.refusals.length, 3);
});

unit(
  'the real clients are the ports it knows: Kubernetes, Neutron and Octavia, alone or in a composite writer',
  async () => {
    const g = new LawGuard([]);
    const kube = new KubeHttpClient({ server: 'http://127.0.0.1:9', time: testTime() });
    const w = g.wrap({
      kube,
      neutron: new NeutronClient({} as never, {} as never),
      octavia: new OctaviaClient({} as never, {} as never),
    });
    const pre = { uid: 'u', resourceVersion: '1' };
    await refused(w.kube.deleteWithPreconditions(CONFIGMAPS, 'a', 'b', pre));
    await refused(w.neutron.deletePort('p', 1));
    await refused(w.neutron.deleteFloatingIp('f', 1));
    await refused(w.neutron.deleteSecurityGroup('s', 1));
    await refused(w.neutron.setPortSecurityGroups('p', [], 1));
    await refused(w.octavia.deleteLoadBalancer('lb'));
    await refused(
      g
        .wrap(kube)
        .replace(CONFIGMAPS, { metadata: { name: 'b', namespace: 'a', uid: 'u', resourceVersion: '1' } }),
    );
    await refused(g.wrap(kube).jsonPatch(CONFIGMAPS, 'a', 'b', []));
    assert.is(g.refusals.length, 8);
    await kube.close();
  },
);

unit(
  'a JSON patch is preconditioned by a leading resourceVersion test, or by a test of each path it changes',
  () => {
    const rv = { op: 'test', path: '/metadata/resourceVersion', value: '7' } as const;
    const rm = (p: string) => ({ op: 'remove', path: p }) as const;
    const was = (p: string) => ({ op: 'test', path: p, value: { id: 'c1', podref: 'ns/p' } }) as const;
    assert.ok(patchTested([rv, rm('/spec/allocations/5')]));
    assert.ok(patchTested([was('/spec/allocations/5'), rm('/spec/allocations/5')]));
    assert.ok(patchTested([was('/a'), rm('/a'), was('/b'), rm('/b')]));
    assert.not.ok(patchTested([rm('/spec/allocations/5')]), 'no test at all');
    assert.not.ok(patchTested([was('/a'), rm('/a'), rm('/b')]), 'one change untested');
    assert.not.ok(patchTested([was('/a'), rm('/b')]), 'a test of another path');
    assert.not.ok(patchTested([{ op: 'test', path: '/a' }, rm('/a')]), 'a test without the value read');
    assert.not.ok(patchTested([{ ...rv, value: '' }, rm('/a')]), 'an empty resourceVersion');
    assert.not.ok(patchTested([was('/a')]), 'tests only, nothing changed: not a write to let through');
  },
);

unit.run();

// ---- whole runs on the fake apiserver, of kinds that each break one law ----

type Data = { namespace: string; name: string; uid: string; rv: string };
const data = z.object({ namespace: z.string(), name: z.string(), uid: z.string(), rv: z.string() });
type Breaks = 'other object' | 'no precondition' | 'no tombstone' | 'no access' | 'none';

/** ConfigMaps labelled `leak` are unused; removing one breaks the law `breaks` names. */
function rogue(breaks: Breaks) {
  const batch: BatchSpec<Data, KubeReader, KubeReadWriter, Record<string, unknown>> = {
    key: (d) => d.namespace,
    // plans a write that declares nothing it removes: the runtime writes no tombstone for it
    steps: (_r, ts, ctx) => [
      {
        takes: () => true,
        plan: async () => ({
          removing: [],
          write: (kube) =>
            Promise.all(
              ts.map((t) => deleteAsObserved(kube, CONFIGMAPS, t.data, 'the ConfigMap', ctx.signal)),
            ),
        }),
      },
    ],
  };
  return defineFunction<
    z.ZodObject<{ pageSize: typeof pageSizeSetting }>,
    KubeReader,
    KubeReadWriter,
    { Leak: Data }
  >({
    name: 'rogue',
    description: `a kind that breaks a law: ${breaks}`,
    settings: z.object({ pageSize: pageSizeSetting }).strict(),
    defaults: TEST_DEFAULTS,
    access: {
      // 'no access': its function declares it may list and read ConfigMaps, never delete them
      cluster: [
        {
          apiGroups: [''],
          resources: ['configmaps'],
          verbs: breaks === 'no access' ? ['list', 'get'] : ['list', 'get', 'delete', 'patch'],
        },
      ],
    },
    kinds: {
      Leak: {
        data,
        unused: 'labelled leak',
        removal: 'DELETE the ConfigMap',
        touches: (d) => [{ object: kubeObject(CONFIGMAPS, d.namespace, d.name) }],
        // a batched kind has only its batch; a single one its re-check, removal and read-back
        ...(breaks === 'no tombstone'
          ? { batch }
          : {
              async recheck(kube, { data: d }, ctx) {
                const o = await kube.get(CONFIGMAPS, d.namespace, d.name, ctx.signal);
                return o?.metadata.uid === d.uid ? { ok: true, before: o } : { ok: false, reason: 'changed' };
              },
              async remove(kube, { data: d }, ctx) {
                if (breaks === 'other object')
                  return deleteAsObserved(
                    kube,
                    CONFIGMAPS,
                    { ...d, name: 'bystander' },
                    'a bystander',
                    ctx.signal,
                  );
                if (breaks === 'no precondition') {
                  await kube.mergePatch(
                    CONFIGMAPS,
                    d.namespace,
                    d.name,
                    { data: { emptied: 'yes' } },
                    ctx.signal,
                  );
                  return { outcome: 'deleted' };
                }
                return deleteAsObserved(kube, CONFIGMAPS, d, 'the ConfigMap', ctx.signal);
              },
              async confirmGone(kube, { data: d }, ctx) {
                return (await kube.get(CONFIGMAPS, d.namespace, d.name, ctx.signal)) === undefined;
              },
            }),
      },
    },
    async observe(kube, ctx) {
      const list = await kube.listAll(CONFIGMAPS, { namespace: 'rogue', signal: ctx.signal });
      ctx.source('configmaps', 'target', list);
      for (const o of list.items) {
        if (o.metadata.labels?.leak !== 'yes') continue;
        const d = {
          namespace: 'rogue',
          name: o.metadata.name,
          uid: o.metadata.uid,
          rv: o.metadata.resourceVersion,
        };
        ctx.target('Leak', {
          key: `rogue/${o.metadata.name}`,
          fingerprint: `${d.uid}/${d.rv}`,
          name: d.name,
          data: d,
        });
      }
    },
  });
}

/** Two runs a grace apart, the second deleting; what was left, and what the second run said. */
async function twoRuns(
  fn: ReturnType<typeof rogue> | typeof danmEndpoints,
  seed: (kube: KubeHttpClient) => Promise<void>,
) {
  const fake = new FakeKubeServer();
  await fake.start();
  const kube = new KubeHttpClient({ server: fake.url, time: testTime() });
  try {
    await seed(kube);
    const cfg = resolveConfig({ functions: { [fn.name]: { maxDeletionPercent: 100 } } }, 'guard', {
      state: `file:${mkdtempSync(join(tmpdir(), 'twopass-guard-'))}`,
    });
    let now = Date.now();
    const opts = { server: fake.url, time: testTime() };
    await runFunction(
      fn,
      cfg,
      { time: testTime(() => now), log: captureLog(() => now).log, kubeOptions: opts },
      { apply: true },
    );
    now += 6 * MINUTE;
    const cap = captureLog(() => now);
    const r = await runFunction(
      fn,
      cfg,
      { time: testTime(() => now), log: cap.log, kubeOptions: opts },
      { apply: true },
    );
    const left = (await kube.listAll(CONFIGMAPS, { namespace: 'rogue' })).items
      .map((o) => o.metadata.name)
      .sort();
    return { r, cap, left };
  } finally {
    await kube.close();
    await fake.stop();
  }
}

async function rogueWorld(kube: KubeHttpClient) {
  await kube.create(NAMESPACES, { metadata: { name: 'rogue' } });
  await kube.create(CONFIGMAPS, {
    metadata: { name: 'leak-1', namespace: 'rogue', labels: { leak: 'yes' } },
  });
  await kube.create(CONFIGMAPS, { metadata: { name: 'bystander', namespace: 'rogue' } });
}

const runs = suite('runs of kinds that break a law');

runs('a kind that keeps the laws: its deletion passes the guard, preconditioned and tombstoned', async () => {
  const { r, cap, left } = await twoRuns(rogue('none'), rogueWorld);
  assert.is(r.exitCode, 0, JSON.stringify(cap.events('delete.failed')));
  assert.equal(left, ['bystander']);
  assert.equal(cap.events('law.refused'), []);
  assert.is(cap.events('act.summary')[0]?.writes, 1);
});

for (const [breaks, why] of [
  ['other object', /no target of this run declares/],
  ['no precondition', /carries no server-side precondition/],
  ['no tombstone', /tombstone of rogue\/leak-1 is not durable/],
  ['no access', /access declares no deleteWithPreconditions of configmaps/],
] as const)
  runs(
    `a kind whose removal writes with ${breaks}: the write is never sent, the run exits 1 and says law.refused`,
    async () => {
      const { r, cap, left } = await twoRuns(rogue(breaks), rogueWorld);
      assert.equal(left, ['bystander', 'leak-1'], 'nothing was written');
      assert.is(r.exitCode, 1);
      const refused = cap.events('law.refused');
      assert.is(refused.length, 1, JSON.stringify(cap.lines.slice(-10)));
      assert.match(String(refused[0]!.reason), why);
      assert.not.ok(r.deleted.length, 'no deletion is claimed');
    },
  );

runs(
  'danm-endpoints: every write of a deleting run passes through the guard (the DanmEp and its network)',
  async () => {
    const { r, cap } = await twoRuns(danmEndpoints, async (kube) => {
      await installCrdsFromDir(kube, 'danm');
      await kube.create(NAMESPACES, { metadata: { name: 'rogue' } });
      await createNetwork(kube, 'rogue', 'net1', '10.10.10.0/24', ['10.10.10.5', '10.10.10.7']);
      await createEndpoint(kube, await createPod(kube, 'rogue', 'live'), 'net1', '10.10.10.5/24');
      await createEndpoint(kube, await createPod(kube, 'rogue', 'gone'), 'net1', '10.10.10.7/24');
      await forceDeletePod(kube, 'rogue', 'gone');
    });
    assert.is(r.exitCode, 0, JSON.stringify(cap.events('delete.failed')));
    assert.is(r.deleted.length, 1);
    // the DanmEp's DELETE and the network's PUT
    assert.is(cap.events('act.summary')[0]?.writes, 2);
    assert.is(cap.events('act.summary')[0]?.refused, 0);
  },
);

runs.run();
