/** whereabouts-ips end to end, against the real API server and the fake. */

import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as assert from 'uvu/assert';
import { stringify } from 'yaml';
import { whereaboutsIps } from '../../functions/whereabouts-ips/index.ts';
import { LISTED_PODS_PER_GET, POD_READS_PER_BATCH } from '../../functions/whereabouts-ips/kinds.ts';
import { IPPOOLS, RESERVATIONS } from '../../functions/whereabouts-ips/model.ts';
import { MINUTE as MIN } from '../../shared/contract/index.ts';
import { ConflictError } from '../../shared/kube/errors.ts';
import type { KubeClient } from '../../shared/kube/ports.ts';
import { EVENTS, PODS } from '../../shared/kube/resources.ts';
import { EXIT } from '../../shared/runtime/errors.ts';
import { removeBatch } from '../../shared/runtime/sequence.ts';
import { forceDeletePod } from '../../shared/sandbox/scenarios/danm.ts';
import {
  allocate,
  allocations,
  containerId,
  createPodWithStatus,
  createPool,
  createReservation,
  networkStatus,
  offsetOf,
  reallocate,
  setNetworkStatus,
} from '../../shared/sandbox/scenarios/whereabouts.ts';
import { FileTombstones } from '../../shared/state/tombstones.ts';
import { spawnCli } from '../helpers/cli.ts';
import { type Call, intercept, writeRecorder } from '../helpers/intercept.ts';
import type { KubeTarget } from '../helpers/kube-target.ts';
import { runner } from '../helpers/runner.ts';
import { parsed } from '../helpers/settings.ts';
import { targetSuite } from '../helpers/target-suite.ts';

const RANGE = '192.168.2.0/24';

/** The context the run gives observe and re-check, for tests that step through a run by hand. */
const observeAt = (now: number, ns: string) => ({
  now,
  signal: AbortSignal.timeout(30_000),
  settings: parsed(whereaboutsIps, { namespaces: [ns] }),
  note: () => {},
  // the tombstones of a run stepped through by hand: kept in memory
  tombstone: async () => {},
});

/** A pool with one leaked allocation (of the gone pod `gone-0`), recorded a grace ago: the next run confirms it. */
async function confirmedLeak(t: KubeTarget, kube: KubeClient) {
  const ns = await t.namespace();
  await createPool(kube, ns, 'pool', RANGE, {
    '192.168.2.60': { id: containerId(), podref: `${ns}/gone-0` },
  });
  const r = runner(whereaboutsIps, t.options, [ns], Date.now() + MIN);
  await r.run();
  r.now += 6 * MIN;
  return { ns, r };
}

