/**
 * Law 1 through a fault-injecting proxy (test/helpers/fault-proxy.ts), in front of the
 * real kube-apiserver (proof.real.test.ts) and the fake (proof.fake.test.ts): every
 * short or malformed list ends the run with exit 3, nothing deleted and the state as
 * it was; a GET that does not return the object is never read as "absent"; a write
 * answered "success" that did not happen is caught by a read-back.
 */
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as assert from 'uvu/assert';
import { danmEndpoints } from '../../functions/danm-endpoints/index.ts';
import { whereaboutsIps } from '../../functions/whereabouts-ips/index.ts';
import { resolveConfig } from '../../shared/config.ts';
import type { AnyFunction, FunctionContext } from '../../shared/contract/index.ts';
import { MINUTE as MIN } from '../../shared/contract/index.ts';
import type { Target } from '../../shared/engine/types.ts';
import { KubeHttpClient } from '../../shared/kube/client.ts';
import type { KubeClient } from '../../shared/kube/ports.ts';
import { type KubeObject, PODS } from '../../shared/kube/resources.ts';
import { EXIT } from '../../shared/runtime/errors.ts';
import { evidenceFloorOf } from '../../shared/runtime/phases.ts';
import type { RunResult } from '../../shared/runtime/run.ts';
import { removeBatch } from '../../shared/runtime/sequence.ts';
import { runFunction } from '../../shared/runtime/wire.ts';
import * as danm from '../../shared/sandbox/scenarios/danm.ts';
import * as wb from '../../shared/sandbox/scenarios/whereabouts.ts';
import { FaultProxy, type ProxyFaultKind } from '../helpers/fault-proxy.ts';
import type { KubeTarget } from '../helpers/kube-target.ts';
import { captureLog } from '../helpers/memfn.ts';
import { parsed } from '../helpers/settings.ts';
import { targetSuite } from '../helpers/target-suite.ts';
import { testTime } from '../helpers/time.ts';

/** Faults on a list page that must make the snapshot incomplete. */
const LIST_FAULTS: { kind: ProxyFaultKind; page: number; metadataOnly: boolean }[] = [
  { kind: 'drop-continue', page: 1, metadataOnly: true },
  { kind: 'empty-items', page: 2, metadataOnly: true },
  { kind: 'previous-page', page: 2, metadataOnly: true },
  { kind: 'other-rv', page: 2, metadataOnly: true },
  { kind: 'no-items', page: 2, metadataOnly: true },
  { kind: 'empty-body', page: 1, metadataOnly: true },
  { kind: 'html', page: 2, metadataOnly: true },
  { kind: 'truncated', page: 2, metadataOnly: true },
  // a metadata-only page names no resource: another resource's list is caught on full lists
  { kind: 'other-resource', page: 1, metadataOnly: false },
  { kind: 'previous-page', page: 2, metadataOnly: false },
  { kind: 'drop-continue', page: 1, metadataOnly: false },
];

type Rig = {
  proxy: FaultProxy;
  client: KubeHttpClient;
  run: (apply?: boolean) => Promise<RunResult & { lines: Record<string, unknown>[] }>;
  state: () => string;
  now: { t: number };
};

function rig(
  t: KubeTarget,
  fn: AnyFunction,
  proxy: FaultProxy,
  ns: string,
  state?: string,
  pageSize = 2,
  intercept?: (kube: KubeClient) => KubeClient,
): Rig {
  const dir = mkdtempSync(join(tmpdir(), 'twopass-proof-'));
  const now = { t: Date.now() + MIN };
  const options = { ...t.options, server: proxy.url, tls: {}, time: testTime() };
  return {
    proxy,
    client: new KubeHttpClient(options),
    now,
    state: () => {
      try {
        return readFileSync(join(dir, `${fn.name}.json`), 'utf8');
      } catch {
        return '';
      }
    },
    run: async (apply = true) => {
      const cap = captureLog(() => now.t);
      const cfg = resolveConfig(
        {
          pageSize,
          functions: { [fn.name]: { maxDeletionPercent: 100, settings: { namespaces: [ns] } } },
        },
        'proof',
        { state: state ?? `file:${dir}` },
      );
      const r = await runFunction(
        fn,
        cfg,
        {
          time: testTime(() => now.t),
          log: cap.log,
          kubeOptions: options,
          ...(intercept ? { intercept } : {}),
        },
        { apply },
      );
      return { ...r, lines: cap.lines };
    },
  };
}

