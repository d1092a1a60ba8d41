/**
 * One contract for the Kubernetes API as twopass relies on it. The same tests
 * run against the fake (fake.test.ts) and a real kube-apiserver (real.test.ts);
 * a divergence fails one of them.
 */
import { randomUUID } from 'node:crypto';
import { request } from 'undici';
import * as assert from 'uvu/assert';
import type { Candidate } from '../../shared/engine/types.ts';
import { emptyState } from '../../shared/engine/types.ts';
import {
  compareResourceVersions,
  type KubeClientOptions,
  type KubeHttpClient,
} from '../../shared/kube/client.ts';
import { ConflictError, type KubeApiError } from '../../shared/kube/errors.ts';
import { recordEvent } from '../../shared/kube/events.ts';
import {
  CONFIGMAPS,
  EVENTS,
  type KubeObject,
  LEASES,
  NAMESPACES,
  PODS,
  type ResourceRef,
} from '../../shared/kube/resources.ts';
import { ConfigMapStateStore } from '../../shared/state/configmap.ts';
import { LockHeldError, StateConflictError } from '../../shared/state/errors.ts';
import { ConfigMapHistory, recordOf } from '../../shared/state/history.ts';
import { LeaseLock } from '../../shared/state/lease.ts';
import { ConfigMapTombstones, type Tombstone } from '../../shared/state/tombstones.ts';
import { evidenceWindowThroughStore } from '../helpers/engine.ts';
import { targetSuite } from '../helpers/target-suite.ts';
import { eventually, manualTime, testTime } from '../helpers/time.ts';

export type ContractTarget = Readonly<{
  name: string;
  /** A client of the target, with options of its own (gzip, a response counter). */
  client: (extra?: Partial<Omit<KubeClientOptions, 'server'>>) => KubeHttpClient;
  /** A raw request (GET unless `init` says) with the target's credentials: the status and body the client hides. */
  raw: (
    path: string,
    headers?: Record<string, string>,
    init?: RawInit,
  ) => Promise<{ status: number; body: Record<string, unknown> }>;
  /** Makes continue tokens handed out so far expire; `probe` answers the status of using one. */
  expireContinueTokens: (probe: () => Promise<number>) => Promise<void>;
  close: () => Promise<void>;
}>;

export const DANMEPS: ResourceRef = {
  group: 'danm.k8s.io',
  version: 'v1',
  plural: 'danmeps',
  kind: 'DanmEp',
  namespaced: true,
};
export const CLUSTERNETWORKS: ResourceRef = {
  group: 'danm.k8s.io',
  version: 'v1',
  plural: 'clusternetworks',
  kind: 'ClusterNetwork',
  namespaced: false,
};

const cm = (
  ns: string,
  name: string,
  data: Record<string, string> = {},
  labels: Record<string, string> = {},
) => ({
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: { name, namespace: ns, labels },
  data,
});

/** The preconditions a delete of exactly this object carries. */
const pre = (o: KubeObject) => ({ uid: o.metadata.uid, resourceVersion: o.metadata.resourceVersion });

async function rejects(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  throw new Error('expected a rejection');
}

