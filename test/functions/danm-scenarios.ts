/**
 * danm-endpoints end to end: the founding incident and the incidents that apply,
 * run against a KubeTarget (the real API server in danm-endpoints.real.test.ts,
 * the fake in danm-endpoints.fake.test.ts).
 */
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import * as assert from 'uvu/assert';
import { danmEndpoints } from '../../functions/danm-endpoints/index.ts';
import { MINUTE as MIN, type Tombstone } from '../../shared/contract/index.ts';
import type { KubeHttpClient } from '../../shared/kube/client.ts';
import { EVENTS, type KubeObject, PODS } from '../../shared/kube/resources.ts';
import { EXIT } from '../../shared/runtime/errors.ts';
import {
  allocated,
  bitmapWith,
  createEndpoint,
  createNetwork,
  createPod,
  forceDeletePod,
  R,
  seedIncident,
  setBits,
} from '../../shared/sandbox/scenarios/danm.ts';
import { FileTombstones } from '../../shared/state/tombstones.ts';
import { backgroundWriter, danmRunner } from '../helpers/danm.ts';
import { type Call, intercept, writeRecorder } from '../helpers/intercept.ts';
import type { KubeTarget } from '../helpers/kube-target.ts';
import { parsed } from '../helpers/settings.ts';
import { targetSuite } from '../helpers/target-suite.ts';

