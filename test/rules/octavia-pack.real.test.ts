/**
 * Octavia on the real servers: the client's listing proof against the real Octavia API
 * (Zed, no-op provider finished by test/openstack/octavia-provider.py), and the
 * cpo-load-balancers pack against the real kube-apiserver and the real Keystone + Octavia.
 * Octavia offers no precondition on a DELETE: the re-check on a fresh read is the last
 * guard, and a load balancer being changed (PENDING_*) answers 409 and is kept.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as assert from 'uvu/assert';
import { type AnyFunction, type ConnectContext, MINUTE as MIN } from '../../shared/contract/index.ts';
import type { KubeHttpClient } from '../../shared/kube/client.ts';
import { NODES, SERVICES } from '../../shared/kube/resources.ts';
import { loadCloudConfig } from '../../shared/openstack/config.ts';
import { Http } from '../../shared/openstack/http.ts';
import { KeystoneAuth } from '../../shared/openstack/keystone.ts';
import { OctaviaClient } from '../../shared/openstack/octavia.ts';
import { cloudRuleFunction } from '../../shared/rules/cloud-function.ts';
import type { CloudRule } from '../../shared/rules/cloud-rule.ts';
import { loadAnyRuleFile } from '../../shared/rules/registry.ts';
import { EXIT } from '../../shared/runtime/errors.ts';
import { createService } from '../../shared/sandbox/scenarios/lbaas.ts';
import { FileTombstones } from '../../shared/state/tombstones.ts';
import { type KubeTarget, realTarget } from '../helpers/kube-target.ts';
import { runner } from '../helpers/runner.ts';
import { targetSuite } from '../helpers/target-suite.ts';
import { testTime } from '../helpers/time.ts';
import { passwordToken, realOpenStack } from '../openstack/real-openstack.ts';

const PACK = new URL('../../functions/rules/cpo-load-balancers/rule.yaml', import.meta.url).pathname;
const CLUSTER = 'prod-1';
const os = process.env.TWOPASS_NO_REAL_CLUSTER === '1' ? undefined : realOpenStack();
const octaviaUrl = os?.octaviaUrl;
if (!octaviaUrl)
  console.log('  !!! no real Octavia (with Keystone and the kube-apiserver): the Octavia suite is SKIPPED');
if (os && !octaviaUrl && process.env.TWOPASS_REQUIRE_REAL_OPENSTACK === '1') {
  console.error(
    "Octavia is required with the real OpenStack (TWOPASS_REQUIRE_REAL_OPENSTACK=1), but Debian's python3-octavia is not installed",
  );
  process.exitCode = 1;
}

type W = {
  env: Record<string, string>;
  lb: (name: string) => Promise<string>;
  /** A listener on it, a pool behind the listener and a member in the pool (at `port`, 8080 unless given), each ACTIVE. */
  serve: (
    lbId: string,
    memberAddress: string,
    port?: number,
  ) => Promise<{ listener: string; pool: string; member: string }>;
  status: (id: string) => Promise<string | undefined>;
  update: (id: string, description: string) => Promise<void>;
  gone: (id: string) => Promise<boolean>;
};