const ctxFor = (now: number): FunctionContext => ({
  now,
  signal: new AbortController().signal,
  settings: parsed(danmEndpoints),
  note: () => {},
});

export function proofScenarios(label: string, getTarget: () => Promise<KubeTarget | undefined>): void {
  const { it, run } = targetSuite(`law 1 through a fault proxy (${label})`, getTarget);

  const withProxy = async (t: KubeTarget, body: (p: FaultProxy) => Promise<void>) => {
    const p = await new FaultProxy(t.options.server).start();
    try {
      await body(p);
    } finally {
      await p.stop();
    }
  };

  /** A DANM world: three live pods with DanmEps, one orphaned DanmEp; more than one page of each list. */
  const danmWorld = async (kube: KubeHttpClient, ns: string) => {
    await danm.createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', [
      '10.10.10.5',
      '10.10.10.6',
      '10.10.10.7',
      '10.10.10.9',
    ]);
    const live: KubeObject[] = [];
    for (const [i, ip] of ['10.10.10.5', '10.10.10.6', '10.10.10.7'].entries())
      live.push(
        await danm.createEndpoint(kube, await danm.createPod(kube, ns, `live-${i}`), 'test-net1', `${ip}/24`),
      );
    const orphan = await danm.createEndpoint(
      kube,
      await danm.createPod(kube, ns, 'gone-0'),
      'test-net1',
      '10.10.10.9/24',
    );
    await danm.forceDeletePod(kube, ns, 'gone-0');
    return { live, orphan };
  };

  for (const f of LIST_FAULTS)
    it(`danm-endpoints: ${f.kind} on page ${f.page} of the ${f.metadataOnly ? 'pods (metadata-only)' : 'DanmEps'} list: exit 3, nothing deleted, state as it was`, async (t, kube) => {
      const ns = await t.namespace();
      const w = await danmWorld(kube, ns);
      await withProxy(t, async (proxy) => {
        const r = rig(t, danmEndpoints, proxy, ns);
        assert.is((await r.run()).exitCode, EXIT.ok, 'first observation');
        const before = r.state();
        r.now.t += 6 * MIN;
        proxy.add({
          kind: f.kind,
          method: 'GET',
          path: f.metadataOnly ? /^\/api\/v1\/pods\?/ : /^\/apis\/danm\.k8s\.io\/v1\/danmeps\?/,
          nth: f.page,
          // a read is retried: an answer that is broken on the wire stays broken here
          times: f.kind === 'html' || f.kind === 'truncated' ? 10 : 1,
        });
        const res = await r.run();
        assert.is(proxy.fired(), 1, 'the fault happened');
        assert.is(res.exitCode, EXIT.incomplete, `exit 3 (${JSON.stringify(res.error)})`);
        assert.equal(res.deleted, []);
        assert.is(r.state(), before, 'the stored state did not advance');
        const aborted = res.lines.find((l) => l.event === 'run.aborted');
        assert.match(
          String(aborted?.reason),
          /list incomplete|BadBody|not JSON|truncated|socket|closed|terminated/i,
        );
        assert.ok(
          await kube.get(danm.R.danmeps, ns, w.orphan.metadata.name),
          'the orphan waits for a complete snapshot',
        );
        await r.client.close();
      });
    });

  it("danm-endpoints: the act phase's fresh pods list answered empty (a complete-looking list, no pods) deletes nothing (held to the snapshot's count)", async (t, kube) => {
    const ns = await t.namespace();
    const w = await danmWorld(kube, ns);
    await withProxy(t, async (proxy) => {
      const r = rig(t, danmEndpoints, proxy, ns, undefined, 500);
      assert.is((await r.run()).exitCode, EXIT.ok, 'the first run records the orphan');
      r.now.t += 6 * MIN;
      // the deleting run's snapshot lists pods first (request 1); its act phase lists them again
      proxy.add({ kind: 'empty-items', method: 'GET', path: /^\/api\/v1\/pods\?/, nth: 2 });
      const res = await r.run();
      assert.is(proxy.fired(), 1, 'the fault happened, in the act phase');
      assert.ok(
        res.lines.some((l) => l.event === 'candidate.confirmed'),
        'the snapshot confirmed the orphan',
      );
      assert.equal(
        res.deleted,
        [],
        JSON.stringify(res.lines.filter((l) => String(l.event).startsWith('delete'))),
      );
      const failed = res.lines.find((l) => l.event === 'delete.failed');
      assert.match(
        String(failed?.error),
        /fresh pods: list incomplete: .* now against .* in the snapshot that decided/,
      );
      assert.ok(await kube.get(danm.R.danmeps, ns, w.orphan.metadata.name), 'the orphan waits');
      await r.client.close();
    });
  });

  it('danm-endpoints: an empty discovery answer ends the run (exit 3) with a message, not a TypeError', async (t, kube) => {
    const ns = await t.namespace();
    await danmWorld(kube, ns);
    await withProxy(t, async (proxy) => {
      const r = rig(t, danmEndpoints, proxy, ns);
      proxy.add({ kind: 'empty-body', method: 'GET', path: /^\/apis\/danm\.k8s\.io\/v1$/ });
      const res = await r.run();
      assert.is(proxy.fired(), 1);
      assert.is(res.exitCode, EXIT.incomplete);
      const reason = String(res.lines.find((l) => l.event === 'run.aborted')?.reason);
      assert.not.match(reason, /Cannot read properties/);
      assert.match(reason, /discover danm\.k8s\.io\/v1/);
      await r.client.close();
    });
  });

  // A complete-looking empty list is caught by its count only; another resource's
  // metadata-only list too, where it has fewer items than the pods (the fake's few
  // ConfigMaps; on a real server that depends on the cluster, so it is not asserted there).
  const freshFaults: ProxyFaultKind[] = ['empty-body', 'bare-404', 'html', 'empty-items'];
  if (label === 'fake API server') freshFaults.push('other-resource');
  for (const kind of freshFaults)
    it(`danm-endpoints re-check: the fresh list of pods answered with ${kind} is never "the pod is gone"`, async (t, kube) => {
      const ns = await t.namespace();
      const w = await danmWorld(kube, ns);
      await withProxy(t, async (proxy) => {
        const r = rig(t, danmEndpoints, proxy, ns);
        const obs = await danmEndpoints.observe(r.client, {
          ...ctxFor(r.now.t),
          settings: parsed(danmEndpoints, { namespaces: [ns] }),
        });
        const seen = obs.targets.find((x: Target) => x.key === w.live[0]!.metadata.uid)!;
        assert.ok(seen, 'the live DanmEp is a target');
        assert.is(seen.data, undefined, 'a target in use carries no removal data');
        // The removal data a snapshot that missed the pod would have given it.
        const ep = w.live[0]!;
        const spec = ep.spec as {
          Pod: string;
          PodUID: string;
          NetworkName: string;
          Interface: { Address: string };
        };
        const target: Target = {
          ...seen,
          data: {
            group: 'danm.k8s.io',
            namespace: ns,
            name: ep.metadata.name,
            uid: ep.metadata.uid,
            rv: ep.metadata.resourceVersion,
            pod: spec.Pod,
            podUID: spec.PodUID,
            networkType: 'DanmNet',
            network: spec.NetworkName,
            v4: spec.Interface.Address,
          },
        };
        // the batch's fresh evidence: the list of pods, answered malformed
        proxy.add({ kind, method: 'GET', path: /^\/api\/v1\/pods(\?|$)/, times: 10 });
        const written: string[] = [];
        // as the run hands it to the act phase: the fresh evidence held to the snapshot's counts
        const snapshot = { id: 's', function: danmEndpoints.name, takenAt: r.now.t, ...obs };
        const results = await removeBatch(danmEndpoints, r.client, r.client, [target], {
          ...ctxFor(r.now.t),
          settings: parsed(danmEndpoints, { namespaces: [ns] }),
          tombstone: async (entries) => void written.push(...entries.map((e) => e.key)),
          evidenceFloor: evidenceFloorOf(snapshot, 30),
        }).catch((err: Error) => [
          { key: target.key, outcome: 'failed' as const, error: `threw: ${err.message}` },
        ]);
        assert.ok(proxy.fired() >= 1, 'the fault happened');
        assert.is.not(results[0]?.outcome, 'deleted', JSON.stringify(results));
        assert.is.not(results[0]?.outcome, 'gone', JSON.stringify(results));
        assert.equal(written, [], 'no tombstone: the re-check never judged it unused');
        assert.ok(await kube.get(danm.R.danmeps, ns, ep.metadata.name), 'the live DanmEp is still there');
        await r.client.close();
      });
    });

  /** danm-endpoints observes its world once, then runs again with a write answered "success" that never happened. */
  const faked =
    (method: 'PUT' | 'DELETE', path: (ns: string, orphan: KubeObject) => RegExp) =>
    async (
      t: KubeTarget,
      kube: KubeHttpClient,
      check: (
        res: RunResult & { lines: Record<string, unknown>[] },
        ns: string,
        orphan: KubeObject,
      ) => Promise<void>,
    ) => {
      const ns = await t.namespace();
      const w = await danmWorld(kube, ns);
      await withProxy(t, async (proxy) => {
        const r = rig(t, danmEndpoints, proxy, ns);
        await r.run();
        r.now.t += 6 * MIN;
        proxy.add({ kind: 'fake-success', method, path: path(ns, w.orphan) });
        const res = await r.run();
        assert.is(proxy.fired(), 1, 'the fault happened');
        await check(res, ns, w.orphan);
        await r.client.close();
      });
    };

  it('danm-endpoints: a bitmap update answered "success" that never happened is not reported cleared', (t, kube) =>
    faked('PUT', (ns) => new RegExp(`/namespaces/${ns}/danmnets/test-net1$`))(
      t,
      kube,
      async (res, ns, orphan) => {
        assert.equal(res.deleted, [orphan.metadata.uid], 'the DanmEp itself was deleted');
        const detail = String(res.lines.find((l) => l.event === 'resource.deleted')?.detail);
        assert.not.match(detail, /10\.10\.10\.9: cleared/);
        assert.match(detail, /read-back/);
        assert.ok(danm.allocated((await kube.get(danm.R.DanmNet, ns, 'test-net1'))!).includes('10.10.10.9'));
      },
    ));

  it('danm-endpoints: a bitmap write answered "success" that never happened, while another writer moved the network, is "left set"', async (t, kube) => {
    const ns = await t.namespace();
    const w = await danmWorld(kube, ns);
    await withProxy(t, async (proxy) => {
      const r = rig(t, danmEndpoints, proxy, ns);
      await r.run();
      r.now.t += 6 * MIN;
      // The write is answered as if done but never reaches the server, and meanwhile another
      // writer (a CNI ADD) changes the network: its resourceVersion moves, the bit stays set.
      proxy.add({
        kind: 'fake-success',
        method: 'PUT',
        path: new RegExp(`/namespaces/${ns}/danmnets/test-net1$`),
        onFire: () => danm.setBits(kube, ns, 'test-net1', ['10.10.10.30']),
      });
      const res = await r.run();
      assert.is(proxy.fired(), 1);
      assert.equal(res.deleted, [w.orphan.metadata.uid], 'the DanmEp itself was deleted');
      const detail = String(res.lines.find((l) => l.event === 'resource.deleted')?.detail);
      assert.not.match(detail, /10\.10\.10\.9: cleared/, 'never "cleared" while the bit is set');
      assert.match(detail, /10\.10\.10\.9: left set/);
      assert.ok(danm.allocated((await kube.get(danm.R.DanmNet, ns, 'test-net1'))!).includes('10.10.10.9'));
      await r.client.close();
    });
  });

  it('danm-endpoints: a DELETE answered "success" that never happened is a failed deletion (exit 1)', (t, kube) =>
    faked('DELETE', (_ns, orphan) => new RegExp(`/danmeps/${orphan.metadata.name}$`))(
      t,
      kube,
      async (res, ns, orphan) => {
        assert.is(res.exitCode, EXIT.error);
        assert.equal(res.deleted, []);
        assert.ok(await kube.get(danm.R.danmeps, ns, orphan.metadata.name));
      },
    ));

  it("danm-endpoints: writes whose answers show them done are not read back (a DELETE naming the DanmEp's UID, the bitmap's PUT at a new resourceVersion)", async (t, kube) => {
    const ns = await t.namespace();
    const w = await danmWorld(kube, ns);
    await withProxy(t, async (proxy) => {
      const r = rig(t, danmEndpoints, proxy, ns);
      await r.run();
      r.now.t += 6 * MIN;
      const at = proxy.log.length;
      const res = await r.run();
      assert.equal(res.deleted, [w.orphan.metadata.uid]);
      const path = new RegExp(`/danmeps/${w.orphan.metadata.name}(\\?|$)`);
      const seen = proxy.log.slice(at).filter((l) => path.test(l.path));
      // the DELETE alone: its tombstone is the object as the fresh list gave it, and the
      // server's answer named the UID (nothing read after)
      assert.equal(
        seen.map((l) => l.method),
        ['DELETE'],
        JSON.stringify(seen),
      );
      // and the bitmap's write is read back from its own answer (a new resourceVersion)
      const net = proxy.log.slice(at).filter((l) => /\/danmnets\/test-net1(\?|$)/.test(l.path));
      assert.equal(
        net.map((l) => l.method),
        ['PUT'],
        JSON.stringify(net),
      );
      assert.not.ok(
        danm.allocated((await kube.get(danm.R.DanmNet, ns, 'test-net1'))!).includes('10.10.10.9'),
      );
      await r.client.close();
    });
    // (a proxy's bare Success, or the network answered as it was, is read back: the tests above)
  });

  // Writes of the run's own bookkeeping: a success that never happened must not let the run act.
  for (const w of [
    {
      what: 'ConfigMap state: a save answered "success" that never happened aborts the run before any deletion',
      object: 'configmaps',
      exit: EXIT.incomplete,
    },
    {
      what: 'Lease: an acquisition answered "success" that never happened is not a lock (exit 5, nothing deleted)',
      object: 'leases',
      exit: EXIT.locked,
    },
  ])
    it(w.what, async (t, kube) => {
      const ns = await t.namespace();
      const world = await danmWorld(kube, ns);
      await withProxy(t, async (proxy) => {
        const r = rig(t, danmEndpoints, proxy, ns, `configmap:${ns}`);
        assert.is((await r.run()).exitCode, EXIT.ok);
        r.now.t += 6 * MIN;
        proxy.add({
          kind: 'fake-success',
          method: 'PUT',
          path: new RegExp(`/namespaces/${ns}/${w.object}/twopass-danm-endpoints$`),
        });
        const res = await r.run();
        assert.is(proxy.fired(), 1);
        assert.is(res.exitCode, w.exit);
        const why = res.lines.find((l) => l.event === 'run.aborted')?.reason;
        assert.match(String(why), /read-back/);
        assert.ok(await kube.get(danm.R.danmeps, ns, world.orphan.metadata.name), 'nothing deleted');
        await r.client.close();
      });
    });

  /** A whereabouts world: live pods holding wb.allocations, and one allocation of a pod that is gone. */
  const wbWorld = async (kube: KubeHttpClient, ns: string) => {
    const ids = [wb.containerId(), wb.containerId(), wb.containerId(), wb.containerId()];
    for (const [i, ip] of ['10.40.0.2', '10.40.0.3', '10.40.0.4'].entries())
      await wb.createPodWithStatus(kube, ns, `live-${i}`, [ip]);
    await wb.createPool(kube, ns, '10.40.0.0-24', '10.40.0.0/24', {
      '10.40.0.2': { id: ids[0]!, podref: `${ns}/live-0` },
      '10.40.0.3': { id: ids[1]!, podref: `${ns}/live-1` },
      '10.40.0.4': { id: ids[2]!, podref: `${ns}/live-2` },
      '10.40.0.9': { id: ids[3]!, podref: `${ns}/gone-0` },
    });
  };

  for (const kind of ['drop-continue', 'previous-page', 'empty-items'] as const)
    it(`whereabouts-ips: ${kind} on the pods list: exit 3, nothing deleted, state as it was`, async (t, kube) => {
      const ns = await t.namespace();
      await wbWorld(kube, ns);
      await withProxy(t, async (proxy) => {
        const r = rig(t, whereaboutsIps, proxy, ns);
        assert.is((await r.run()).exitCode, EXIT.ok);
        const before = r.state();
        r.now.t += 6 * MIN;
        proxy.add({ kind, method: 'GET', path: /\/pods\?/, nth: kind === 'drop-continue' ? 1 : 2 });
        const res = await r.run();
        assert.is(proxy.fired(), 1);
        assert.is(res.exitCode, EXIT.incomplete);
        assert.is(r.state(), before);
        assert.is(Object.keys(await wb.allocations(kube, ns, '10.40.0.0-24')).length, 4);
        await r.client.close();
      });
    });

  it('whereabouts-ips: the IPPool patch is read back from its own answer (the pool at a new resourceVersion)', async (t, kube) => {
    const ns = await t.namespace();
    await wbWorld(kube, ns);
    await withProxy(t, async (proxy) => {
      const r = rig(t, whereaboutsIps, proxy, ns);
      await r.run();
      r.now.t += 6 * MIN;
      const at = proxy.log.length;
      const res = await r.run();
      assert.is(res.deleted.length, 1);
      const pool = proxy.log.slice(at).filter((l) => /\/ippools\/10\.40\.0\.0-24(\?|$)/.test(l.path));
      assert.is(pool.at(-1)?.method, 'PATCH', JSON.stringify(pool));
      assert.is(pool.filter((l) => l.method === 'PATCH').length, 1);
      assert.is(Object.keys(await wb.allocations(kube, ns, '10.40.0.0-24')).length, 3);
      await r.client.close();
    });
  });

  it('whereabouts-ips: an IPPool patch answered "success" that never happened is a failed deletion', async (t, kube) => {
    const ns = await t.namespace();
    await wbWorld(kube, ns);
    await withProxy(t, async (proxy) => {
      const r = rig(t, whereaboutsIps, proxy, ns);
      await r.run();
      r.now.t += 6 * MIN;
      proxy.add({ kind: 'fake-success', method: 'PATCH', path: /\/ippools\/10\.40\.0\.0-24$/ });
      const res = await r.run();
      assert.is(proxy.fired(), 1);
      assert.equal(res.deleted, []);
      assert.ok(res.failed.length + res.skipped.length > 0);
      assert.is(Object.keys(await wb.allocations(kube, ns, '10.40.0.0-24')).length, 4);
      await r.client.close();
    });
  });

  // ---- lists proven fresh, and outcomes told as they happened ----

  it('whereabouts-ips: a stale pods list (replayed, self-consistent) is refused: exit 3, nothing deleted, state as it was', async (t, kube) => {
    const ns = await t.namespace();
    await wbWorld(kube, ns);
    await withProxy(t, async (proxy) => {
      // One page per list, so that the replayed answer is a whole list.
      const r = rig(t, whereaboutsIps, proxy, ns, undefined, 5000);
      assert.is((await r.run()).exitCode, EXIT.ok, 'the proxy records this pods list');
      // New live pods take addresses of the pool after the recorded list.
      for (let i = 0; i < 3; i++) {
        const ip = `10.40.0.${20 + i}`;
        await wb.createPodWithStatus(kube, ns, `new-${i}`, [ip]);
        await wb.allocate(kube, ns, '10.40.0.0-24', '10.40.0.0/24', ip, {
          id: wb.containerId(),
          podref: `${ns}/new-${i}`,
        });
      }
      const before = r.state();
      r.now.t += 6 * MIN;
      proxy.add({ kind: 'replay', method: 'GET', path: /^\/api\/v1\/pods\?/, times: 10 });
      const res = await r.run();
      assert.ok(proxy.fired() > 0, 'the stale list was served');
      assert.is(res.exitCode, EXIT.incomplete, `exit 3 (${res.error})`);
      assert.match(String(res.lines.find((l) => l.event === 'run.aborted')?.reason), /stale/);
      assert.is(r.state(), before, 'the stored state did not advance');
      assert.is(Object.keys(await wb.allocations(kube, ns, '10.40.0.0-24')).length, 7, 'nothing deleted');
      await r.client.close();
    });
  });

  /**
   * Pool 10.N.0.0-24 with 55 orphans (more than a twentieth of the pods, more than one page's
   * worth of GETs: the batch re-checks on one shared pods list) and one live pod.
   */
  const sharedListWorld = async (kube: KubeHttpClient, ns: string, n: number) => {
    const orphans: Record<string, { id: string; podref: string }> = {};
    for (let i = 0; i < 55; i++)
      orphans[`10.${n}.0.${10 + i}`] = { id: wb.containerId(), podref: `${ns}/gone-${i}` };
    await wb.createPool(kube, ns, `10.${n}.0.0-24`, `10.${n}.0.0/24`, orphans);
    await wb.createPodWithStatus(kube, ns, 'live-0', [`10.${n}.0.200`]);
  };

  it("whereabouts-ips: the act phase's shared pods list served stale (older than the snapshot) is refused; nothing removed", async (t, kube) => {
    const ns = await t.namespace();
    await sharedListWorld(kube, ns, 41);
    await withProxy(t, async (proxy) => {
      const r = rig(t, whereaboutsIps, proxy, ns, undefined, 5000);
      // the proxy keeps this run's pods list (one page) as its first answer ...
      assert.is((await r.run()).exitCode, EXIT.ok);
      // ... the cluster moves on (the next snapshot is newer) ...
      await wb.createPodWithStatus(kube, ns, 'later-0', ['10.41.0.201']);
      // ... and the old list is served again to the act phase's list (the second from now), never the snapshot's.
      proxy.add({ kind: 'replay', method: 'GET', path: /^\/api\/v1\/pods\?/, nth: 2, times: 10 });
      r.now.t += 6 * MIN;
      const res = await r.run();
      assert.ok(proxy.fired() > 0, 'the old list was served to the re-check');
      assert.equal(res.deleted, [], 'no allocation removed on a re-check older than the decision');
      assert.is(Object.keys(await wb.allocations(kube, ns, '10.41.0.0-24')).length, 55);
      assert.ok(
        res.lines.some((l) => l.event === 'delete.failed' && /stale/.test(String(l.error))),
        'the stale list is named',
      );
      assert.is(res.exitCode, EXIT.error);
      await r.client.close();
    });
  });

  it("whereabouts-ips: the act phase's shared pods list answered empty (a complete-looking list, no pods) removes nothing (held to the snapshot's count)", async (t, kube) => {
    const ns = await t.namespace();
    await sharedListWorld(kube, ns, 42);
    await withProxy(t, async (proxy) => {
      const r = rig(t, whereaboutsIps, proxy, ns, undefined, 5000);
      assert.is((await r.run()).exitCode, EXIT.ok);
      r.now.t += 6 * MIN;
      // the deleting run's snapshot lists pods first (request 1); its act phase lists them again
      proxy.add({ kind: 'empty-items', method: 'GET', path: /^\/api\/v1\/pods\?/, nth: 2 });
      const res = await r.run();
      assert.is(proxy.fired(), 1, 'the fault happened, in the act phase');
      assert.equal(res.deleted, []);
      assert.match(
        String(res.lines.find((l) => l.event === 'delete.failed')?.error),
        /fresh pods: list incomplete: .* now against .* in the snapshot that decided/,
      );
      assert.is(Object.keys(await wb.allocations(kube, ns, '10.42.0.0-24')).length, 55, 'nothing removed');
      await r.client.close();
    });
  });

  it('whereabouts-ips: a pool read back with another UID is never "deleted (already gone)"', async (t, kube) => {
    const ns = await t.namespace();
    await wbWorld(kube, ns);
    await withProxy(t, async (proxy) => {
      const r = rig(t, whereaboutsIps, proxy, ns);
      await r.run();
      r.now.t += 6 * MIN;
      // the patch answered "success" without the write, and the pool then read with another UID
      proxy.add({ kind: 'fake-success', method: 'PATCH', path: /\/ippools\/10\.40\.0\.0-24$/ });
      proxy.add({ kind: 'other-uid', method: 'GET', path: /\/ippools\/10\.40\.0\.0-24$/, times: 10 });
      const res = await r.run();
      assert.ok(proxy.fired() > 0);
      assert.equal(res.deleted, [], 'nothing counted as deleted');
      assert.not.ok(res.lines.some((l) => l.event === 'resource.deleted'));
      assert.ok(
        res.lines.some((l) => l.event === 'delete.skipped' && /re-created/.test(String(l.reason))),
        'the run says what it saw',
      );
      assert.is(Object.keys(await wb.allocations(kube, ns, '10.40.0.0-24')).length, 4);
      await r.client.close();
    });
  });

  it('danm-endpoints: a bitmap write that happened but was answered with a Status Failure is told from a read-back', (t, kube) =>
    withProxy(t, async (proxy) => {
      const ns = await t.namespace();
      const w = await danmWorld(kube, ns);
      const r = rig(t, danmEndpoints, proxy, ns);
      await r.run();
      r.now.t += 6 * MIN;
      proxy.add({
        kind: 'status-failure-200',
        method: 'PUT',
        path: new RegExp(`/namespaces/${ns}/danmnets/test-net1$`),
      });
      const res = await r.run();
      assert.is(proxy.fired(), 1);
      assert.equal(res.deleted, [w.orphan.metadata.uid]);
      const detail = String(res.lines.find((l) => l.event === 'resource.deleted')?.detail);
      assert.match(detail, /10\.10\.10\.9: unknown answer .*read back: cleared/);
      assert.not.ok(
        danm.allocated((await kube.get(danm.R.DanmNet, ns, 'test-net1'))!).includes('10.10.10.9'),
        'the write did happen',
      );
      await r.client.close();
    }));

  it('a live pod GET through the client: 200 without the object, or a bare 404, is an error; only NotFound is absent', async (t, kube) => {
    const ns = await t.namespace();
    await danm.createPod(kube, ns, 'here-0');
    await withProxy(t, async (proxy) => {
      const c = new KubeHttpClient({ ...t.options, server: proxy.url, tls: {}, time: testTime() });
      for (const kind of ['empty-body', 'bare-404', 'html', 'other-resource'] as const) {
        proxy.clear();
        proxy.add({ kind, method: 'GET', path: /\/pods\/here-0$/, times: 10 });
        const got = await c.get(PODS, ns, 'here-0').then(
          (o) => (o === undefined ? 'absent' : 'object'),
          () => 'error',
        );
        assert.is(got, 'error', `${kind} is an error`);
      }
      proxy.clear();
      assert.is(await c.get(PODS, ns, 'not-there'), undefined, "the server's NotFound is absent");
      assert.ok(await c.get(PODS, ns, 'here-0'));
      await c.close();
    });
  });

  run();
}