export function kubeContract(
  getTarget: () => Promise<ContractTarget | undefined>,
  opts: { off?: boolean } = {},
): void {
  const { it: itIn, run } = targetSuite('kube contract', getTarget, {
    ...opts,
    setup: async (_t, kube) => {
      const ns = `contract-${randomUUID().slice(0, 8)}`;
      await kube.create(NAMESPACES, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } });
      return { ns };
    },
  });
  const it = (
    name: string,
    fn: (ctx: { t: ContractTarget; kube: KubeHttpClient; ns: string }) => Promise<void>,
  ) => itIn(name, (t, kube, { ns }) => fn({ t, kube, ns }));

  it('paginated list is one consistent snapshot', async ({ kube, ns }) => {
    for (let i = 0; i < 25; i++) await kube.create(CONFIGMAPS, cm(ns, `page-${String(i).padStart(2, '0')}`));
    const pages: KubeObject[][] = [];
    let rv: string | undefined;
    let cont: string | undefined;
    const raw = kube as unknown as { listAll: KubeHttpClient['listAll'] };
    void raw;
    // page by page by hand, writing in between
    const first = await rawList(kube, `/api/v1/namespaces/${ns}/configmaps?limit=10`);
    pages.push(first.items);
    rv = first.metadata.resourceVersion;
    cont = first.metadata.continue;
    assert.ok(cont, 'a continue token on a partial page');
    assert.is(first.metadata.remainingItemCount, 15);
    await kube.create(CONFIGMAPS, cm(ns, 'page-00a-late'));
    while (cont) {
      const p = await rawList(
        kube,
        `/api/v1/namespaces/${ns}/configmaps?limit=10&continue=${encodeURIComponent(cont)}`,
      );
      assert.is(p.metadata.resourceVersion, rv, 'every page carries the first page resourceVersion');
      pages.push(p.items);
      cont = p.metadata.continue;
    }
    const names = pages.flat().map((o) => o.metadata.name);
    assert.is(pages.length, 3);
    assert.is(names.length, 25);
    assert.not.ok(
      names.includes('page-00a-late'),
      'an object created after the first page is not in the list',
    );
    const all = await kube.listAll(CONFIGMAPS, { namespace: ns, pageSize: 7 });
    assert.ok(
      all.items.some((o) => o.metadata.name === 'page-00a-late'),
      'a new list sees it',
    );
    assert.is(all.pages, Math.ceil(all.items.length / 7));
  });

  it('a list asked not older than a resourceVersion of another resource answers at least as new; misuse is refused', async ({
    t,
    kube,
    ns,
  }) => {
    await kube.create(CONFIGMAPS, cm(ns, 'nott-0'));
    // A resourceVersion read from one resource's list, asked of another's
    const cms = await rawList(kube, `/api/v1/namespaces/${ns}/configmaps?limit=5`);
    const rv = cms.metadata.resourceVersion;
    const pods = await t.raw(
      `/api/v1/namespaces/${ns}/pods?limit=5&resourceVersion=${rv}&resourceVersionMatch=NotOlderThan`,
    );
    assert.is(pods.status, 200);
    const got = String((pods.body.metadata as { resourceVersion?: unknown }).resourceVersion);
    assert.ok(
      (compareResourceVersions(got, rv) ?? -1) >= 0,
      `answered at ${got}, asked not older than ${rv}`,
    );
    const noVersion = await t.raw(`/api/v1/namespaces/${ns}/pods?limit=5&resourceVersionMatch=NotOlderThan`);
    assert.is(noVersion.status, 422, 'a match without a resourceVersion is Invalid');
    const first = await rawList(kube, `/api/v1/namespaces/${ns}/configmaps?limit=1`);
    if (first.metadata.continue) {
      const both = await t.raw(
        `/api/v1/namespaces/${ns}/configmaps?limit=1&resourceVersion=${rv}&continue=${encodeURIComponent(first.metadata.continue)}`,
      );
      assert.is(both.status, 400, 'a resourceVersion with a continue token is a BadRequest');
    }
  });

  it('an expired continue token is 410 Expired; listAll restarts the list', async ({ t, kube, ns }) => {
    for (let i = 0; i < 6; i++) await kube.create(CONFIGMAPS, cm(ns, `exp-${i}`, {}, { set: 'exp' }));
    const first = await rawList(kube, `/api/v1/namespaces/${ns}/configmaps?limit=2&labelSelector=set%3Dexp`);
    await kube.create(CONFIGMAPS, cm(ns, 'exp-bump')); // a write, so that compaction has something to drop
    const next = `/api/v1/namespaces/${ns}/configmaps?limit=2&labelSelector=set%3Dexp&continue=${encodeURIComponent(first.metadata.continue!)}`;
    await t.expireContinueTokens(async () => (await t.raw(next)).status);
    const r = await t.raw(next);
    assert.is(r.status, 410);
    assert.is(r.body.kind, 'Status');
    assert.is(r.body.reason, 'Expired');
    assert.is(r.body.code, 410);
  });

  it('label and field selectors', async ({ kube, ns }) => {
    await kube.create(CONFIGMAPS, cm(ns, 'sel-a', {}, { app: 'x', tier: 'web' }));
    await kube.create(CONFIGMAPS, cm(ns, 'sel-b', {}, { app: 'x' }));
    await kube.create(CONFIGMAPS, cm(ns, 'sel-c', {}, { app: 'y' }));
    const x = await kube.listAll(CONFIGMAPS, { namespace: ns, labelSelector: 'app=x' });
    assert.equal(x.items.map((o) => o.metadata.name).sort(), ['sel-a', 'sel-b']);
    const notWeb = await kube.listAll(CONFIGMAPS, { namespace: ns, labelSelector: 'app=x,tier!=web' });
    assert.equal(
      notWeb.items.map((o) => o.metadata.name),
      ['sel-b'],
    );
    const hasTier = await kube.listAll(CONFIGMAPS, { namespace: ns, labelSelector: 'tier' });
    assert.equal(
      hasTier.items.map((o) => o.metadata.name),
      ['sel-a'],
    );
    const byName = await kube.listAll(CONFIGMAPS, { namespace: ns, fieldSelector: 'metadata.name=sel-c' });
    assert.equal(
      byName.items.map((o) => o.metadata.name),
      ['sel-c'],
    );
  });

  it('metadata-only lists carry only metadata', async ({ kube, ns }) => {
    await kube.create(CONFIGMAPS, cm(ns, 'meta-1', { big: 'x'.repeat(1000) }));
    const r = await rawList(
      kube,
      `/api/v1/namespaces/${ns}/configmaps?limit=500`,
      'application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1',
    );
    assert.is(r.kind, 'PartialObjectMetadataList');
    assert.is(r.apiVersion, 'meta.k8s.io/v1');
    const item = r.items.find((o) => o.metadata.name === 'meta-1')!;
    assert.ok(item.metadata.uid);
    assert.is((item as Record<string, unknown>).data, undefined);
    const viaClient = await kube.listAll(CONFIGMAPS, { namespace: ns, metadataOnly: true });
    assert.ok(viaClient.items.every((o) => (o as Record<string, unknown>).data === undefined));
  });

  it('empty lists are complete: items [] (full) and null (metadata-only)', async ({ kube, ns }) => {
    const full = await rawList(kube, `/api/v1/namespaces/${ns}/pods?limit=10`);
    assert.equal(full.items, []);
    const meta = await rawList(
      kube,
      `/api/v1/namespaces/${ns}/pods?limit=10`,
      'application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1',
    );
    assert.is(meta.items, null);
    const viaClient = await kube.listAll(PODS, { namespace: ns, metadataOnly: true });
    assert.equal(viaClient.items, []);
  });

  it('get: 404 is undefined, and error bodies are Status objects', async ({ t, kube, ns }) => {
    assert.is(await kube.get(CONFIGMAPS, ns, 'nope'), undefined);
    const r = await t.raw(`/api/v1/namespaces/${ns}/configmaps/nope`);
    assert.is(r.status, 404);
    assert.is(r.body.kind, 'Status');
    assert.is(r.body.status, 'Failure');
    assert.is(r.body.reason, 'NotFound');
    assert.is(r.body.code, 404);
    assert.is((r.body.details as { name?: string }).name, 'nope');
  });

  it('create: the server sets uid, resourceVersion and creationTimestamp; a duplicate is 409 AlreadyExists', async ({
    kube,
    ns,
  }) => {
    const o = await kube.create(CONFIGMAPS, cm(ns, 'dup'));
    assert.ok(o.metadata.uid && o.metadata.resourceVersion && o.metadata.creationTimestamp);
    const err = (await rejects(kube.create(CONFIGMAPS, cm(ns, 'dup')))) as KubeApiError;
    assert.is(err.status, 409);
    assert.is(err.reason, 'AlreadyExists');
    const noNs = (await rejects(
      kube.create(CONFIGMAPS, cm(`missing-${randomUUID().slice(0, 6)}`, 'x')),
    )) as KubeApiError;
    assert.is(noNs.status, 404, 'creating in a namespace that does not exist');
  });

  it('update with a stale resourceVersion is 409 Conflict', async ({ kube, ns }) => {
    const o = await kube.create(CONFIGMAPS, cm(ns, 'occ', { v: '1' }));
    const u = await kube.replace(CONFIGMAPS, { ...o, data: { v: '2' } } as KubeObject);
    assert.is.not(u.metadata.resourceVersion, o.metadata.resourceVersion);
    assert.is(u.metadata.uid, o.metadata.uid);
    const err = await rejects(kube.replace(CONFIGMAPS, { ...o, data: { v: '3' } } as KubeObject));
    assert.ok(err instanceof ConflictError);
    assert.is((err as ConflictError).reason, 'Conflict');
  });

  it('history: a watch from a version replays every later state of one object up to a later one; deleted or unreached is broken', async ({
    kube,
    ns,
  }) => {
    const v = (o: KubeObject) => (o as unknown as { data: { v: string } }).data.v;
    const o0 = await kube.create(CONFIGMAPS, cm(ns, 'hist', { v: '0' }));
    await kube.create(CONFIGMAPS, cm(ns, 'hist-other', { v: 'x' }));
    let last = o0;
    const rvs = [o0.metadata.resourceVersion];
    for (const n of ['1', '2', '3']) {
      last = await kube.replace(CONFIGMAPS, { ...last, data: { v: n } } as KubeObject);
      rvs.push(last.metadata.resourceVersion);
      // another object's writes in between are not this one's history
      const other = (await kube.get(CONFIGMAPS, ns, 'hist-other'))!;
      await kube.replace(CONFIGMAPS, { ...other, data: { v: `x${n}` } } as KubeObject);
    }
    const span = (from: number, until: number) => ({ from: rvs[from]!, until: rvs[until]! });
    assert.equal(await kube.history(CONFIGMAPS, ns, 'hist', span(0, 3), v), { states: ['1', '2', '3'] });
    assert.equal(await kube.history(CONFIGMAPS, ns, 'hist', span(1, 2), v), { states: ['2'] });
    assert.equal(await kube.history(CONFIGMAPS, ns, 'hist', span(3, 3), v), { states: [] });
    // from before the object was created: its creation, then every write
    const before = String(Number(rvs[0]) - 1);
    assert.equal(await kube.history(CONFIGMAPS, ns, 'hist', { from: before, until: rvs[3]! }, v), {
      states: ['0', '1', '2', '3'],
    });
    // a version the object never reaches: the answer ends first
    const never = await kube.history(CONFIGMAPS, ns, 'hist', { from: rvs[0]!, until: '999999999999' }, v);
    assert.ok('broken' in never && /ended before/.test(never.broken), JSON.stringify(never));
    await kube.delete(CONFIGMAPS, ns, 'hist');
    await kube.create(CONFIGMAPS, cm(ns, 'hist', { v: 'new' }));
    const gone = await kube.history(CONFIGMAPS, ns, 'hist', { from: rvs[3]!, until: '999999999999' }, v);
    assert.ok('broken' in gone && /deleted/.test(gone.broken), JSON.stringify(gone));
  });

  it('delete with preconditions: a wrong uid or resourceVersion is 409, the right ones delete', async ({
    kube,
    ns,
  }) => {
    const o = await kube.create(CONFIGMAPS, cm(ns, 'pre'));
    assert.is(
      await kube.deleteWithPreconditions(CONFIGMAPS, ns, 'pre', {
        uid: randomUUID(),
        resourceVersion: o.metadata.resourceVersion,
      }),
      'conflict',
    );
    assert.is(
      await kube.deleteWithPreconditions(CONFIGMAPS, ns, 'pre', {
        uid: o.metadata.uid,
        resourceVersion: '1',
      }),
      'conflict',
    );
    assert.ok(await kube.get(CONFIGMAPS, ns, 'pre'), 'still there after failed preconditions');
    assert.is(await kube.deleteWithPreconditions(CONFIGMAPS, ns, 'pre', pre(o)), 'deleted');
    assert.is(await kube.get(CONFIGMAPS, ns, 'pre'), undefined);
    assert.is(await kube.deleteWithPreconditions(CONFIGMAPS, ns, 'pre', pre(o)), 'gone');
  });

  it('a re-created object has a new uid: an old uid precondition cannot delete it', async ({ kube, ns }) => {
    const old = await kube.create(CONFIGMAPS, cm(ns, 'reuse'));
    await kube.delete(CONFIGMAPS, ns, 'reuse');
    const fresh = await kube.create(CONFIGMAPS, cm(ns, 'reuse'));
    assert.is.not(fresh.metadata.uid, old.metadata.uid);
    assert.is(
      await kube.deleteWithPreconditions(CONFIGMAPS, ns, 'reuse', {
        uid: old.metadata.uid,
        resourceVersion: fresh.metadata.resourceVersion,
      }),
      'conflict',
    );
  });

  it('merge patch, and JSON patch with a test op', async ({ kube, ns }) => {
    const o = await kube.create(CONFIGMAPS, cm(ns, 'patch', { a: '1', b: '2' }));
    const m = await kube.mergePatch(CONFIGMAPS, ns, 'patch', { data: { a: null, c: '3' } });
    assert.equal((m as unknown as { data: Record<string, string> }).data, { b: '2', c: '3' });
    const j = await kube.jsonPatch(CONFIGMAPS, ns, 'patch', [
      { op: 'test', path: '/metadata/resourceVersion', value: m.metadata.resourceVersion },
      { op: 'remove', path: '/data/b' },
    ]);
    assert.equal((j as unknown as { data: Record<string, string> }).data, { c: '3' });
    const err = (await rejects(
      kube.jsonPatch(CONFIGMAPS, ns, 'patch', [
        { op: 'test', path: '/metadata/resourceVersion', value: o.metadata.resourceVersion },
        { op: 'remove', path: '/data/c' },
      ]),
    )) as KubeApiError;
    assert.is(err.status, 422, 'a failed test op is 422 Invalid');
    const after = await kube.get(CONFIGMAPS, ns, 'patch');
    assert.equal((after as unknown as { data: Record<string, string> }).data, { c: '3' }, 'nothing applied');
    // whereabouts guards each allocation it adds with a test that the member is null: a
    // missing member passes it, a present one fails it
    const added = await kube.jsonPatch(CONFIGMAPS, ns, 'patch', [
      { op: 'test', path: '/data/d', value: null },
      { op: 'add', path: '/data/d', value: '4' },
    ]);
    assert.equal((added as unknown as { data: Record<string, string> }).data, { c: '3', d: '4' });
    const taken = (await rejects(
      kube.jsonPatch(CONFIGMAPS, ns, 'patch', [
        { op: 'test', path: '/data/d', value: null },
        { op: 'add', path: '/data/d', value: '5' },
      ]),
    )) as KubeApiError;
    assert.is(taken.status, 422, 'a member that is there does not test equal to null');
    // an object tests equal member by member, whatever their order (RFC 6902, 4.6): whereabouts-ips
    // tests each allocation it removes with the members it observed
    const pool = { ifname: 'net1', id: 'c1', podref: 'ns/p' };
    const obj = await kube.create(CONFIGMAPS, cm(ns, 'obj'));
    await kube.jsonPatch(CONFIGMAPS, ns, 'obj', [{ op: 'add', path: '/metadata/annotations', value: pool }]);
    const removed = await kube.jsonPatch(CONFIGMAPS, ns, 'obj', [
      { op: 'test', path: '/metadata/uid', value: obj.metadata.uid },
      { op: 'test', path: '/metadata/annotations', value: { id: 'c1', podref: 'ns/p', ifname: 'net1' } },
      { op: 'remove', path: '/metadata/annotations' },
    ]);
    assert.is(removed.metadata.annotations, undefined, 'the reordered object tested equal');
    await kube.jsonPatch(CONFIGMAPS, ns, 'obj', [{ op: 'add', path: '/metadata/annotations', value: pool }]);
    const differs = (await rejects(
      kube.jsonPatch(CONFIGMAPS, ns, 'obj', [
        { op: 'test', path: '/metadata/annotations', value: { id: 'c2', podref: 'ns/p', ifname: 'net1' } },
        { op: 'remove', path: '/metadata/annotations' },
      ]),
    )) as KubeApiError;
    assert.is(differs.status, 422, 'one member that differs fails the test');
  });

  it('pods: a scheduled pod stays Terminating after delete; grace 0 removes it', async ({ t, kube, ns }) => {
    const spec = { containers: [{ name: 'c', image: 'x' }] };
    await kube.create(PODS, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'unscheduled', namespace: ns },
      spec,
    });
    await kube.delete(PODS, ns, 'unscheduled');
    assert.is(await kube.get(PODS, ns, 'unscheduled'), undefined, 'an unscheduled pod goes at once');
    await kube.create(PODS, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'term', namespace: ns },
      spec: { ...spec, nodeName: 'node-1' },
    });
    // the graceful delete answers 200 with the pod, Terminating
    const graceful = await t.raw(`/api/v1/namespaces/${ns}/pods/term`, {}, { method: 'DELETE', body: {} });
    assert.is(graceful.status, 200, JSON.stringify(graceful.body));
    assert.is(graceful.body.kind, 'Pod');
    assert.ok((graceful.body.metadata as { deletionTimestamp?: string }).deletionTimestamp);
    const term = await kube.get(PODS, ns, 'term');
    assert.ok(term?.metadata.deletionTimestamp, 'Terminating');
    const list = await kube.listAll(PODS, { namespace: ns, metadataOnly: true });
    assert.ok(
      list.items.some((p) => p.metadata.name === 'term'),
      'a Terminating pod is still listed',
    );
    await kube.mergePatch(PODS, ns, 'term', {}); // no-op patch is allowed
    // a force delete (grace 0) of a Terminating pod: 200 with the pod as it was, then it is gone
    const force = await t.raw(
      `/api/v1/namespaces/${ns}/pods/term`,
      {},
      {
        method: 'DELETE',
        body: { gracePeriodSeconds: 0 },
      },
    );
    assert.is(force.status, 200, JSON.stringify(force.body));
    assert.is(force.body.kind, 'Pod');
    assert.is((force.body.metadata as { name?: string } | undefined)?.name, 'term');
    assert.is(await kube.get(PODS, ns, 'term'), undefined);
  });

  it('custom resources: namespaced and cluster-scoped, discovery', async ({ kube, ns }) => {
    assert.ok(await kube.serves('danm.k8s.io', 'v1', 'danmeps'));
    assert.not.ok(await kube.serves('danm.io', 'v1', 'danmeps'));
    assert.not.ok(await kube.serves('danm.k8s.io', 'v1', 'nothings'));
    const ep = await kube.create(DANMEPS, {
      apiVersion: 'danm.k8s.io/v1',
      kind: 'DanmEp',
      metadata: { name: randomUUID(), namespace: ns },
      spec: { Pod: 'p', PodUID: 'u', NetworkName: 'n', Interface: { Address: '10.0.0.5/24' } },
    });
    assert.is((ep.spec as { Interface: { Address: string } }).Interface.Address, '10.0.0.5/24');
    const list = await kube.listAll(DANMEPS, { namespace: ns });
    assert.is(list.items.length, 1);
    const name = `cn-${randomUUID().slice(0, 6)}`;
    const cn = await kube.create(CLUSTERNETWORKS, {
      apiVersion: 'danm.k8s.io/v1',
      kind: 'ClusterNetwork',
      metadata: { name },
      spec: { Options: { cidr: '10.9.0.0/24' } },
    });
    assert.is(cn.metadata.namespace, undefined);
    assert.ok(await kube.get(CLUSTERNETWORKS, undefined, name));
    assert.is(await kube.deleteWithPreconditions(CLUSTERNETWORKS, undefined, name, pre(cn)), 'deleted');
  });

  it('leases: MicroTime fields, stale replace is 409, LeaseLock excludes a second holder', async ({
    kube,
    ns,
  }) => {
    let now = Date.parse('2026-12-02T10:00:00Z');
    const time = testTime(() => now);
    const a = new LeaseLock(kube, {
      namespace: ns,
      identity: 'run-a',
      durationSeconds: 60,
      time,
      renewEveryMs: 0,
    });
    const b = new LeaseLock(kube, {
      namespace: ns,
      identity: 'run-b',
      durationSeconds: 60,
      time,
      renewEveryMs: 0,
    });
    const h = await a.acquire('contract');
    const lease = await kube.get(LEASES, ns, 'twopass-contract');
    const spec = lease?.spec as { holderIdentity: string; renewTime: string };
    assert.is(spec.holderIdentity, 'run-a');
    assert.match(spec.renewTime, /^2026-12-02T10:00:00\.000000Z$/);
    assert.ok((await rejects(b.acquire('contract'))) instanceof LockHeldError);
    await h.release();
    const hb = await b.acquire('contract');
    // run-b dies holding it; run-a may take over only after expiry
    now += 30_000;
    assert.ok((await rejects(a.acquire('contract'))) instanceof LockHeldError, 'not before expiry');
    now += 31_000;
    const ha = await a.acquire('contract');
    void hb;
    await ha.release();
    const stale = await kube.get(LEASES, ns, 'twopass-contract');
    const same = await kube.replace(LEASES, stale!);
    assert.is(
      same.metadata.resourceVersion,
      stale!.metadata.resourceVersion,
      'a no-op update keeps the resourceVersion',
    );
    await kube.replace(LEASES, {
      ...stale!,
      spec: { ...(stale!.spec as object), holderIdentity: 'someone' },
    } as KubeObject);
    assert.ok((await rejects(kube.replace(LEASES, stale!))) instanceof ConflictError);
  });

  it('LeaseLock renews on its clock, and a Lease taken from under it aborts the run', async ({
    kube,
    ns,
  }) => {
    const time = manualTime(Date.parse('2026-12-02T10:00:00Z'));
    const lock = new LeaseLock(kube, { namespace: ns, identity: 'run-a', durationSeconds: 60, time });
    const h = await lock.acquire('renew');
    const renewTime = async () =>
      ((await kube.get(LEASES, ns, 'twopass-renew'))?.spec as { renewTime?: string } | undefined)?.renewTime;
    assert.is(await renewTime(), '2026-12-02T10:00:00.000000Z');
    await time.advance(19_999);
    assert.is(await renewTime(), '2026-12-02T10:00:00.000000Z', 'not before a third of the duration');
    await time.advance(1);
    await eventually('the renewal', async () => (await renewTime()) === '2026-12-02T10:00:20.000000Z');
    assert.not.ok(h.lost.aborted);
    const held = (await kube.get(LEASES, ns, 'twopass-renew'))!;
    await kube.replace(LEASES, {
      ...held,
      spec: { ...(held.spec as object), holderIdentity: 'thief' },
    } as KubeObject);
    await time.advance(20_000);
    await eventually('the lost signal', () => h.lost.aborted);
    assert.match(String((h.lost.reason as Error).message), /lost Lease/);
    await h.release();
    const after = (await kube.get(LEASES, ns, 'twopass-renew'))?.spec as { holderIdentity: string };
    assert.is(after.holderIdentity, 'thief', 'a lost Lease is not released over its new holder');
    assert.is(time.pending(), 0, 'no renewal left waiting');
  });

  it('large lists come gzipped when asked (as client-go asks) and decode to the same items; small ones plain', async ({
    t,
    kube,
    ns,
  }) => {
    const blob = 'x'.repeat(4096);
    for (let i = 0; i < 48; i++) await kube.create(CONFIGMAPS, cm(ns, `big-${i}`, { blob: `${i}${blob}` }));
    const seen: { path: string; bytes: number; decodedBytes: number }[] = [];
    const counted = (gzip: boolean) => t.client({ gzip, onResponse: (r) => seen.push(r) });
    for (const gzip of [true, false]) {
      seen.length = 0;
      const c = counted(gzip);
      const list = await c.listAll(CONFIGMAPS, { namespace: ns, pageSize: 500 });
      await c.close();
      const big = list.items.filter((o) => o.metadata.name.startsWith('big-'));
      assert.is(big.length, 48);
      assert.ok(big.every((o) => (o as unknown as { data: { blob: string } }).data.blob.endsWith(blob)));
      const page = seen.find((r) => r.path.endsWith('/configmaps'))!;
      assert.ok(page.decodedBytes > 128 * 1024, `the page is ${page.decodedBytes} bytes`);
      if (gzip)
        assert.ok(page.bytes * 4 < page.decodedBytes, `gzipped: ${page.bytes} of ${page.decodedBytes} bytes`);
      else assert.is(page.bytes, page.decodedBytes, 'not asked: not compressed');
    }
    seen.length = 0;
    const c = counted(true);
    await c.get(CONFIGMAPS, ns, 'big-0');
    await c.close();
    assert.is(seen[0]!.bytes, seen[0]!.decodedBytes, 'a small answer is not compressed');
  });

  it("ConfigMapStateStore: the evidence guard's window survives a save and a load, and accepts the drop on its own", async ({
    kube,
    ns,
  }) => {
    const w = await evidenceWindowThroughStore(new ConfigMapStateStore(kube, ns));
    assert.is(w.held.length, 4, 'four refused runs');
    assert.ok(
      w.held.every((at) => at !== undefined && at === w.held[0]),
      `one window, not a new one each run: ${w.held}`,
    );
    assert.ok(w.storedDrop, 'the stored state holds the window');
    assert.is(w.final, 'ok', 'held past acceptEvidenceDropAfter: accepted on its own');
  });

  it('ConfigMapTombstones: appends survive a new store; the ring rolls over past its size and count, the oldest overwritten; age retention; a second writer loses', async ({
    kube,
    ns,
  }) => {
    let now = Date.parse('2026-06-01T00:00:00Z');
    const retention = { maxAgeMs: 24 * 3600_000, maxEntries: 16 };
    const store = new ConfigMapTombstones(kube, ns, () => now, retention, 4096);
    const tomb = (i: number, pad = 0): Tombstone => ({
      key: `k-${i}`,
      kind: 'DanmEp',
      name: `ep-${i}`,
      object: {
        metadata: { name: `ep-${i}` },
        spec: { pad: Array.from({ length: pad }, () => randomUUID()).join('') },
      },
      function: 'tomb-fn',
      runId: 'run-1',
      snapshotId: 'snap-1',
      fingerprint: `fp-${i}`,
      reason: 'the Pod it was created for (by UID) is gone',
      at: now,
    });
    await store.append('tomb-fn', [tomb(1), tomb(2)]);
    await store.append('tomb-fn', [tomb(3)]);
    const fresh = new ConfigMapTombstones(kube, ns, () => now, retention, 4096);
    assert.equal(
      (await fresh.list('tomb-fn')).map((t) => t.key),
      ['k-1', 'k-2', 'k-3'],
      'read back by another store',
    );
    // two a slot (16 over 8): appends roll over; past 8 slots the oldest goes
    for (let i = 4; i <= 20; i++) await fresh.append('tomb-fn', [tomb(i)]);
    const kept = (await fresh.list('tomb-fn')).map((t) => t.key);
    assert.ok(kept.length <= 16 && kept.includes('k-20') && !kept.includes('k-1'), kept.join(' '));
    const maps = (await kube.listAll(CONFIGMAPS, { namespace: ns })).items.filter((o) =>
      o.metadata.name.startsWith('twopass-tomb-fn-tomb-'),
    );
    assert.is(maps.length, 8, 'a ring of eight ConfigMaps');
    for (const m of maps)
      assert.ok(
        Buffer.from(
          (m as unknown as { binaryData: Record<string, string> }).binaryData['tombstones.json.gz']!,
          'base64',
        ).length <= 4096,
      );
    // one garbled slot: the others are still listed and written to, and the damage is said
    const garbled = maps.find((m) => m.metadata.name.endsWith('-tomb-3'))!;
    const before = (await fresh.list('tomb-fn')).length;
    await kube.replace(CONFIGMAPS, {
      ...garbled,
      binaryData: { 'tombstones.json.gz': Buffer.from('garbled').toString('base64') },
    } as typeof garbled);
    const reader = new ConfigMapTombstones(kube, ns, () => now, retention, 4096);
    const left = await reader.list('tomb-fn');
    assert.ok(left.length > 0 && left.length < before, `${left.length} of ${before}`);
    assert.match(
      String(reader.damage('tomb-fn')),
      /1 tombstone ConfigMap\(s\) unreadable, left out: ConfigMap .*-tomb-3/,
    );
    await reader.append('tomb-fn', [tomb(99)]);
    assert.ok(
      (await reader.list('tomb-fn')).some((t) => t.key === 'k-99'),
      'a deletion is still recorded',
    );
    // big entries: one write beyond the size of a slot is refused, not split or dropped
    const big = await rejects(fresh.append('tomb-fn', [tomb(21, 400)]));
    assert.match(String(big), /above 4096: not written/);
    // age: a day later, what is older than a day is not listed
    now += 25 * 3600_000;
    assert.equal(await fresh.list('tomb-fn'), []);
    // a writer holding an old resourceVersion loses: nothing written
    const a = new ConfigMapTombstones(kube, ns, () => now, retention, 4096);
    const b = new ConfigMapTombstones(kube, ns, () => now, retention, 4096);
    await a.append('other-fn', [tomb(1)]);
    await b.append('other-fn', [tomb(2)]);
    await a.append('other-fn', [tomb(3)]).then(
      () => assert.unreachable('the stale writer must lose'),
      (err) => assert.match(String(err), /written by someone else meanwhile/),
    );
  });

  it('ConfigMapHistory: records survive a new store, newest last; bounded by count and bytes; a writer that loses the race reads again and adds its record; a garbled ConfigMap is said and started over', async ({
    kube,
    ns,
  }) => {
    const rec = (i: number, names = 0) =>
      recordOf({
        function: 'hist-fn',
        runId: `run-${i}`,
        startedAt: 1_000 + i,
        durationMs: 3,
        dryRun: false,
        outcome: 'ok',
        exitCode: 0,
        events: Array.from({ length: names }, () => ({
          event: 'candidate.new' as const,
          key: randomUUID(),
          kind: 'DanmEp',
          name: `${randomUUID()} ${randomUUID()}`,
        })),
        deleted: [],
        held: [],
        skipped: [],
        failed: [],
      });
    const retention = { runs: 4, items: 200, bytes: 16_000 };
    const store = new ConfigMapHistory(kube, ns, retention);
    for (let i = 1; i <= 6; i++) await store.append('hist-fn', rec(i));
    const fresh = new ConfigMapHistory(kube, ns, retention);
    assert.equal(
      (await fresh.list('hist-fn')).map((r) => r.runId),
      ['run-3', 'run-4', 'run-5', 'run-6'],
    );
    // records of 150 names each: the oldest go to stay under the bytes
    for (let i = 7; i <= 10; i++) await store.append('hist-fn', rec(i, 150));
    const kept = (await fresh.list('hist-fn')).map((r) => r.runId);
    assert.ok(kept.length < 4 && kept.at(-1) === 'run-10', kept.join(' '));
    const cm = (await kube.get(CONFIGMAPS, ns, 'twopass-hist-fn-history')) as unknown as {
      binaryData: Record<string, string>;
    };
    assert.ok(Buffer.from(cm.binaryData['history.json.gz']!, 'base64').length <= 16_000);
    // a second writer (a run by hand beside the CronJob's) writes between the read and the write
    const other = new ConfigMapHistory(kube, ns, retention);
    let raced = false;
    const racing = Object.create(kube) as typeof kube;
    racing.replace = async (res, body, signal) => {
      if (!raced) {
        raced = true;
        await other.append('hist-fn', rec(11));
      }
      return kube.replace(res, body, signal);
    };
    await new ConfigMapHistory(racing, ns, retention).append('hist-fn', rec(12));
    assert.ok(raced);
    assert.equal(
      (await fresh.list('hist-fn')).slice(-2).map((r) => r.runId),
      ['run-11', 'run-12'],
      'both records kept',
    );
    // garbled: said, and the next record starts it over
    const now = await kube.get(CONFIGMAPS, ns, 'twopass-hist-fn-history');
    await kube.replace(CONFIGMAPS, {
      ...now!,
      binaryData: { 'history.json.gz': Buffer.from('garbled').toString('base64') },
    } as typeof now & object);
    assert.equal(await fresh.list('hist-fn'), []);
    assert.match(String(fresh.damage('hist-fn')), /twopass-hist-fn-history: not gzipped JSON/);
    await fresh.append('hist-fn', rec(13));
    assert.equal(
      (await fresh.list('hist-fn')).map((r) => r.runId),
      ['run-13'],
    );
    assert.is(fresh.damage('hist-fn'), undefined);
  });

  it('ConfigMapStateStore: round trip, shards, conflicts', async ({ kube, ns }) => {
    const store = new ConfigMapStateStore(kube, ns, 8192);
    const empty = await store.load('contract-fn');
    assert.is(empty.version, undefined);
    const candidates: Record<string, Candidate> = {};
    for (let i = 0; i < 400; i++)
      candidates[randomUUID()] = {
        kind: 'DanmEp',
        name: randomUUID(),
        fingerprint: randomUUID(),
        firstUnusedAt: i,
        lastUnusedAt: i,
        observations: 1,
      };
    const state = { ...emptyState('contract-fn'), candidates };
    const v1 = await store.save('contract-fn', state, undefined);
    const shards = await kube.listAll(CONFIGMAPS, {
      namespace: ns,
      labelSelector: 'twopass.io/function=contract-fn',
    });
    assert.ok(shards.items.length > 2, `sharded over ${shards.items.length} ConfigMaps`);
    const back = await store.load('contract-fn');
    assert.equal(back.state, state);
    assert.is(back.version, v1);
    const small = { ...emptyState('contract-fn') };
    const v2 = await store.save('contract-fn', small, v1);
    const after = await kube.listAll(CONFIGMAPS, {
      namespace: ns,
      labelSelector: 'twopass.io/function=contract-fn',
    });
    assert.is(after.items.length, 1, 'old shards are removed');
    assert.ok(
      (await rejects(store.save('contract-fn', state, v1))) instanceof StateConflictError,
      'a stale writer loses',
    );
    assert.equal((await store.load('contract-fn')).state, small);
    assert.is((await store.load('contract-fn')).version, v2);
    assert.ok(await store.reset('contract-fn'));
    assert.is((await store.load('contract-fn')).version, undefined);
  });

  it('events attach to an object', async ({ kube, ns }) => {
    const o = await kube.create(CONFIGMAPS, cm(ns, 'evented'));
    const e = await recordEvent(
      kube,
      ns,
      { apiVersion: 'v1', kind: 'ConfigMap', name: 'evented', namespace: ns, uid: o.metadata.uid },
      'TestReason',
      'a message',
      'Normal',
      Date.now(),
    );
    assert.ok(e.metadata.name.startsWith('twopass-'));
    const list = await kube.listAll(EVENTS, { namespace: ns });
    assert.ok(list.items.some((x) => (x as { reason?: string }).reason === 'TestReason'));
  });

  run();
}