const suite = targetSuite<KubeTarget, W>('Octavia (real) and the cpo-load-balancers pack', realTarget, {
  off: octaviaUrl === undefined,
  setup: async () => {
    const dir = mkdtempSync(join(tmpdir(), 'twopass-octavia-'));
    writeFileSync(
      join(dir, 'clouds.yaml'),
      `clouds:\n  real:\n    auth_type: v3applicationcredential\n    region_name: ${os!.region}\n    interface: public\n    auth:\n      auth_url: ${os!.authUrl}\n      application_credential_id: ${os!.appCred.id}\n      application_credential_secret: ${os!.appCred.secret}\n`,
    );
    const token = await passwordToken(os!.authUrl, os!.user.name, os!.user.password, os!.project.name);
    const call = async (method: string, path: string, body?: unknown, under = 'loadbalancers') => {
      const r = await fetch(`${octaviaUrl}/v2/lbaas/${under}${path}`, {
        method,
        headers: { 'x-auth-token': token, 'content-type': 'application/json' },
        ...(body ? { body: JSON.stringify(body) } : {}),
      });
      const text = await r.text();
      return {
        status: r.status,
        body: text
          ? (JSON.parse(text) as {
              loadbalancer?: { id: string; provisioning_status: string };
              listener?: { id: string };
              pool?: { id: string };
              member?: { id: string };
            })
          : {},
      };
    };
    const status = async (id: string) => (await call('GET', `/${id}`)).body.loadbalancer?.provisioning_status;
    const settle = async (id: string, want: (s: string | undefined) => boolean) => {
      for (let i = 0; i < 60; i++) {
        if (want(await status(id))) return;
        await new Promise((r) => setTimeout(r, 250));
      }
      throw new Error(`load balancer ${id} stayed ${await status(id)}`);
    };
    return {
      env: { OS_CLOUD: 'real', OS_CLIENT_CONFIG_FILE: join(dir, 'clouds.yaml') },
      lb: async (name) => {
        const r = await call('POST', '', { loadbalancer: { name, vip_subnet_id: os!.subnetId } });
        if (r.status !== 201) throw new Error(`create ${name}: ${r.status} ${JSON.stringify(r.body)}`);
        const id = r.body.loadbalancer!.id;
        await settle(id, (s) => s === 'ACTIVE');
        return id;
      },
      serve: async (lbId, memberAddress, port = 8080) => {
        // each child locks the load balancer (PENDING_UPDATE) until the provider reports it
        const made = async (
          under: string,
          path: string,
          body: unknown,
          key: 'listener' | 'pool' | 'member',
        ) => {
          for (let i = 0; i < 60; i++) {
            await settle(lbId, (s) => s === 'ACTIVE');
            const r = await call('POST', path, body, under);
            if (r.status === 201) return r.body[key]!.id;
            if (r.status !== 409) throw new Error(`create ${key}: ${r.status} ${JSON.stringify(r.body)}`);
          }
          throw new Error(`create ${key}: the load balancer stayed immutable`);
        };
        const listener = await made(
          'listeners',
          '',
          {
            listener: {
              loadbalancer_id: lbId,
              protocol: 'TCP',
              protocol_port: 80,
              name: 'kept-in-tombstone',
            },
          },
          'listener',
        );
        const pool = await made(
          'pools',
          '',
          { pool: { listener_id: listener, protocol: 'TCP', lb_algorithm: 'ROUND_ROBIN' } },
          'pool',
        );
        const member = await made(
          'pools',
          `/${pool}/members`,
          { member: { address: memberAddress, protocol_port: port, subnet_id: os!.subnetId } },
          'member',
        );
        await settle(lbId, (s) => s === 'ACTIVE');
        return { listener, pool, member };
      },
      status,
      update: async (id, description) => {
        const r = await call('PUT', `/${id}`, { loadbalancer: { description } });
        if (r.status !== 200) throw new Error(`update ${id}: ${r.status}`);
      },
      gone: async (id) => {
        await settle(id, (s) => s === undefined || s === 'ACTIVE' || s === 'ERROR');
        return (await status(id)) === undefined;
      },
    };
  },
});

const rule = loadAnyRuleFile(PACK)[0] as CloudRule;
const mk = (t: KubeTarget, w: W, fn: AnyFunction = cloudRuleFunction(rule)) =>
  runner(
    fn,
    t.options,
    [],
    Date.now() + MIN,
    { enabled: true, maxEvidenceDropPercent: 100, settings: { projectId: os!.project.id, cluster: CLUSTER } },
    w.env,
  );
const name = (ns: string, svc: string, cluster = CLUSTER) => `kube_service_${cluster}_${ns}_${svc}`;
/** A Node of the cluster with this internal address (no kubelet: the object is the evidence). */
const node = async (kube: KubeHttpClient, nodeName: string, address: string) => {
  await kube.create(NODES, {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: nodeName },
    status: { addresses: [{ type: 'InternalIP', address }] },
  } as never);
};

suite.it(
  'the client lists every load balancer of the project over proven pages (a full page has a next link)',
  async (t, _kube, w) => {
    const ns = await t.namespace();
    const ids = [await w.lb(name(ns, 'a')), await w.lb(name(ns, 'b')), await w.lb(name(ns, 'c'))];
    const cloud = loadCloudConfig(w.env);
    const time = testTime();
    const http = new Http({ timeoutMs: 10_000, time });
    const octavia = new OctaviaClient(new KeystoneAuth(cloud, http, time.now), http, 2);
    try {
      const all = await octavia.listLoadBalancers({ project_id: os!.project.id });
      for (const id of ids)
        assert.ok(
          all.items.some((l) => l.id === id),
          `${id} listed`,
        );
      assert.ok(all.pages >= 2, `pages of two: ${all.pages}`);
      assert.is(new Set(all.items.map((l) => l.id)).size, all.items.length, 'no id twice');
      assert.is(
        await octavia.getLoadBalancer('00000000-0000-4000-8000-000000000000'),
        undefined,
        "Octavia's own 404",
      );
    } finally {
      await http.close();
    }
  },
);

