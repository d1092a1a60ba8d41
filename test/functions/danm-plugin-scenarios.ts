/**
 * danm-endpoints beside the DANM world as the real plugin (v4.3.0) writes it: the objects'
 * shape field for field, first-fit allocation, DEL freeing the bit before the DanmEp, ADDs
 * that time out and leave bits, and DANM deleting or changing objects while twopass acts.
 * Run on the real API server (danm-plugin.real.test.ts) and on the fake (.fake.test.ts).
 */
import * as assert from 'uvu/assert';
import { danmEndpoints } from '../../functions/danm-endpoints/index.ts';
import { MINUTE as MIN } from '../../shared/contract/index.ts';
import type { KubeHttpClient } from '../../shared/kube/client.ts';
import { type KubeObject, PODS } from '../../shared/kube/resources.ts';
import {
  allocated,
  createEndpoint,
  createNetwork,
  createPod,
  createPodObject,
  DANM_HOST,
  danmPlugin,
  forceDeletePod,
  R,
} from '../../shared/sandbox/scenarios/danm.ts';
import { FileTombstones } from '../../shared/state/tombstones.ts';
import { danmRunner } from '../helpers/danm.ts';
import { intercept } from '../helpers/intercept.ts';
import type { KubeTarget } from '../helpers/kube-target.ts';
import { parsed } from '../helpers/settings.ts';
import { targetSuite } from '../helpers/target-suite.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export function danmPluginScenarios(label: string, getTarget: () => Promise<KubeTarget | undefined>): void {
  const { it, run } = targetSuite(`danm-endpoints beside the DANM plugin's world (${label})`, getTarget);

  const bits = async (kube: KubeHttpClient, ns: string, net = 'test-net1') =>
    allocated((await kube.get(R.DanmNet, ns, net))!);
  const epOf = async (kube: KubeHttpClient, ep: KubeObject) =>
    (await kube.get(R.danmeps, ep.metadata.namespace, ep.metadata.name))?.metadata.uid === ep.metadata.uid;
  const pool = { allocation_pool: { start: '10.10.10.10', end: '10.10.10.254', lastIp: '' } };

  it('the sandbox writes a DanmEp and a network field for field as real DANM v4.3.0 does', async (t, kube) => {
    const ns = await t.namespace();
    await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', [], pool);
    const pod = await createPod(kube, ns, 'ss-cinfo-0', 'clive-alp-worker-03');
    const made = await danmPlugin.add(kube, pod, 'test-net1');
    const ep = (await kube.get(R.danmeps, ns, made.metadata.name))!;
    const spec = ep.spec as Record<string, unknown> & { Interface: Record<string, unknown> };
    assert.match(ep.metadata.name, UUID, 'named by a random UUID');
    assert.is(spec.EndpointID, ep.metadata.name, 'the name is spec.EndpointID');
    assert.equal(ep.metadata.labels, pod.metadata.labels, "the pod's labels, copied");
    assert.is(spec.Host, DANM_HOST, "the machine's hostname");
    assert.is.not(spec.Host, 'clive-alp-worker-03', "not the node's name");
    assert.match(String(spec.CID), /^[0-9a-f]{64}$/, 'a 64-hex sandbox id');
    assert.match(String(spec.netns), /^\/var\/run\/netns\/cni-/);
    assert.is(spec.Pod, 'ss-cinfo-0');
    assert.is(spec.PodUID, pod.metadata.uid);
    assert.is(spec.apiType, 'DanmNet');
    assert.is(spec.NetworkName, 'test-net1');
    assert.equal(spec.Interface, {
      Name: 'eth0',
      Address: '10.10.10.10/24',
      AddressIPv6: '',
      MacAddress: '',
      proutes: null,
      proutes6: null,
    });
    const net = (await kube.get(R.DanmNet, ns, 'test-net1'))!;
    const opts = (net.spec as { Options: Record<string, unknown> }).Options;
    assert.equal(opts.allocation_pool, {
      start: '10.10.10.10',
      end: '10.10.10.254',
      lastIp: '10.10.10.10/24',
    });
    assert.equal(opts.allocation_pool_v6, { cidr: '', start: '', end: '', lastIp: '' });
    assert.equal(await bits(kube, ns), ['10.10.10.0', '10.10.10.10', '10.10.10.255']);
    // first-fit: the next ADD takes .11; after a DEL of .10 (bit first), the next takes .10 again
    const second = await danmPlugin.add(kube, await createPod(kube, ns, 'ss-cinfo-1'), 'test-net1');
    assert.is((second.spec as { Interface: { Address: string } }).Interface.Address, '10.10.10.11/24');
    await danmPlugin.del(kube, made);
    const third = await danmPlugin.add(kube, await createPod(kube, ns, 'web-0'), 'test-net1');
    assert.is((third.spec as { Interface: { Address: string } }).Interface.Address, '10.10.10.10/24');
  });

  it('an address twopass frees is handed out again by first-fit at once: the restore of it is refused, and nothing is freed twice', async (t, kube) => {
    const ns = await t.namespace();
    await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', [], pool);
    const old = await createPod(kube, ns, 'ss-cinfo-0');
    const leaked = await danmPlugin.add(kube, old, 'test-net1'); // .10
    const live = await danmPlugin.add(kube, await createPod(kube, ns, 'ss-cinfo-1'), 'test-net1'); // .11
    await forceDeletePod(kube, ns, 'ss-cinfo-0'); // the node is lost: no DEL ever comes
    const r = danmRunner(t.options, [ns], Date.now() + MIN);
    await r.run();
    r.now += 6 * MIN;
    const res = await r.run();
    assert.equal(res.deleted, [leaked.metadata.uid], JSON.stringify(r.events('delete.failed')));
    assert.equal(await bits(kube, ns), ['10.10.10.0', '10.10.10.11', '10.10.10.255']);
    // the same second: the re-created ss-cinfo-0 asks, and DANM hands out the first free address
    const again = await createPod(kube, ns, 'ss-cinfo-0');
    const taken = await danmPlugin.add(kube, again, 'test-net1');
    assert.is((taken.spec as { Interface: { Address: string } }).Interface.Address, '10.10.10.10/24');
    const [tomb] = await new FileTombstones(r.dir, () => r.now).list('danm-endpoints');
    assert.is(tomb?.key, leaked.metadata.uid);
    const restored = await danmEndpoints.restore(kube, kube, tomb!, {
      now: r.now,
      signal: AbortSignal.timeout(30_000),
      settings: parsed(danmEndpoints, { namespaces: [ns] }),
      note: () => {},
      apply: true,
    });
    assert.is(restored.outcome, 'refused', JSON.stringify(restored));
    assert.match(JSON.stringify(restored), /10\.10\.10\.10 (is allocated again|is held by DanmEp)/);
    assert.is(
      await kube.get(R.danmeps, ns, leaked.metadata.name),
      undefined,
      'the old DanmEp is not made again',
    );
    // nothing freed twice: the runs that follow keep .10 for the pod that has it now
    for (let i = 0; i < 3; i++) {
      r.now += 11 * MIN;
      assert.equal((await r.run()).deleted, []);
    }
    assert.ok(await epOf(kube, taken));
    assert.ok(await epOf(kube, live));
    assert.equal(await bits(kube, ns), ['10.10.10.0', '10.10.10.10', '10.10.10.11', '10.10.10.255']);
  });

  it("a DanmEp that DANM's own late DEL removes while twopass acts is a 404, not twopass's deletion: its address, handed out again, is not freed", async (t, kube) => {
    const ns = await t.namespace();
    await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', [], pool);
    const orphan = await danmPlugin.add(kube, await createPod(kube, ns, 'gone-0'), 'test-net1'); // .10
    await forceDeletePod(kube, ns, 'gone-0');
    const r = danmRunner(t.options, [ns], Date.now() + MIN);
    await r.run();
    r.now += 6 * MIN;
    let newcomer: KubeObject | undefined;
    r.intercept = (k) =>
      intercept(k, async (call, next) => {
        if (call.verb === 'delete' && call.resource === 'danmeps' && !newcomer) {
          // the kubelet's DEL comes late (the node is back): bit first, then the DanmEp; a new pod takes .10
          await danmPlugin.del(kube, orphan);
          newcomer = await danmPlugin.add(kube, await createPod(kube, ns, 'new-0'), 'test-net1');
        }
        return next();
      });
    const res = await r.run();
    assert.ok(newcomer, 'the DEL ran during the act phase');
    assert.equal(res.deleted, [], 'a 404 is not a deletion of twopass');
    assert.equal(res.alreadyGone, [orphan.metadata.uid]);
    assert.ok(
      r.lines.some(
        (l) =>
          l.key === orphan.metadata.uid &&
          l.event === 'resource.gone' &&
          /already gone/.test(String(l.detail)),
      ),
      'the output says the DanmEp was already gone',
    );
    assert.is((newcomer!.spec as { Interface: { Address: string } }).Interface.Address, '10.10.10.10/24');
    assert.ok(await epOf(kube, newcomer!));
    assert.ok((await bits(kube, ns)).includes('10.10.10.10'), "the new pod's address stays set");
    r.intercept = undefined as never;
    r.now += 11 * MIN;
    assert.equal((await r.run()).deleted, [], 'nothing left to reclaim, nothing freed');
    assert.ok((await bits(kube, ns)).includes('10.10.10.10'));
  });

  it("a network DANM writes between twopass's read and its write is a conflict: twopass reads again and clears only its own bit", async (t, kube) => {
    const ns = await t.namespace();
    await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', [], pool);
    const orphan = await danmPlugin.add(kube, await createPod(kube, ns, 'gone-0'), 'test-net1'); // .10
    await danmPlugin.add(kube, await createPod(kube, ns, 'live-0'), 'test-net1'); // .11
    await forceDeletePod(kube, ns, 'gone-0');
    const r = danmRunner(t.options, [ns], Date.now() + MIN);
    await r.run();
    r.now += 6 * MIN;
    let raced = false;
    r.intercept = (k) =>
      intercept(k, async (call, next) => {
        if (call.verb === 'replace' && call.resource === 'danmnets' && !raced) {
          raced = true;
          // an ADD lands first: its full PUT moves the resourceVersion twopass read
          await danmPlugin.add(kube, await createPod(kube, ns, 'new-0'), 'test-net1');
        }
        return next();
      });
    const res = await r.run();
    assert.ok(raced);
    assert.equal(res.deleted, [orphan.metadata.uid], JSON.stringify(r.events('delete.failed')));
    assert.equal(
      await bits(kube, ns),
      ['10.10.10.0', '10.10.10.11', '10.10.10.12', '10.10.10.255'],
      '.10 cleared, the ADD that raced it (.12) kept',
    );
  });

  it('many bits leaked by ADDs that timed out (bit set, no DanmEp, the retry on a new address) go in one run, one write', async (t, kube) => {
    const ns = await t.namespace();
    await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', [], pool);
    const pods: KubeObject[] = [];
    for (let i = 0; i < 12; i++) {
      const pod = await createPod(kube, ns, `app-${i}`);
      await danmPlugin.allocate(kube, ns, 'test-net1'); // the ADD the kubelet gave up on
      pods.push(pod);
    }
    // the kubelet's DEL finds no DanmEp by sandbox id and frees nothing; the retried ADDs succeed
    const eps: KubeObject[] = [];
    for (const pod of pods) eps.push(await danmPlugin.add(kube, pod, 'test-net1'));
    const held = eps.map(
      (e) => (e.spec as { Interface: { Address: string } }).Interface.Address.split('/')[0]!,
    );
    assert.equal(held[0], '10.10.10.22', 'the retries come after the twelve leaked bits');
    const r = danmRunner(t.options, [ns], Date.now() + MIN);
    let writes = 0;
    r.intercept = (k) =>
      intercept(k, (call, next) => {
        if (call.verb === 'replace' && call.resource === 'danmnets') writes++;
        return next();
      });
    await r.run();
    r.now += 11 * MIN;
    const res = await r.run();
    assert.is(res.deleted.length, 12, JSON.stringify(r.events('delete.failed')));
    assert.is(writes, 1, 'one write of the network');
    assert.equal(await bits(kube, ns), ['10.10.10.0', ...held, '10.10.10.255']);
    for (const ep of eps) assert.ok(await epOf(kube, ep));
  });

  it("nothing reads a DanmEp's Host or labels as identity or location: same labels on the old and the new DanmEp, a Host that is no node's name", async (t, kube) => {
    const ns = await t.namespace();
    await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', [], pool);
    const labels = { app: 'ss-cinfo', 'statefulset.kubernetes.io/pod-name': 'ss-cinfo-0' };
    const mk = (nodeName: string) =>
      createPodObject(kube, ns, 'ss-cinfo-0', {
        labels,
        annotations: { 'danm.k8s.io/interfaces': JSON.stringify([{ network: 'test-net1', ip: 'dynamic' }]) },
        nodeName,
      });
    const old = await danmPlugin.add(kube, await mk('clive-alp-worker-03'), 'test-net1');
    await forceDeletePod(kube, ns, 'ss-cinfo-0');
    const pod = await mk('clive-alp-worker-02');
    const fresh = await danmPlugin.add(kube, pod, 'test-net1');
    assert.equal(old.metadata.labels, fresh.metadata.labels, 'the same labels, as DANM copies them');
    assert.is((old.spec as { Host: string }).Host, (fresh.spec as { Host: string }).Host, 'the same Host');
    // no node is named as the Host either DanmEp carries: a Host read as a location would call both unplaced
    const r = danmRunner(t.options, [ns], Date.now() + MIN);
    await r.run();
    r.now += 6 * MIN;
    const res = await r.run();
    assert.equal(
      res.deleted,
      [old.metadata.uid],
      'the old one goes: its pod UID is gone, whatever its labels',
    );
    assert.ok(await epOf(kube, fresh), 'the new one stays: its pod UID is live, whatever its Host');
    assert.ok(await kube.get(PODS, ns, 'ss-cinfo-0'));
    assert.equal(await bits(kube, ns), ['10.10.10.0', '10.10.10.11', '10.10.10.255']);
  });

  it('a pool exhausted by leaked bits: a pod created after the last allocation waits for an address (its ADD writes nothing); the leaks go, it gets one', async (t, kube) => {
    const ns = await t.namespace();
    // a small pool: .10-.13, the .0 network and .255 broadcast reserved
    await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', [], {
      allocation_pool: { start: '10.10.10.10', end: '10.10.10.13', lastIp: '' },
    });
    const live = await danmPlugin.add(kube, await createPod(kube, ns, 'app-0'), 'test-net1'); // .10
    for (let i = 0; i < 3; i++) await danmPlugin.allocate(kube, ns, 'test-net1'); // ADDs that timed out: .11-.13
    // the servers' clocks agree here: a skew of 1 s, and the pod comes 2.5 s after the last write
    await new Promise((r) => setTimeout(r, 2500));
    const waiting = await createPod(kube, ns, 'app-1');
    const refused = await danmPlugin.add(kube, waiting, 'test-net1').then(
      () => 'added',
      (e: Error) => e.message,
    );
    assert.match(refused, /exhausted/, 'DANM refuses the ADD and writes nothing');
    const r = danmRunner(t.options, [ns], Date.now() + MIN, {
      'danm-endpoints': { settings: { serverSkewSeconds: 1 } },
    });
    const first = await r.run();
    assert.equal(first.deleted, []);
    assert.not.ok(
      r.events('target.indeterminate').some((e) => /app-1 is being set up/.test(String(e.reason))),
      'the waiting pod holds back nothing: it was created after the network was last written',
    );
    r.now += 11 * MIN;
    const res = await r.run();
    assert.is(res.deleted.length, 3, JSON.stringify(r.events('target.indeterminate')));
    assert.equal(await bits(kube, ns), ['10.10.10.0', '10.10.10.10', '10.10.10.255']);
    // the kubelet's next try: the first free address
    const got = await danmPlugin.add(kube, waiting, 'test-net1');
    assert.is((got.spec as { Interface: { Address: string } }).Interface.Address, '10.10.10.11/24');
    assert.ok(await epOf(kube, live));
  });

  it("a pod created before the network's last write (the server stamps the ADD's write) still protects the unheld bits: its ADD may have set one", async (t, kube) => {
    const ns = await t.namespace();
    await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', [], pool);
    // seconds apart, so that only the server's stamp of the ADD's write can keep the pod protecting
    await new Promise((r) => setTimeout(r, 2500));
    const pod = await createPod(kube, ns, 'app-0');
    await new Promise((r) => setTimeout(r, 2500));
    await danmPlugin.allocate(kube, ns, 'test-net1'); // its ADD in flight: the bit, no DanmEp yet
    const r = danmRunner(t.options, [ns], Date.now() + MIN, {
      'danm-endpoints': { settings: { serverSkewSeconds: 1 } },
    });
    await r.run();
    r.now += 11 * MIN;
    assert.equal((await r.run()).deleted, []);
    assert.ok(
      r.events('target.indeterminate').some((e) => /app-0 is being set up/.test(String(e.reason))),
      'indeterminate, and says why',
    );
    assert.ok((await bits(kube, ns)).includes('10.10.10.10'));
    await createEndpointFor(kube, pod);
  });

  run();
}

/** The ADD in flight finishes: the DanmEp on the address it set. */
async function createEndpointFor(kube: KubeHttpClient, pod: KubeObject): Promise<void> {
  await createEndpoint(kube, pod, 'test-net1', '10.10.10.10/24');
}