export function danmScenarios(label: string, getTarget: () => Promise<KubeTarget | undefined>): void {
  const { it, run } = targetSuite(`danm-endpoints (${label})`, getTarget);

  const epExists = async (kube: KubeHttpClient, ep: KubeObject) =>
    (await kube.get(R.danmeps, ep.metadata.namespace, ep.metadata.name))?.metadata.uid === ep.metadata.uid;
  const bits = async (kube: KubeHttpClient, ns: string, net = 'test-net1') =>
    allocated((await kube.get(R.DanmNet, ns, net))!);

  it('the founding incident: the new ss-cinfo-0 keeps its DanmEp and IP; the old endpoints go after two observations', async (t, kube) => {
    const ns = await t.namespace();
    const w = await seedIncident.before(kube, ns);
    const r = danmRunner(t.options, [ns], Date.now());
    const check = async (when: string) => {
      assert.ok(
        (await bits(kube, ns)).includes('10.10.10.15') || when === 'before',
        `${when}: .15 stays allocated`,
      );
      if (w.newEps['ss-cinfo-0'])
        assert.ok(
          await epExists(kube, w.newEps['ss-cinfo-0']),
          `${when}: the new ss-cinfo-0 DanmEp survives`,
        );
    };
    assert.is((await r.run()).deleted.length, 0);
    await seedIncident.nodeLost(kube, w);
    r.now += MIN;
    const between = await r.run(); // between the new pod and its DanmEp
    assert.equal(between.deleted, []);
    await check('between the new pod and its DanmEp');
    assert.is(r.events('candidate.new').length, 2, 'the two old DanmEps are first observations');
    assert.ok(
      r
        .events('target.indeterminate')
        .some((e) => String(e.name).endsWith('10.10.10.15') && String(e.reason).includes('being set up')),
      'the in-flight bit is indeterminate: the new pod is being set up on the network',
    );
    await seedIncident.cniDone(kube, w);
    r.now += MIN;
    const m = r.mark();
    const after = await r.run();
    assert.equal(after.deleted, []);
    await check('after CNI ADD');
    assert.not.ok(
      r.events('candidate.new', m).some((e) => String(e.name).endsWith('10.10.10.15')),
      'the in-flight bit was never a candidate',
    );
    assert.ok(
      await epExists(kube, w.oldEps['ss-cinfo-0']!),
      'old endpoints are only pending before the grace window',
    );
    r.now += 3 * MIN; // 4 min after the first observation: still inside the 5 min grace
    assert.equal((await r.run()).deleted, []);
    r.now += 2 * MIN;
    const final = await r.run();
    assert.is(final.exitCode, EXIT.ok);
    assert.equal(
      [...final.deleted].sort(),
      [w.oldEps['ss-cinfo-0']!.metadata.uid, w.oldEps['ss-cinfo-4']!.metadata.uid].sort(),
    );
    await check('after reclamation');
    assert.not.ok(await epExists(kube, w.oldEps['ss-cinfo-0']!));
    assert.not.ok(await epExists(kube, w.oldEps['ss-cinfo-4']!));
    assert.equal(await bits(kube, ns), seedIncident.reclaimedBits);
    const events = await kube.listAll(EVENTS, { namespace: ns });
    // One Event per network and run, on the network, naming both DanmEps.
    const reclaimed = events.items.filter(
      (e) => (e as { reason?: string }).reason === 'DanmEndpointReclaimed',
    ) as { message?: string; involvedObject?: { kind?: string } }[];
    assert.is(reclaimed.length, 1);
    assert.is(reclaimed[0]!.involvedObject?.kind, 'DanmNet');
    assert.match(reclaimed[0]!.message ?? '', /deleted 2 DanmEps of gone pods/);
    for (const name of ['ss-cinfo-0', 'ss-cinfo-4'])
      assert.match(reclaimed[0]!.message ?? '', w.oldEps[name]!.metadata.name);
    r.now += 10 * MIN;
    const quiet = await r.run();
    assert.equal(quiet.deleted, [], 'nothing more to reclaim');
    assert.equal(await bits(kube, ns), seedIncident.reclaimedBits);
  });

  it('dry run plans but deletes nothing', async (t, kube) => {
    const ns = await t.namespace();
    await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', ['10.10.10.30']);
    const pod = await createPod(kube, ns, 'gone-0');
    const ep = await createEndpoint(kube, pod, 'test-net1', '10.10.10.30/24');
    await forceDeletePod(kube, ns, 'gone-0');
    const r = danmRunner(t.options, [ns], Date.now() + MIN);
    await r.run(false, true); // --record: a dry run that still keeps its observations
    r.now += 6 * MIN;
    const res = await r.run(false, true);
    assert.is(res.deleted.length, 0);
    assert.ok(await epExists(kube, ep));
    assert.is(r.events('candidate.confirmed')[0]?.dryRun, true);
  });

  it('long Terminating: a DanmEp whose pod is Terminating is in use', async (t, kube) => {
    const ns = await t.namespace();
    await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', ['10.10.10.40']);
    const pod = await createPod(kube, ns, 'slow-0', 'node-1');
    const ep = await createEndpoint(kube, pod, 'test-net1', '10.10.10.40/24');
    await kube.delete(PODS, ns, 'slow-0'); // graceful: stays Terminating (no kubelet)
    assert.ok((await kube.get(PODS, ns, 'slow-0'))?.metadata.deletionTimestamp);
    const r = danmRunner(t.options, [ns], Date.now() + MIN);
    for (let i = 0; i < 4; i++) {
      await r.run();
      r.now += 20 * MIN;
    }
    assert.ok(await epExists(kube, ep));
    assert.ok((await bits(kube, ns)).includes('10.10.10.40'));
    assert.is(r.events('candidate.new').length, 0);
  });

  it('name reuse without a DanmEp yet: the old DanmEp goes, the address re-assigned to a live DanmEp stays set', async (t, kube) => {
    const ns = await t.namespace();
    await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', ['10.10.10.50']);
    const old = await createPod(kube, ns, 'web-0');
    const oldEp = await createEndpoint(kube, old, 'test-net1', '10.10.10.50/24');
    await forceDeletePod(kube, ns, 'web-0');
    const fresh = await createPod(kube, ns, 'web-0'); // same name, new UID
    const freshEp = await createEndpoint(kube, fresh, 'test-net1', '10.10.10.50/24'); // the address re-assigned
    const r = danmRunner(t.options, [ns], Date.now() + MIN);
    await r.run();
    r.now += 6 * MIN;
    const res = await r.run();
    assert.equal(res.deleted, [oldEp.metadata.uid]);
    assert.ok(await epExists(kube, freshEp));
    assert.ok((await bits(kube, ns)).includes('10.10.10.50'), 'not freed while another live owner holds it');
    assert.match(String(r.events('resource.deleted')[0]?.detail), /held by DanmEp/);
  });

  it('tombstones and restore: no tombstone, no deletion; a deleted DanmEp comes back as it was with its address set; one whose address was taken meanwhile is refused', async (t, kube) => {
    const ns = await t.namespace();
    await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', ['10.10.10.90', '10.10.10.91']);
    const a = await createEndpoint(kube, await createPod(kube, ns, 'a-0'), 'test-net1', '10.10.10.90/24');
    const b = await createEndpoint(kube, await createPod(kube, ns, 'b-0'), 'test-net1', '10.10.10.91/24');
    await forceDeletePod(kube, ns, 'a-0');
    await forceDeletePod(kube, ns, 'b-0');
    const r = danmRunner(t.options, [ns], Date.now() + MIN);
    const tombPath = join(r.dir, 'danm-endpoints.tombstones.json.gz');
    mkdirSync(tombPath, { recursive: true });
    await r.run();
    r.now += 6 * MIN;
    const refused = await r.run();
    assert.equal(refused.deleted, [], 'no tombstone, no deletion');
    assert.is(refused.exitCode, EXIT.error);
    assert.ok((await epExists(kube, a)) && (await epExists(kube, b)));
    assert.ok((await bits(kube, ns)).includes('10.10.10.90'), 'no bit cleared either');
    rmSync(tombPath, { recursive: true });
    r.now += MIN;
    const res = await r.run();
    assert.equal(
      [...res.deleted].sort(),
      [a.metadata.uid, b.metadata.uid].sort(),
      JSON.stringify(r.events('delete.failed')),
    );
    assert.not.ok((await bits(kube, ns)).includes('10.10.10.90'));
    // where the leak sat, for the metrics: the network
    assert.equal(
      res.places?.filter((p) => p.kind === 'DanmEp'),
      [{ kind: 'DanmEp', place: `DanmNet/${ns}/test-net1`, candidates: 2, confirmed: 2, deleted: 2 }],
    );
    const tombs = await new FileTombstones(r.dir, () => r.now).list('danm-endpoints');
    assert.is(tombs.length, 2);
    const ta = tombs.find((x) => x.key === a.metadata.uid)!;
    const was = ta.object as KubeObject;
    assert.equal(was.spec, a.spec, 'the DanmEp exactly as it was');
    assert.equal(
      [was.apiVersion, was.kind, was.metadata.uid, was.metadata.resourceVersion, was.metadata.labels],
      [a.apiVersion, a.kind, a.metadata.uid, a.metadata.resourceVersion, a.metadata.labels],
      'its kind, identity, version and labels',
    );
    // .91 goes to a new pod meanwhile
    const c = await createEndpoint(kube, await createPod(kube, ns, 'c-0'), 'test-net1', '10.10.10.91/24');
    await setBits(kube, ns, 'test-net1', ['10.10.10.91']);
    const restore = (x: Tombstone, apply: boolean) =>
      danmEndpoints.restore(kube, kube, x, {
        now: r.now,
        signal: AbortSignal.timeout(30_000),
        settings: parsed(danmEndpoints, { namespaces: [ns] }),
        note: () => {},
        apply,
      });
    const dry = await restore(ta, false);
    assert.is(dry.outcome, 'ready', JSON.stringify(dry));
    assert.not.ok((await bits(kube, ns)).includes('10.10.10.90'), 'a dry run writes nothing');
    const back = await restore(ta, true);
    assert.is(back.outcome, 'restored', JSON.stringify(back));
    const again = await kube.get(R.danmeps, ns, a.metadata.name);
    assert.ok(again && again.metadata.uid !== a.metadata.uid, 'created anew under its name');
    assert.equal(again!.spec, a.spec);
    assert.ok((await bits(kube, ns)).includes('10.10.10.90'), 'its address is set again');
    const tb = tombs.find((x) => x.key === b.metadata.uid)!;
    const no = await restore(tb, true);
    assert.is(no.outcome, 'refused');
    assert.match(JSON.stringify(no), /10\.10\.10\.91 (is allocated again|is held by DanmEp)/);
    assert.not.ok(await kube.get(R.danmeps, ns, b.metadata.name), 'not re-created');
    assert.ok(await epExists(kube, c), "the new pod's DanmEp is untouched");
    const twice = await restore(ta, true);
    assert.is(twice.outcome, 'refused', 'a second restore collides with the first');
  });

  it('leaked bits: set, held by no DanmEp, reclaimed after their own grace; reserved bits never', async (t, kube) => {
    const ns = await t.namespace();
    await createNetwork(
      kube,
      ns,
      'test-net1',
      '10.10.10.0/24',
      ['10.10.10.1', '10.10.10.60', '10.10.10.61'],
      {
        routes: { '10.20.0.0/16': '10.10.10.1' },
        allocation_pool: { start: '10.10.10.2', end: '10.10.10.254' },
      },
    );
    const pod = await createPod(kube, ns, 'live-0');
    await createEndpoint(kube, pod, 'test-net1', '10.10.10.61/24');
    const r = danmRunner(t.options, [ns], Date.now() + MIN);
    await r.run();
    r.now += 6 * MIN;
    assert.equal((await r.run()).deleted, [], 'DanmBit grace is 10 min');
    r.now += 5 * MIN;
    const res = await r.run();
    assert.is(res.deleted.length, 1);
    assert.equal(await bits(kube, ns), ['10.10.10.0', '10.10.10.1', '10.10.10.61', '10.10.10.255']);
    const ev = await kube.listAll(EVENTS, { namespace: ns });
    assert.ok(ev.items.some((e) => (e as { reason?: string }).reason === 'DanmAddressReclaimed'));
    // its tombstone sets the bit again, once: a second restore finds it set
    const [tomb] = await new FileTombstones(r.dir, () => r.now).list('danm-endpoints');
    assert.is(tomb?.kind, 'DanmBit');
    const ctx = {
      now: r.now,
      signal: AbortSignal.timeout(30_000),
      settings: parsed(danmEndpoints, { namespaces: [ns] }),
      note: () => {},
    };
    assert.is((await danmEndpoints.restore(kube, kube, tomb!, { ...ctx, apply: true })).outcome, 'restored');
    assert.ok((await bits(kube, ns)).includes('10.10.10.60'), 'set again');
    const again = await danmEndpoints.restore(kube, kube, tomb!, { ...ctx, apply: false });
    assert.is(again.outcome, 'refused');
    assert.match(JSON.stringify(again), /10\.10\.10\.60 is allocated again/);
  });

  it('a leaked bit that is re-allocated between the observations is not freed', async (t, kube) => {
    const ns = await t.namespace();
    await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', ['10.10.10.70']);
    const r = danmRunner(t.options, [ns], Date.now() + MIN);
    await r.run();
    // freed by DANM, then handed to a new pod whose CNI ADD is still in flight
    await setBits(kube, ns, 'test-net1', ['10.10.10.70'], false);
    await setBits(kube, ns, 'test-net1', ['10.10.10.70'], true);
    r.now += 11 * MIN;
    assert.equal((await r.run()).deleted, []);
    assert.ok((await bits(kube, ns)).includes('10.10.10.70'));
    assert.ok(r.events('candidate.reset').some((e) => e.reason === 'fingerprint changed'));
  });

  it('a leaked bit on a network written between every run (pods coming and going) keeps its grace and is reclaimed; one freed and set again in between starts again', async (t, kube) => {
    const ns = await t.namespace();
    await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', ['10.10.10.70', '10.10.10.71']);
    const r = danmRunner(t.options, [ns], Date.now() + MIN);
    // other pods' addresses set and freed: DANM's writes of a busy network
    const churn = async (n: number) => {
      for (const a of [`10.10.10.${100 + n}`, `10.10.10.${110 + n}`]) {
        await setBits(kube, ns, 'test-net1', [a], true);
        await setBits(kube, ns, 'test-net1', [a], false);
      }
    };
    await r.run(); // the first observation of .70 and .71
    for (const run of [1, 2]) {
      await churn(run);
      // .71 freed and handed to a new pod whose CNI ADD is still in flight
      if (run === 2) {
        await setBits(kube, ns, 'test-net1', ['10.10.10.71'], false);
        await setBits(kube, ns, 'test-net1', ['10.10.10.71'], true);
      }
      r.now += 4 * MIN;
      const m = r.mark();
      assert.equal((await r.run()).deleted, [], `run ${run}: inside the 10 min grace`);
      const reset = r.events('candidate.reset', m).map((e) => String(e.name));
      assert.equal(
        reset.filter((n) => n.endsWith('10.10.10.70')),
        [],
        `run ${run}: .70 was set throughout the network's history`,
      );
      if (run === 2)
        assert.ok(
          reset.some((n) => n.endsWith('10.10.10.71')),
          'the re-used .71 starts again',
        );
    }
    await churn(3);
    r.now += 4 * MIN; // 12 min after the first observation
    const res = await r.run();
    assert.is(res.deleted.length, 1, 'only .70: .71 has been a candidate for 4 min');
    const now = await bits(kube, ns);
    assert.not.ok(now.includes('10.10.10.70'));
    assert.ok(now.includes('10.10.10.71'));
  });

  // About twice a second: a writer faster than the act phase's read-check-write cycle starves
  // it on a loaded machine (decision 0016, its limit); `npm run bench -- churn` reports faster paces.
  it('a leaked bit under a writer in the background (the network written about twice a second, during the runs too) is reclaimed within five runs of its grace', async (t, kube) => {
    const ns = await t.namespace();
    await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', ['10.10.10.70']);
    const r = danmRunner(t.options, [ns], Date.now() + MIN);
    const writer = backgroundWriter(kube, ns, 'test-net1', 500);
    let runs = 0;
    try {
      await r.run(); // the first observation
      for (;;) {
        r.now += 4 * MIN;
        runs++;
        await writer.written(); // written since
        const m = r.mark();
        if ((await r.run()).deleted.length > 0) break;
        const why = r.events('delete.skipped', m).map((e) => String(e.reason));
        if (runs >= 3)
          console.log(`  background writer: run ${runs} held back: ${why.join('; ') || 'pending'}`);
        assert.ok(runs < 8, `not reclaimed after ${runs} runs (${writer.writes} writes of the network)`);
      }
    } finally {
      await writer.stop();
    }
    console.log(`  background writer: reclaimed at run ${runs}, the network written ${writer.writes} times`);
    // the grace (10 min) is over at the third run (12 min); contended clears may wait a run or two
    assert.ok(runs >= 3, `reclaimed at run ${runs}, inside its grace`);
    assert.not.ok((await bits(kube, ns)).includes('10.10.10.70'));
  });

  it('bad input: malformed DanmEps and networks are indeterminate; the rest of the run still works', async (t, kube) => {
    const ns = await t.namespace();
    await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', ['10.10.10.80']);
    await kube.create(R.DanmNet, {
      apiVersion: 'danm.k8s.io/v1',
      kind: 'DanmNet',
      metadata: { name: 'bad-b64', namespace: ns },
      spec: { Options: { cidr: '10.11.0.0/24', alloc: '!!!notbase64' } },
    });
    await kube.create(R.DanmNet, {
      apiVersion: 'danm.k8s.io/v1',
      kind: 'DanmNet',
      metadata: { name: 'short', namespace: ns },
      spec: { Options: { cidr: '10.12.0.0/24', alloc: bitmapWith('10.12.0.0/25', ['10.12.0.9']) } },
    });
    const ghost = await createPod(kube, ns, 'ghost-0');
    const orphan = await createEndpoint(kube, ghost, 'test-net1', '10.10.10.80/24');
    const mk = (name: string, spec: Record<string, unknown>) =>
      kube.create(R.danmeps, {
        apiVersion: 'danm.k8s.io/v1',
        kind: 'DanmEp',
        metadata: { name, namespace: ns },
        spec: {
          NetworkName: 'test-net1',
          Pod: 'p',
          PodUID: 'uid-x',
          Interface: { Name: 'eth0', Address: '10.10.10.90/24' },
          ...spec,
        },
      });
    await mk('empty-uid', { PodUID: '' });
    await mk('bad-addr', { Interface: { Name: 'eth0', Address: '10.10.10.300/24' } });
    await mk('bad-type', { apiType: 'NoSuchNetwork' });
    await mk('on-bad-net', { NetworkName: 'bad-b64', Interface: { Address: '10.11.0.5/24' } });
    await mk('on-short-net', { NetworkName: 'short', Interface: { Address: '10.12.0.9/24' } });
    await forceDeletePod(kube, ns, 'ghost-0');
    const r = danmRunner(t.options, [ns], Date.now() + MIN);
    await r.run();
    r.now += 11 * MIN;
    const res = await r.run();
    assert.is(res.exitCode, EXIT.ok);
    assert.equal(res.deleted, [orphan.metadata.uid], 'only the well-formed orphan is reclaimed');
    const reasons = r.events('target.indeterminate').map((e) => String(e.reason));
    assert.ok(reasons.some((x) => x.includes('empty PodUID')));
    assert.ok(reasons.some((x) => x.includes('unparsable Interface.Address')));
    assert.ok(reasons.some((x) => x.includes('unknown apiType')));
    assert.ok(reasons.some((x) => x.includes('not valid base64')));
    assert.ok(reasons.some((x) => /has 16 bytes, 10\.12\.0\.0\/24 needs 32/.test(x)));
    assert.ok(r.events('network.unreadable').length >= 2);
    const left = await kube.listAll(R.danmeps, { namespace: ns });
    assert.is(left.items.length, 5, 'every malformed DanmEp is still there');
    assert.ok((await bits(kube, ns)).includes('10.10.10.90') === false);
  });

  it('evidence lister broke: pods vanish wholesale, the guard refuses (exit 4) and deletes nothing', async (t, kube) => {
    const ns = await t.namespace();
    await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', []);
    const eps: KubeObject[] = [];
    for (let i = 0; i < 6; i++) {
      const pod = await createPod(kube, ns, `many-${i}`);
      eps.push(await createEndpoint(kube, pod, 'test-net1', `10.10.10.${100 + i}/24`));
    }
    await setBits(
      kube,
      ns,
      'test-net1',
      eps.map((_, i) => `10.10.10.${100 + i}`),
    );
    // the guard is cluster-wide: set its limit to half of the drop this test causes
    const total = (await kube.listAll(PODS, {})).items.length;
    const limit = Math.floor((6 / total) * 50);
    const r = danmRunner(t.options, [ns], Date.now() + MIN, {
      'danm-endpoints': {
        settings: { namespaces: [ns] },
        maxDeletionPercent: 100,
        maxEvidenceDropPercent: limit,
      },
    });
    await r.run();
    // a broken evidence source looks like this: every pod of the namespace gone at once
    for (let i = 0; i < 6; i++) await forceDeletePod(kube, ns, `many-${i}`);
    r.now += 6 * MIN;
    const res = await r.run();
    assert.is(res.exitCode, EXIT.refused);
    assert.match(String(r.events('run.refused')[0]?.reason), /evidence pods shrank/);
    r.now += 6 * MIN;
    const again = await r.run();
    assert.equal(again.deleted, [], 'the broken snapshot never became the baseline');
    for (const ep of eps) assert.ok(await epExists(kube, ep));
  });

  it('a lost permission aborts the run (exit 3) and deletes nothing', async (t, kube) => {
    const ns = await t.namespace();
    await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', ['10.10.10.95']);
    const pod = await createPod(kube, ns, 'gone-1');
    const ep = await createEndpoint(kube, pod, 'test-net1', '10.10.10.95/24');
    await forceDeletePod(kube, ns, 'gone-1');
    const r = danmRunner(t.options, [ns], Date.now() + MIN);
    await r.run();
    r.now += 6 * MIN;
    if (t.fake) t.fake.faults.add({ method: 'GET', path: '/api/v1/pods', status: 403 });
    const forbidden =
      t.name === 'real'
        ? danmRunner({ ...t.options, headers: { authorization: 'Bearer twopass-nobody-token' } }, [ns], r.now)
        : r;
    const res = await forbidden.run();
    assert.is(res.exitCode, EXIT.incomplete);
    assert.ok(await epExists(kube, ep));
    assert.match(String(forbidden.events('run.aborted')[0]?.reason), /403/);
    t.fake?.faults.clear();
  });

  // DANM attaches a pod with no `danm.k8s.io/interfaces` annotation, or with `[]`, to its
  // namespace's default network: DanmNet `default`, else TenantNetwork `default`, else
  // ClusterNetwork `default`. A pod being set up there protects the network's unheld bits.
  for (const kind of ['DanmNet', 'TenantNetwork', 'ClusterNetwork'] as const)
    for (const [label, interfaces] of [
      ['no annotation', null],
      ['an empty list', '[]'],
    ] as const)
      it(`default network ${kind}, pod with ${label}: its in-flight address stays; leaked bits go once it is set up`, async (t, kube) => {
        const ns = await t.namespace();
        const nsOf = kind === 'ClusterNetwork' ? undefined : ns;
        const netBits = async () =>
          allocated((await kube.get(R[kind], nsOf, 'default'))!).filter(
            (a) => a !== '10.30.0.0' && a !== '10.30.0.255',
          );
        // A ClusterNetwork is cluster-wide: one `default` at a time, removed when the test ends.
        const net = await createNetwork(
          kube,
          ns,
          'default',
          '10.30.0.0/24',
          ['10.30.0.70', '10.30.0.72'],
          {},
          kind,
        );
        let ep: KubeObject | undefined;
        try {
          const pod = await createPod(kube, ns, 'web-0', 'node-1', 'default', interfaces);
          const r = danmRunner(t.options, [ns], Date.now() + MIN);
          // .70: the CNI ADD of web-0 set the bit; its DanmEp is not written yet
          await r.run();
          r.now += 11 * MIN;
          const during = await r.run();
          assert.equal(during.deleted, [], 'nothing is cleared while web-0 is being set up');
          assert.equal(await netBits(), ['10.30.0.70', '10.30.0.72']);
          const why = r
            .events('target.indeterminate')
            .filter((e) => String(e.name).endsWith('10.30.0.70'))
            .map((e) => String(e.reason));
          // a ClusterNetwork is reachable from every namespace: another pod being set up may be named first
          const who = kind === 'ClusterNetwork' ? '' : `pod ${ns}/web-0 `;
          assert.ok(
            why.some((x) => x.includes(`${who}is being set up on its default network`)),
            `indeterminate because a pod is being set up there: ${why.join(' | ')}`,
          );
          // CNI ADD finishes: the DanmEp holds .70; .72 is a true leak and goes after its grace
          ep = await createEndpoint(kube, pod, 'default', '10.30.0.70/24', 'eth0', kind);
          r.now += MIN;
          await r.run();
          r.now += 11 * MIN;
          const after = await r.run();
          // On the shared real cluster, pods of other suites (no DANM annotation, no DanmEp) are being
          // set up on ClusterNetwork `default` too, and rightly keep its unheld bits.
          if (kind !== 'ClusterNetwork' || t.name === 'fake') {
            assert.equal(await netBits(), ['10.30.0.70'], 'the leaked .72 was reclaimed, .70 kept');
            assert.is(after.deleted.length, 1);
          } else assert.ok((await netBits()).includes('10.30.0.70'));
        } finally {
          if (kind === 'ClusterNetwork') {
            await kube.delete(R.ClusterNetwork, undefined, net.metadata.name);
            // its DanmEp would hold .70 of the next ClusterNetwork `default`
            if (ep) await kube.delete(R.danmeps, ns, ep.metadata.name);
            await forceDeletePod(kube, ns, 'web-0');
          }
        }
      });

  it('default network resolution is exact: a pod on DanmNet default does not block TenantNetwork default', async (t, kube) => {
    const ns = await t.namespace();
    await createNetwork(kube, ns, 'default', '10.31.0.0/24', ['10.31.0.5'], {}, 'DanmNet');
    await createNetwork(kube, ns, 'default', '10.32.0.0/24', ['10.32.0.9'], {}, 'TenantNetwork');
    await createPod(kube, ns, 'setting-up-0', 'node-1', 'default', null);
    const r = danmRunner(t.options, [ns], Date.now() + MIN);
    await r.run();
    r.now += 11 * MIN;
    await r.run();
    const tenant = allocated((await kube.get(R.TenantNetwork, ns, 'default'))!);
    const danmnet = allocated((await kube.get(R.DanmNet, ns, 'default'))!);
    assert.not.ok(
      tenant.includes('10.32.0.9'),
      "TenantNetwork default is not the pod's network: its leak goes",
    );
    assert.ok(danmnet.includes('10.31.0.5'), "DanmNet default is the pod's network: its unheld bit stays");
  });

  it('an unreadable interfaces annotation protects every network the pod can reach', async (t, kube) => {
    const ns = await t.namespace();
    await createNetwork(kube, ns, 'other', '10.33.0.0/24', ['10.33.0.7']);
    await createNetwork(kube, ns, 'tn', '10.34.0.0/24', ['10.34.0.7'], {}, 'TenantNetwork');
    await createPod(kube, ns, 'odd-0', 'node-1', 'other', '{"network":"other"}');
    const r = danmRunner(t.options, [ns], Date.now() + MIN);
    await r.run();
    r.now += 11 * MIN;
    assert.equal((await r.run()).deleted, []);
    assert.ok(allocated((await kube.get(R.DanmNet, ns, 'other'))!).includes('10.33.0.7'));
    assert.ok(allocated((await kube.get(R.TenantNetwork, ns, 'tn'))!).includes('10.34.0.7'));
    assert.ok(
      r
        .events('target.indeterminate')
        .some((e) => /may be set up on any network it can reach/.test(String(e.reason))),
    );
  });

  it('six leaked bits of one network go in the first run after their grace, in one write and one Event', async (t, kube) => {
    const ns = await t.namespace();
    const leaked = [
      '10.10.10.110',
      '10.10.10.111',
      '10.10.10.112',
      '10.10.10.113',
      '10.10.10.114',
      '10.10.10.115',
    ];
    await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', [...leaked, '10.10.10.120']);
    const pod = await createPod(kube, ns, 'holder-0');
    await createEndpoint(kube, pod, 'test-net1', '10.10.10.120/24');
    const r = danmRunner(t.options, [ns], Date.now() + MIN); // default concurrency (4)
    await r.run();
    r.now += 11 * MIN;
    const puts = () =>
      t.fake?.requests.filter(
        (q) => q.method === 'PUT' && q.path.endsWith(`/namespaces/${ns}/danmnets/test-net1`),
      ).length ?? 0;
    const before = puts();
    const res = await r.run();
    assert.is(res.deleted.length, 6, `all six in one run: ${JSON.stringify(r.events('delete.skipped'))}`);
    assert.equal(await bits(kube, ns), ['10.10.10.0', '10.10.10.120', '10.10.10.255']);
    if (t.fake) assert.is(puts() - before, 1, 'one write for the network');
    const ev = (await kube.listAll(EVENTS, { namespace: ns })).items.filter(
      (e) => (e as { reason?: string }).reason === 'DanmAddressReclaimed',
    );
    assert.is(ev.length, 1, 'one Event for the network');
    assert.match(String((ev[0] as { message?: string }).message), /cleared 6 leaked addresses/);
  });

  it('a lost node: the orphans of two networks go as one batch per network, on one fresh read of the cluster, not one per deletion', async (t, kube) => {
    const ns = await t.namespace();
    const worlds = [
      { net: 'net-a', prefix: '10.40.0', pods: 30, lost: 12 },
      { net: 'net-b', prefix: '10.41.0', pods: 20, lost: 8 },
    ];
    for (const w of worlds) {
      const addrs = Array.from({ length: w.pods }, (_, i) => `${w.prefix}.${10 + i}`);
      await createNetwork(kube, ns, w.net, `${w.prefix}.0/24`, addrs);
      for (const [i, a] of addrs.entries()) {
        const pod = await createPod(kube, ns, `${w.net}-${i}`, 'node-1', w.net);
        await createEndpoint(kube, pod, w.net, `${a}/24`);
      }
    }
    // A lost node takes 40% of the pods: past the evidence guard, which is not under test here.
    const r = danmRunner(t.options, [ns], Date.now() + MIN, {
      'danm-endpoints': { maxEvidenceDropPercent: 100 },
    });
    await r.run();
    for (const w of worlds) for (let i = 0; i < w.lost; i++) await forceDeletePod(kube, ns, `${w.net}-${i}`);
    r.now += MIN;
    await r.run();
    r.now += 6 * MIN;
    // Count every call of the dry run and of the deleting run of the same world.
    const count = () => {
      const calls: Call[] = [];
      r.intercept = (k) =>
        intercept(k, (call, next) => {
          calls.push(call);
          return next();
        });
      return calls;
    };
    const dry = count();
    assert.equal((await r.run(false)).deleted, []);
    const wet = count();
    const writes = writeRecorder();
    const counting = r.intercept!;
    r.intercept = (k) => writes.wrap(counting(k));
    const res = await r.run();
    delete r.intercept;
    // Every write, and no other: each DanmEp deleted with its preconditions, one guarded
    // bitmap write per network, one Event per network.
    writes.check(
      [
        ...Array.from({ length: 20 }, () => 'delete danmeps [uid+rv]'),
        'replace danmnets [rv]',
        'replace danmnets [rv]',
        'create events',
        'create events',
      ],
      'the deleting run',
    );
    assert.is(res.exitCode, EXIT.ok, JSON.stringify(r.events('delete.failed')));
    assert.is(res.deleted.length, 20, 'every orphan DanmEp');
    const n = (calls: Call[], verb: string, resource: string) =>
      calls.filter((c) => c.verb === verb && c.resource === resource).length;
    // The dry run lists pods once; the deleting run once more for every batch, not per DanmEp.
    assert.is(n(dry, 'list', 'pods'), 1);
    assert.is(n(wet, 'list', 'pods'), 2, 'one fresh list of pods serves every batch');
    assert.is(n(wet, 'list', 'danmeps'), 2, 'one fresh list of DanmEps serves every batch');
    assert.is(n(wet, 'replace', 'danmnets'), 2, 'one bitmap write per network');
    assert.is(n(wet, 'delete', 'danmeps'), 20);
    assert.is(
      n(wet, 'get', 'danmeps'),
      0,
      'no DanmEp read one by one: the fresh list keeps their tombstones',
    );
    const dryApi = dry.filter((c) => c.resource !== 'leases' && c.resource !== 'configmaps').length;
    const wetApi = wet.filter((c) => c.resource !== 'leases' && c.resource !== 'configmaps').length;
    assert.ok(
      wetApi <= dryApi * 2 + 4 * 20 + 10 * 2,
      `requests: ${wetApi} <= dry run ${dryApi} x 2 + 4 per deletion + 10 per batch`,
    );
    for (const w of worlds) {
      const left = await bits(kube, ns, w.net);
      for (let i = 0; i < w.pods; i++)
        assert.is(left.includes(`${w.prefix}.${10 + i}`), i >= w.lost, `${w.net} .${10 + i}`);
    }
    const events = (await kube.listAll(EVENTS, { namespace: ns })).items.filter(
      (e) => (e as { reason?: string }).reason === 'DanmEndpointReclaimed',
    );
    assert.is(events.length, 2, 'one Event per network');
  });

  it('a pod asking for two interfaces on one network: eth1 in CNI ADD keeps its bit while eth0 has its DanmEp', async (t, kube) => {
    const ns = await t.namespace();
    await createNetwork(kube, ns, 'twice', '10.42.0.0/24', ['10.42.0.10', '10.42.0.11']);
    const pod = await createPod(
      kube,
      ns,
      'two-legs',
      'node-1',
      'twice',
      JSON.stringify([{ network: 'twice' }, { network: 'twice' }]),
    );
    await createEndpoint(kube, pod, 'twice', '10.42.0.10/24', 'eth0');
    // eth1's CNI ADD has set .11; its DanmEp is not written yet.
    const r = danmRunner(t.options, [ns], Date.now() + MIN);
    for (let i = 0; i < 3; i++) {
      assert.equal((await r.run()).deleted, [], `run ${i}`);
      r.now += 11 * MIN;
    }
    assert.ok((await bits(kube, ns, 'twice')).includes('10.42.0.11'), "eth1's address stays set");
    assert.ok(
      r.events('target.indeterminate').some((e) => /1 of its 2 DanmEps/.test(String(e.reason))),
      'the bit is indeterminate: the pod has 1 of its 2 DanmEps on the network',
    );
    await createEndpoint(kube, pod, 'twice', '10.42.0.11/24', 'eth1');
    assert.equal((await r.run()).deleted, []);
    assert.equal(await bits(kube, ns, 'twice'), ['10.42.0.0', '10.42.0.10', '10.42.0.11', '10.42.0.255']);
  });

  run();
}