suite.it(
  "a load balancer whose Service is gone or no longer of type LoadBalancer is deleted after the grace (cascade, no precondition); its Service's stays; another cluster's is never judged",
  async (t, kube: KubeHttpClient, w) => {
    const ns = await t.namespace();
    const live = await w.lb(name(ns, 'web'));
    const gone = await w.lb(name(ns, 'old'));
    const demoted = await w.lb(name(ns, 'internal'));
    const other = await w.lb(name(ns, 'old', `${CLUSTER}0`));
    await createService(kube, ns, 'web');
    await createService(kube, ns, 'internal', { type: 'ClusterIP' });
    const r = mk(t, w);
    assert.equal((await r.run()).deleted, []);
    r.now += 31 * MIN;
    const res = await r.run();
    assert.is(res.exitCode, EXIT.ok, JSON.stringify(r.events('delete.failed')));
    assert.ok(
      res.deleted.includes(gone) && res.deleted.includes(demoted),
      JSON.stringify(r.lines.filter((l) => l.key === gone)),
    );
    assert.not.ok(res.deleted.includes(live) || res.deleted.includes(other));
    assert.ok(await w.gone(gone), 'Octavia deleted it');
    assert.ok(await w.gone(demoted));
    assert.not.ok(await w.gone(live), 'the Service of type LoadBalancer holds its load balancer');
    assert.not.ok(await w.gone(other), "another cluster's is never judged");
    assert.not.ok(r.lines.some((l) => l.key === other));
    assert.ok(
      r.lines.some((l) => l.key === gone && /no precondition/.test(JSON.stringify(l))),
      'the delete says it had no precondition',
    );
  },
);

suite.it(
  'a Service deleted and re-created under the same name keeps its load balancer; a Service naming it by ID holds it too',
  async (t, kube, w) => {
    const ns = await t.namespace();
    const id = await w.lb(name(ns, 'app'));
    const shared = await w.lb(name(ns, 'gone'));
    await createService(kube, ns, 'app');
    await createService(kube, ns, 'sharer', {
      annotations: { 'loadbalancer.openstack.org/load-balancer-id': shared },
    });
    const r = mk(t, w);
    await r.run();
    await kube.delete(SERVICES, ns, 'app');
    r.now += MIN;
    await r.run();
    await createService(kube, ns, 'app');
    r.now += 31 * MIN;
    const res = await r.run();
    assert.not.ok(res.deleted.includes(id), 'the re-created Service holds it again');
    assert.not.ok(res.deleted.includes(shared), 'named by ID');
    assert.not.ok(await w.gone(id));
    assert.not.ok(await w.gone(shared));
    assert.ok(r.events('candidate.rescued').some((e) => e.key === id));
  },
);

suite.it(
  'a load balancer changed between the observations starts its grace again; one being changed when the DELETE goes out answers 409 and is kept',
  async (t, _kube, w) => {
    const ns = await t.namespace();
    const id = await w.lb(name(ns, 'moved'));
    const r = mk(t, w);
    await r.run();
    r.now += 31 * MIN;
    await w.update(id, 'changed by an operator');
    assert.ok(await w.gone(id).then((g) => !g));
    assert.not.ok((await r.run()).deleted.includes(id), 'a new updated_at: the grace starts again');
    // the next time, someone changes it just before the DELETE: Octavia refuses (immutable)
    const fn = cloudRuleFunction(rule);
    const racing: AnyFunction = {
      ...fn,
      async connect(ctx: ConnectContext) {
        const ports = await fn.connect!(ctx);
        const real = ports.writer.octavia as OctaviaClient;
        const octavia = Object.create(real) as OctaviaClient;
        octavia.deleteLoadBalancer = async (lbId, signal) => {
          await w.update(lbId, 'changed again, just now');
          return real.deleteLoadBalancer(lbId, signal);
        };
        return { ...ports, writer: { ...ports.writer, octavia } };
      },
    };
    const r2 = mk(t, w, racing);
    r2.now = r.now;
    await r2.run();
    r2.now += 31 * MIN;
    const res = await r2.run();
    assert.not.ok(res.deleted.includes(id));
    assert.ok(
      r2.lines.some((l) => l.key === id && /409/.test(JSON.stringify(l))),
      'the skip says 409',
    );
    assert.not.ok(await w.gone(id), 'kept');
  },
);