type RawList = {
  kind?: string;
  apiVersion?: string;
  metadata: { resourceVersion: string; continue?: string; remainingItemCount?: number };
  items: KubeObject[];
};

async function rawList(kube: KubeHttpClient, path: string, accept = 'application/json'): Promise<RawList> {
  const c = kube as unknown as { call: (c: unknown) => Promise<RawList> };
  const [p, q] = path.split('?');
  const query = Object.fromEntries(new URLSearchParams(q ?? ''));
  return c.call({ method: 'GET', path: p, query, accept, what: `raw ${path}` });
}

export type RawInit = Readonly<{ method?: 'GET' | 'DELETE'; body?: unknown }>;

export async function rawGet(
  server: string,
  path: string,
  headers: Record<string, string>,
  dispatcher?: import('undici').Dispatcher,
  init: RawInit = {},
): Promise<{ status: number; body: Record<string, unknown> }> {
  const r = await request(server + path, {
    method: init.method ?? 'GET',
    headers: {
      accept: 'application/json',
      ...(init.body === undefined ? {} : { 'content-type': 'application/json' }),
      ...headers,
    },
    ...(init.body === undefined ? {} : { body: JSON.stringify(init.body) }),
    ...(dispatcher ? { dispatcher } : {}),
  });
  const text = await r.body.text();
  return { status: r.statusCode, body: JSON.parse(text) as Record<string, unknown> };
}