export function whereaboutsScenarios(label: string, getTarget: () => Promise<KubeTarget | undefined>): void {
  const { it, run } = targetSuite(`whereabouts-ips (${label})`, getTarget);

  it('StatefulSet pod re-created with the same name: the new allocation survives, the old one goes after two observations', async (t, kube) => {
    const ns = await t.namespace();
    const oldId = containerId();
    await createPool(kube, ns, 'pool', RANGE, { '192.168.2.10': { id: oldId, podref: `${ns}/db-0` } });
    await createPodWithStatus(kube, ns, 'db-0', ['192.168.2.10']);
    const r = runner(whereaboutsIps, t.options, [ns], Date.now() + MIN);
    assert.equal((await r.run()).deleted, []);
    assert.is(r.events('candidate.new').length, 0, 'in use while the pod lists the IP');
    // the node dies; db-0 is force-deleted and re-created with a new container and a new IP
    await forceDeletePod(kube, ns, 'db-0');
    const newId = containerId();
    await allocate(kube, ns, 'pool', RANGE, '192.168.2.11', { id: newId, podref: `${ns}/db-0` });
    await createPodWithStatus(kube, ns, 'db-0', ['192.168.2.11']);
    r.now += MIN;
    assert.equal((await r.run()).deleted, []);
    r.now += 3 * MIN;
    assert.equal((await r.run()).deleted, [], 'inside the grace window');
    r.now += 3 * MIN;
    // db-0 is alive (a new pod of the same name) and does not list .10: a stale annotation and a
    // leak look the same, so this kind waits its own, longer grace (1h), not the 5 min of "pod gone"
    const early = await r.run();
    assert.equal(early.deleted, [], 'the pod of that name is alive: not after 5 minutes');
    const pending = r.events('candidate.pending').at(-1);
    assert.is(pending?.kind, 'IPPoolAllocationNotListed');
    r.now += 55 * MIN;
    const res = await r.run();
    assert.is(res.exitCode, EXIT.ok);
    assert.is(res.deleted.length, 1);
    const left = await allocations(kube, ns, 'pool');
    assert.equal(Object.keys(left), [offsetOf(RANGE, '192.168.2.11')]);
    assert.is(left[offsetOf(RANGE, '192.168.2.11')]?.id, newId);
    const ev = await kube.listAll(EVENTS, { namespace: ns });
    assert.ok(ev.items.some((e) => (e as { reason?: string }).reason === 'WhereaboutsAddressReclaimed'));
  });

  it('allocation before evidence: no network-status yet counts as in use', async (t, kube) => {
    const ns = await t.namespace();
    await createPool(kube, ns, 'pool', RANGE, {
      '192.168.2.20': { id: containerId(), podref: `${ns}/web-0` },
    });
    await createPodWithStatus(kube, ns, 'web-0');
    const r = runner(whereaboutsIps, t.options, [ns], Date.now() + MIN);
    for (let i = 0; i < 3; i++) {
      assert.equal((await r.run()).deleted, []);
      r.now += 10 * MIN;
    }
    await setNetworkStatus(kube, ns, 'web-0', networkStatus(['192.168.2.20']));
    assert.equal((await r.run()).deleted, []);
    assert.is(Object.keys(await allocations(kube, ns, 'pool')).length, 1);
    assert.is(r.events('candidate.new').length, 0);
  });

  it('a lagging annotation: seen unused once, rescued when the annotation catches up', async (t, kube) => {
    const ns = await t.namespace();
    await createPool(kube, ns, 'pool', RANGE, {
      '192.168.2.25': { id: containerId(), podref: `${ns}/lag-0` },
    });
    await createPodWithStatus(kube, ns, 'lag-0', ['192.168.2.99']); // still the previous status
    const r = runner(whereaboutsIps, t.options, [ns], Date.now() + MIN);
    await r.run();
    assert.is(r.events('candidate.new').length, 1);
    await setNetworkStatus(kube, ns, 'lag-0', networkStatus(['192.168.2.25']));
    r.now += 10 * MIN;
    const res = await r.run();
    assert.equal(res.deleted, []);
    assert.is(r.events('candidate.rescued').length, 1);
  });

  it('every deletion leaves its tombstone first; without one nothing is deleted; restore brings an allocation back, and refuses one whose address was taken meanwhile', async (t, kube) => {
    const ns = await t.namespace();
    const [a, b] = [containerId(), containerId()];
    await createPool(kube, ns, 'pool', RANGE, {
      '192.168.2.50': { id: a, podref: `${ns}/gone-0` },
      '192.168.2.51': { id: b, podref: `${ns}/gone-1` },
    });
    const before = await allocations(kube, ns, 'pool');
    const r = runner(whereaboutsIps, t.options, [ns], Date.now() + MIN);
    // the tombstones cannot be written: their file's place is taken by a directory
    const tombPath = join(r.dir, 'whereabouts-ips.tombstones.json.gz');
    mkdirSync(tombPath, { recursive: true });
    await r.run();
    r.now += 6 * MIN;
    const refused = await r.run();
    assert.equal(refused.deleted, [], 'no tombstone, no deletion');
    assert.is(refused.exitCode, EXIT.error);
    assert.ok(
      r.events('delete.failed').some((e) => /nothing deleted: tombstones not written/.test(String(e.error))),
      JSON.stringify(r.events('delete.failed')),
    );
    assert.is(Object.keys(await allocations(kube, ns, 'pool')).length, 2, 'both allocations are still there');
    rmSync(tombPath, { recursive: true });
    r.now += MIN;
    const res = await r.run();
    assert.is(res.deleted.length, 2, JSON.stringify(r.events('delete.failed')));
    const runId = String(r.events('run.finished').at(-1)?.runId);
    const tombs = await new FileTombstones(r.dir, () => r.now).list('whereabouts-ips');
    assert.equal(tombs.map((x) => x.key).sort(), [...res.deleted].sort());
    const t50 = tombs.find((x) => (x.restore as { ip?: string }).ip === '192.168.2.50')!;
    assert.equal(t50.object, before[offsetOf(RANGE, '192.168.2.50')], 'the allocation exactly as it was');
    assert.is((t50.object as { id: string }).id, a);
    assert.is(t50.runId, runId);
    assert.ok(t50.fingerprint.length > 0 && /no pod of its podref/.test(t50.reason));
    // meanwhile .51 is handed to a new pod
    const c = containerId();
    await allocate(kube, ns, 'pool', RANGE, '192.168.2.51', { id: c, podref: `${ns}/new-0` });
    const cfg = join(r.dir, 'config.yaml');
    const kc = join(r.dir, 'kubeconfig');
    writeFileSync(kc, t.kubeconfig());
    writeFileSync(cfg, stringify({ functions: { 'whereabouts-ips': { settings: { namespaces: [ns] } } } }));
    // spawned, not run synchronously: the fake API server answers from this process
    const cli = async (...more: string[]) => {
      const x = await spawnCli([
        'restore',
        'whereabouts-ips',
        '--run',
        runId,
        '--state',
        `file:${r.dir}`,
        '--kubeconfig',
        kc,
        '--config',
        cfg,
        '--output',
        'json',
        ...more,
      ]);
      const json = () =>
        x.out
          .split('\n')
          .filter((l) => l.startsWith('{'))
          .map((l) => JSON.parse(l) as Record<string, unknown>);
      return { ...x, json };
    };
    const dry = await cli();
    assert.is(dry.code, 1, `one refused: ${dry.out}${dry.err}`);
    assert.is(dry.json().length, 2);
    assert.is(dry.json().length, 2);
    assert.ok(dry.json().some((l) => l.event === 'restore.ready' && l.key === t50.key));
    assert.ok(
      dry
        .json()
        .some((l) => l.event === 'restore.refused' && /allocated again, to .*new-0/.test(String(l.reason))),
      dry.out,
    );
    assert.equal(
      Object.keys(await allocations(kube, ns, 'pool')),
      [offsetOf(RANGE, '192.168.2.51')],
      'a dry run writes nothing',
    );
    const applied = await cli('--apply');
    assert.is(applied.code, 1, applied.out + applied.err);
    assert.ok(
      applied.json().some((l) => l.event === 'restore.restored' && l.key === t50.key),
      applied.out,
    );
    const now = await allocations(kube, ns, 'pool');
    assert.equal(
      now[offsetOf(RANGE, '192.168.2.50')],
      before[offsetOf(RANGE, '192.168.2.50')],
      'back as it was',
    );
    assert.is(now[offsetOf(RANGE, '192.168.2.51')]?.id, c, "the new pod's allocation is untouched");
  });

  it('reservations as whereabouts writes them (podref and ifname, no container id): an orphan goes with its allocation; one that names another pod than its allocation is indeterminate', async (t, kube) => {
    const ns = await t.namespace();
    const id = containerId();
    await createPool(kube, ns, 'pool', RANGE, {
      '192.168.2.30': { id, podref: `${ns}/a-0` },
      '192.168.2.31': { id: containerId(), podref: `${ns}/b-0` },
      '192.168.2.40': { id: containerId(), podref: `${ns}/gone-0` },
    });
    await createPodWithStatus(kube, ns, 'a-0', ['192.168.2.30']);
    await createPodWithStatus(kube, ns, 'b-0', ['192.168.2.31']);
    await createReservation(kube, ns, '192.168.2.30', { podref: `${ns}/a-0` });
    const orphan = await createReservation(kube, ns, '192.168.2.40', { podref: `${ns}/gone-0` });
    const odd = await createReservation(kube, ns, '192.168.2.31', { podref: `${ns}/c-0` });
    const r = runner(whereaboutsIps, t.options, [ns], Date.now() + MIN);
    await r.run();
    r.now += 6 * MIN;
    const res = await r.run();
    assert.ok(res.deleted.includes(orphan.metadata.uid), JSON.stringify(res.deleted));
    assert.ok(!(await kube.get(RESERVATIONS, ns, orphan.metadata.name)));
    assert.ok(await kube.get(RESERVATIONS, ns, odd.metadata.name));
    assert.ok(r.events('target.indeterminate').some((e) => String(e.reason).includes('disagree')));
    assert.equal(
      Object.keys(await allocations(kube, ns, 'pool')).sort(),
      [offsetOf(RANGE, '192.168.2.30'), offsetOf(RANGE, '192.168.2.31')].sort(),
      "the orphan's allocation went with its reservation; the disagreeing one stays",
    );
  });

  it('a pool updated by someone else between re-check and patch: retried on the fresh pool, nothing wrong removed', async (t, kube) => {
    const ns = await t.namespace();
    const goneId = containerId();
    await createPool(kube, ns, 'pool', RANGE, { '192.168.2.50': { id: goneId, podref: `${ns}/gone-0` } });
    const r = runner(whereaboutsIps, t.options, [ns], Date.now() + MIN);
    await r.run();
    r.now += 6 * MIN;
    // observe and decide as the run does, then race the patch
    const ctx = observeAt(r.now, ns);
    const obs = await whereaboutsIps.observe(kube, ctx);
    const target = obs.targets.find((x) => (x.data as { ip?: string } | undefined)?.ip === '192.168.2.50')!;
    let raced = false;
    const racing: KubeClient = Object.assign(Object.create(Object.getPrototypeOf(kube)), kube, {
      jsonPatch: async (...args: Parameters<KubeClient['jsonPatch']>) => {
        if (!raced) {
          raced = true; // a CNI ADD allocates another address in the same pool first
          await allocate(kube, ns, 'pool', RANGE, '192.168.2.51', {
            id: containerId(),
            podref: `${ns}/new-0`,
          });
        }
        return kube.jsonPatch(...args);
      },
    });
    // the pool's batch, of one: it re-checks, patches on the pool it read, and reads again on a conflict
    const [out] = await removeBatch(whereaboutsIps, racing, racing, [target], ctx);
    assert.is(out?.outcome, 'deleted', JSON.stringify(out));
    const left = await allocations(kube, ns, 'pool');
    assert.equal(Object.keys(left), [offsetOf(RANGE, '192.168.2.51')], 'the racing allocation survives');
    // and when the racing writer re-uses the very offset, nothing is removed
    await allocate(kube, ns, 'pool', RANGE, '192.168.2.52', { id: 'old', podref: `${ns}/gone-1` });
    const obs2 = await whereaboutsIps.observe(kube, ctx);
    const t2 = obs2.targets.find((x) => (x.data as { ip?: string } | undefined)?.ip === '192.168.2.52')!;
    const reuse: KubeClient = Object.assign(Object.create(Object.getPrototypeOf(kube)), kube, {
      jsonPatch: async (...args: Parameters<KubeClient['jsonPatch']>) => {
        await reallocate(kube, ns, 'pool', RANGE, '192.168.2.52', { id: 'new', podref: `${ns}/new-1` });
        return kube.jsonPatch(...args);
      },
    });
    const [out2] = await removeBatch(whereaboutsIps, reuse, reuse, [t2], ctx);
    assert.is(out2?.outcome, 'skipped', JSON.stringify(out2));
    // and a batched kind cannot be removed alone, around its batch
    const alone = await whereaboutsIps.remove(kube, t2, ctx);
    assert.equal(alone, {
      outcome: 'skipped',
      reason: 'kind IPPoolAllocation is removed by its batch, never alone',
    });
    assert.is((await allocations(kube, ns, 'pool'))[offsetOf(RANGE, '192.168.2.52')]?.id, 'new');
  });

  it("a pool written beside the patch (a burst of CNI ADDs): the patch tests the allocation itself and goes through at once; the others' allocations stay", async (t, kube) => {
    const { ns, r } = await confirmedLeak(t, kube);
    // before each of twopass's patches, another allocation lands first
    let n = 0;
    r.intercept = (k) =>
      Object.assign(Object.create(Object.getPrototypeOf(k)), k, {
        jsonPatch: async (...args: Parameters<KubeClient['jsonPatch']>) => {
          n++;
          await allocate(kube, ns, 'pool', RANGE, `192.168.2.${100 + n}`, {
            id: containerId(),
            podref: `${ns}/new-${n}`,
          });
          return k.jsonPatch(...args);
        },
      });
    const res = await r.run();
    assert.is(n, 1, 'one patch: a write of other offsets does not refuse a test of the allocation');
    assert.is(res.deleted.length, 1, JSON.stringify(r.events('delete.skipped')));
    const left = Object.values(await allocations(kube, ns, 'pool'))
      .map((a) => a.podref)
      .sort();
    assert.equal(left, [`${ns}/new-1`], 'only the leak went');
  });

  it('a pool whose every patch loses (five conflicts): skipped as contended, the candidate kept with its age; the next run deletes it at once', async (t, kube) => {
    const { ns, r } = await confirmedLeak(t, kube);
    // the server answers every patch 409 (an update that lost inside the server each time)
    let n = 0;
    r.intercept = (k) =>
      Object.assign(Object.create(Object.getPrototypeOf(k)), k, {
        jsonPatch: async () => {
          n++;
          throw new ConflictError('patch ippools', 409, 'Conflict', 'the object has been modified');
        },
      });
    const mark = r.mark();
    const contended = await r.run();
    assert.is(contended.exitCode, EXIT.ok, 'contention is not a failure of the run');
    assert.equal(contended.deleted, []);
    assert.is(n, 5, 'five attempts, each re-read after its conflict');
    const [skip] = r.events('delete.skipped', mark);
    assert.match(String(skip?.reason), /pool kept changing \(5 conflicts\): kept for the next run/);
    assert.is(skip?.contended, true);
    // the conflict is over: the next run confirms the kept candidate (no new grace) and deletes it
    delete r.intercept;
    r.now += 1000;
    const next = r.mark();
    const res = await r.run();
    assert.is(r.events('candidate.new', next).length, 0, 'not seen as new again: its age was kept');
    assert.is(res.deleted.length, 1, JSON.stringify(r.events('delete.skipped', next)));
    assert.equal(await allocations(kube, ns, 'pool'), {}, 'freed');
  });

  it('bad input: malformed pools, offsets out of range, bad annotations are reported, nothing deleted', async (t, kube) => {
    const ns = await t.namespace();
    await kube.create(IPPOOLS, {
      apiVersion: 'whereabouts.cni.cncf.io/v1alpha1',
      kind: 'IPPool',
      metadata: { name: 'bad-range', namespace: ns },
      spec: { range: 'not-a-range', allocations: { '5': { id: 'x', podref: `${ns}/gone-a` } } },
    });
    await kube.create(IPPOOLS, {
      apiVersion: 'whereabouts.cni.cncf.io/v1alpha1',
      kind: 'IPPool',
      metadata: { name: 'odd', namespace: ns },
      spec: {
        range: '10.9.0.0/28',
        allocations: {
          '99': { id: 'x', podref: `${ns}/gone-b` },
          abc: { id: 'y', podref: `${ns}/gone-c` },
          '3': { id: 'z', podref: 'no-slash' },
        },
      },
    });
    await createPool(kube, ns, 'good', RANGE, {
      '192.168.2.60': { id: containerId(), podref: `${ns}/weird-0` },
      '192.168.2.61': { id: containerId(), podref: `${ns}/gone-d` },
    });
    await createPodWithStatus(kube, ns, 'weird-0');
    await setNetworkStatus(kube, ns, 'weird-0', '{not json');
    const r = runner(whereaboutsIps, t.options, [ns], Date.now() + MIN);
    await r.run();
    r.now += 6 * MIN;
    const res = await r.run();
    assert.is(res.exitCode, EXIT.ok);
    assert.is(res.deleted.length, 1, 'only the well-formed orphan (.61) goes');
    assert.equal(Object.keys(await allocations(kube, ns, 'good')), [offsetOf(RANGE, '192.168.2.60')]);
    const reasons = r.events('target.indeterminate').map((e) => String(e.reason));
    assert.ok(reasons.some((x) => x.includes('cannot be parsed')));
    assert.ok(reasons.some((x) => x.includes('outside 10.9.0.0/28')));
    assert.ok(reasons.some((x) => x.includes('is not a number')));
    assert.ok(reasons.some((x) => x.includes('not namespace/name')));
    assert.ok(reasons.some((x) => x.includes('is not JSON')));
    assert.is(Object.keys(await allocations(kube, ns, 'odd')).length, 3);
    void PODS;
  });

  it('ten leaked allocations of one pool go in one run: one patch, one Event; the live one and a raced offset stay', async (t, kube) => {
    const ns = await t.namespace();
    const allocs: Record<string, { id: string; podref: string }> = {};
    for (let i = 0; i < 10; i++)
      allocs[`192.168.2.${100 + i}`] = { id: containerId(), podref: `${ns}/gone-${i}` };
    allocs['192.168.2.120'] = { id: containerId(), podref: `${ns}/live-0` };
    await createPool(kube, ns, 'pool', RANGE, allocs);
    await createPodWithStatus(kube, ns, 'live-0', ['192.168.2.120']);
    const r = runner(whereaboutsIps, t.options, [ns], Date.now() + MIN); // default concurrency (4)
    await r.run();
    r.now += 6 * MIN;
    const patches = () =>
      t.fake?.requests.filter(
        (q) => q.method === 'PATCH' && q.path.endsWith(`/namespaces/${ns}/ippools/pool`),
      ).length ?? 0;
    const before = patches();
    const writes = writeRecorder();
    r.intercept = writes.wrap;
    const res = await r.run();
    delete r.intercept;
    assert.is(res.deleted.length, 10, JSON.stringify(r.events('delete.skipped')));
    if (t.fake) assert.is(patches() - before, 1, 'one patch for the pool');
    writes.check(['patch ippools [test]', 'create events'], 'the deleting run (one tested patch, one Event)');
    assert.equal(Object.keys(await allocations(kube, ns, 'pool')), [offsetOf(RANGE, '192.168.2.120')]);
    const ev = (await kube.listAll(EVENTS, { namespace: ns })).items.filter(
      (e) => (e as { reason?: string }).reason === 'WhereaboutsAddressReclaimed',
    );
    assert.is(ev.length, 1, 'one Event for the pool');
    assert.match(String((ev[0] as { message?: string }).message), /removed 10 allocations/);

    // a batch raced by a CNI ADD that re-uses one of its offsets: that one stays, the others go
    await allocate(kube, ns, 'pool', RANGE, '192.168.2.130', { id: 'old-a', podref: `${ns}/gone-a` });
    await allocate(kube, ns, 'pool', RANGE, '192.168.2.131', { id: 'old-b', podref: `${ns}/gone-b` });
    const ctx = observeAt(r.now, ns);
    const obs = await whereaboutsIps.observe(kube, ctx);
    const batch = obs.targets.filter((x) =>
      // (targets in use carry no removal data)
      ['192.168.2.130', '192.168.2.131'].includes(String((x.data as { ip?: string } | undefined)?.ip)),
    );
    let raced = false;
    const racing: KubeClient = Object.assign(Object.create(Object.getPrototypeOf(kube)), kube, {
      jsonPatch: async (...args: Parameters<KubeClient['jsonPatch']>) => {
        if (!raced) {
          raced = true;
          await reallocate(kube, ns, 'pool', RANGE, '192.168.2.131', { id: 'new-b', podref: `${ns}/new-b` });
        }
        return kube.jsonPatch(...args);
      },
    });
    const out = await removeBatch(whereaboutsIps, kube, racing, batch, ctx);
    const by = new Map(
      out.map((o) => [(batch.find((b) => b.key === o.key)!.data as { ip: string }).ip, o.outcome]),
    );
    assert.is(by.get('192.168.2.130'), 'deleted');
    assert.is(by.get('192.168.2.131'), 'skipped', 'the re-check on the fresh pool saw the new owner');
    assert.is((await allocations(kube, ns, 'pool'))[offsetOf(RANGE, '192.168.2.131')]?.id, 'new-b');
  });

  // Both ways a batch re-checks its pods: a read of each (few), a list of their namespace (many).
  for (const gone of [1, POD_READS_PER_BATCH + 1])
    it(`a pod of the podref that comes back between the decision and the batch removal keeps its allocation; the other ${gone} of the pool go`, async (t, kube) => {
      const ns = await t.namespace();
      const allocs: Record<string, { id: string; podref: string }> = {
        '192.168.2.140': { id: containerId(), podref: `${ns}/web-0` },
      };
      for (let i = 0; i < gone; i++)
        allocs[`192.168.2.${141 + i}`] = { id: containerId(), podref: `${ns}/gone-${i}` };
      await createPool(kube, ns, 'pool', RANGE, allocs);
      const ctx = observeAt(Date.now(), ns);
      const obs = await whereaboutsIps.observe(kube, ctx);
      const batch = obs.targets.filter((x) => x.data !== undefined);
      assert.is(batch.length, gone + 1, 'every allocation is unused: no pod of any of the names');
      // web-0 is re-created (a StatefulSet's sticky name) and CNI ADD hands it its old address
      await createPodWithStatus(kube, ns, 'web-0', ['192.168.2.140']);
      const out = await removeBatch(whereaboutsIps, kube, kube, batch, ctx);
      const by = new Map(
        out.map((o) => [(batch.find((b) => b.key === o.key)!.data as { ip: string }).ip, o]),
      );
      assert.is(
        by.get('192.168.2.140')?.outcome,
        'skipped',
        'the fresh evidence finds web-0 using the address',
      );
      assert.match(
        String((by.get('192.168.2.140') as { reason?: string }).reason),
        /web-0 uses 192\.168\.2\.140/,
      );
      assert.is(out.filter((o) => o.outcome === 'deleted').length, gone);
      assert.equal(Object.keys(await allocations(kube, ns, 'pool')), [offsetOf(RANGE, '192.168.2.140')]);
    });

  it('a running pod whose network-status still lists an older address keeps its real allocation past the 5 min grace', async (t, kube) => {
    const ns = await t.namespace();
    await createPool(kube, ns, 'pool', RANGE, {
      '192.168.2.60': { id: containerId(), podref: `${ns}/api-0` },
    });
    await createPodWithStatus(kube, ns, 'api-0', ['192.168.2.59']); // the annotation lags: an older address
    const r = runner(whereaboutsIps, t.options, [ns], Date.now() + MIN);
    await r.run();
    for (let m = 0; m < 4; m++) {
      r.now += 10 * MIN;
      assert.equal((await r.run()).deleted, [], `${(m + 1) * 10} min: the live pod's allocation stays`);
    }
    assert.is(r.events('candidate.pending').at(-1)?.kind, 'IPPoolAllocationNotListed');
    await setNetworkStatus(kube, ns, 'api-0', networkStatus(['192.168.2.60'])); // it catches up
    r.now += 10 * MIN;
    await r.run();
    assert.ok(r.events('candidate.rescued').length > 0, 'rescued when the annotation catches up');
    assert.equal(Object.keys(await allocations(kube, ns, 'pool')), [offsetOf(RANGE, '192.168.2.60')]);
  });

  it('a lost node: the act phase re-checks on one pods list read after the decision, shared by its pools, and reads no pool before its patch; a pod back by then keeps its address', async (t, kube) => {
    const ns = await t.namespace();
    const pools = ['pool-a', 'pool-b'];
    const ranges = ['192.168.3.0/24', '192.168.4.0/24'];
    // 120 pods named: reading each would cost the apiserver more than listing every pod
    const pods = (await kube.listAll(PODS, { metadataOnly: true })).items.length;
    assert.ok(120 * LISTED_PODS_PER_GET > pods + 2, `the cluster holds ${pods} pods: too many for this test`);
    for (const [i, pool] of pools.entries()) {
      const allocs: Record<string, { id: string; podref: string }> = {};
      for (let j = 0; j < 60; j++)
        allocs[`${ranges[i]!.slice(0, -4)}${10 + j}`] = { id: containerId(), podref: `${ns}/gone-${i}-${j}` };
      allocs[`${ranges[i]!.slice(0, -4)}200`] = { id: containerId(), podref: `${ns}/live-${i}` };
      await createPool(kube, ns, pool, ranges[i]!, allocs);
      await createPodWithStatus(kube, ns, `live-${i}`, [`${ranges[i]!.slice(0, -4)}200`]);
    }
    const r = runner(whereaboutsIps, t.options, [ns], Date.now() + MIN);
    await r.run();
    r.now += 6 * MIN;
    const calls: Call[] = [];
    let podLists = 0;
    r.intercept = (k) =>
      intercept(k, async (call, next) => {
        if (call.resource === 'leases' || call.resource === 'configmaps') return next();
        calls.push(call);
        // the second pods list of the run is the act phase's: gone-0-0 comes back just before it, with its address
        if (call.verb === 'list' && call.resource === 'pods' && ++podLists === 2)
          await createPodWithStatus(kube, ns, 'gone-0-0', ['192.168.3.10']);
        return next();
      });
    const res = await r.run();
    assert.is(res.exitCode, EXIT.ok, JSON.stringify(r.events('delete.failed')));
    assert.is(res.deleted.length, 119, 'every leak but the one whose pod came back');
    assert.match(String(r.events('delete.skipped')[0]?.reason), /gone-0-0 uses 192\.168\.3\.10/);
    const count = (verb: string, resource: string) =>
      calls.filter((c) => c.verb === verb && c.resource === resource).length;
    assert.is(count('list', 'pods'), 2, "the snapshot's list and the act phase's one, shared by both pools");
    assert.is(count('get', 'pods'), 0, 'no pod read one by one');
    assert.is(count('get', 'ippools'), 0, 'no pool read before its patch: the patch tests each allocation');
    assert.is(count('patch', 'ippools'), 2);
    const left = (await allocations(kube, ns, 'pool-a'))[offsetOf(ranges[0]!, '192.168.3.10')];
    assert.is(left?.podref, `${ns}/gone-0-0`);
  });

  it('one leak among many pods: its pod is read by name, the pods are not listed again', async (t, kube) => {
    const ns = await t.namespace();
    await createPool(kube, ns, 'pool', RANGE, {
      '192.168.2.60': { id: containerId(), podref: `${ns}/gone-0` },
    });
    // more pods than one GET costs to list: the re-check reads the one pod by name
    for (let i = 0; i < LISTED_PODS_PER_GET + 1; i++)
      await createPodWithStatus(kube, ns, `live-${i}`, [`192.168.2.${100 + i}`]);
    const r = runner(whereaboutsIps, t.options, [ns], Date.now() + MIN);
    await r.run();
    r.now += 6 * MIN;
    const calls: Call[] = [];
    r.intercept = (k) =>
      intercept(k, (call, next) => {
        calls.push(call);
        return next();
      });
    const res = await r.run();
    assert.is(res.deleted.length, 1);
    const pods = calls.filter((c) => c.resource === 'pods');
    assert.equal(
      pods.map((c) => `${c.verb} ${c.name ?? ''}`),
      ['list ', 'get gone-0'],
      "the snapshot's list, then a GET of the named pod",
    );
  });

  run();
}