suite.it(
  "a load balancer's tombstone holds its listeners, pools and members whole, read just before the cascading DELETE takes them",
  async (t, kube, w) => {
    const ns = await t.namespace();
    const id = await w.lb(name(ns, 'served'));
    // its member stands on a node of the cluster, at a node port no Service holds: a leak
    await node(kube, `${ns}-worker`, '10.0.0.77');
    const made = await w.serve(id, '10.0.0.77');
    const r = mk(t, w);
    await r.run();
    r.now += 31 * MIN;
    const res = await r.run();
    assert.ok(res.deleted.includes(id), JSON.stringify(r.lines.filter((l) => l.key === id)));
    assert.ok(await w.gone(id), 'Octavia deleted it, with its children');
    const tombs = await new FileTombstones(r.dir, () => r.now).list(rule.name);
    const tomb = tombs.find((x) => x.key === id);
    assert.ok(tomb, 'a tombstone for the load balancer');
    const o = tomb!.object as {
      id: string;
      listeners: { id: string; protocol_port: number; name: string }[];
      pools: {
        id: string;
        lb_algorithm: string;
        members: { id: string; address: string; protocol_port: number }[];
      }[];
    };
    assert.is(o.id, id);
    assert.equal(
      o.listeners.map((l) => [l.id, l.protocol_port, l.name]),
      [[made.listener, 80, 'kept-in-tombstone']],
    );
    assert.equal(
      o.pools.map((p) => [p.id, p.lb_algorithm]),
      [[made.pool, 'ROUND_ROBIN']],
    );
    assert.equal(
      o.pools[0]!.members.map((m) => [m.id, m.address, m.protocol_port]),
      [[made.member, '10.0.0.77', 8080]],
    );
  },
);

suite.it(
  "evidence from OpenStack: a load balancer whose Service is gone is kept while a member forwards to a node port a Service holds, or a member is no node of the cluster, or a floating IP not the controller's is on its VIP port; its twin on the nodes at a free node port goes",
  async (t, kube, w) => {
    const ns = await t.namespace();
    await node(kube, `${ns}-worker`, '10.0.0.78');
    const held = await createService(kube, ns, 'admin', { type: 'NodePort' });
    const nodePort = (held.spec as { ports: { nodePort: number }[] }).ports[0]!.nodePort;
    const forwarding = await w.lb(name(ns, 'forwarding'));
    await w.serve(forwarding, '10.0.0.78', nodePort);
    const extended = await w.lb(name(ns, 'extended'));
    await w.serve(extended, '10.0.0.200');
    const leaked = await w.lb(name(ns, 'leaked'));
    // a node port no Service holds now (the apiserver's range is 30000-32767)
    const taken = new Set(
      (await kube.listAll(SERVICES)).items.flatMap((s) =>
        ((s.spec as { ports?: { nodePort?: number }[] }).ports ?? []).map((p) => p.nodePort),
      ),
    );
    let free = 32767;
    while (taken.has(free)) free--;
    await w.serve(leaked, '10.0.0.78', free);
    const r = mk(t, w);
    await r.run();
    r.now += 31 * MIN;
    const res = await r.run();
    assert.is(res.exitCode, EXIT.ok, JSON.stringify(r.events('delete.failed')));
    assert.ok(res.deleted.includes(leaked), JSON.stringify(r.lines.filter((l) => l.key === leaked)));
    assert.not.ok(res.deleted.includes(forwarding) || res.deleted.includes(extended));
    assert.not.ok(await w.gone(forwarding), 'traffic through it reaches a Service');
    assert.not.ok(await w.gone(extended), 'something else stands behind it');
    assert.ok(
      r
        .events('target.indeterminate')
        .some((e) => e.key === extended && /is no node of this cluster/.test(String(e.reason))),
      JSON.stringify(r.events('target.indeterminate')),
    );
    const sources = (r.events('snapshot.taken').at(-1)?.sources ?? []) as { name: string }[];
    assert.ok(
      sources.some((x) => x.name === 'evidence.members'),
      'the members are listed as evidence',
    );
  },
);

suite.run();
