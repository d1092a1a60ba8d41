/**
 * The real cloud producer: cloud-provider-openstack's OCCM (v1.36.0, its `service`
 * controller) makes the load balancers, floating IPs and security groups of Services of
 * type LoadBalancer in the real Keystone + Neutron + Octavia (no-op provider), beside a test
 * apiserver of its own. The leak is made by real actions (OCCM stopped, the Service's
 * finalizer removed, the Service deleted: the shape of cloud-provider-openstack #3145) and
 * the shipped packs judge what OCCM really wrote; the assertions read Neutron and Octavia.
 * Without the OCCM build or the real servers the suite is SKIPPED, and said so; with
 * TWOPASS_REQUIRE_REAL_OPENSTACK=1 (CI) that is a failure.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { MINUTE as MIN } from '../../shared/contract/index.ts';
import type { KubeHttpClient } from '../../shared/kube/client.ts';
import { type KubeObject, NAMESPACES, NODES, SERVICES } from '../../shared/kube/resources.ts';
import type { CloudRule } from '../../shared/rules/cloud-rule.ts';
import { loadAnyRuleFile } from '../../shared/rules/registry.ts';
import { EXIT } from '../../shared/runtime/errors.ts';
import { adminClient, type Cluster, startCluster } from '../cluster/cluster.ts';
import { appCredCloud, passwordToken, realOpenStack } from '../openstack/real-openstack.ts';
import { realWorld } from '../openstack/real-world.ts';
import { type Occm, occmMissing, startOccm } from './occm.ts';
import { packRun as runPack } from './packs.ts';

const os = process.env.TWOPASS_NO_REAL_CLUSTER === '1' ? undefined : realOpenStack();
const missing = process.env.TWOPASS_NO_REAL_CLUSTER === '1' ? 'no real cluster' : occmMissing(os);
if (missing) {
  console.log(`  !!! OCCM cannot run here (${missing}): the OCCM suite is SKIPPED`);
  if (process.env.TWOPASS_REQUIRE_REAL_OPENSTACK === '1' && process.env.TWOPASS_NO_REAL_CLUSTER !== '1') {
    console.error(`OCCM is required with the real OpenStack (TWOPASS_REQUIRE_REAL_OPENSTACK=1): ${missing}`);
    process.exitCode = 1;
  }
}

const PACKS = new URL('../../functions/rules/', import.meta.url).pathname;
const pack = (name: string) => loadAnyRuleFile(join(PACKS, name, 'rule.yaml'))[0] as CloudRule;
// a name of this suite's own: the project is shared with the other suites' worlds
const CLUSTER_NAME = `occm-${randomUUID().slice(0, 6)}`;
const NS = 'shop';

type Ctx = {
  cluster: Cluster;
  kube: KubeHttpClient;
  occm: Occm;
  dir: string;
  env: Record<string, string>;
  /** The node's Neutron port (OCCM puts the Services' security groups on it). */
  nodePort: { id: string; ip: string };
};
const test = suite<Ctx>(
  'OCCM (cloud-provider-openstack v1.36.0) makes the leaks; the cloud packs judge them',
);
const { neutron } = realWorld(os);

/** Octavia as the project's user. */
async function octavia(method: string, path: string): Promise<Record<string, unknown>> {
  const token = await passwordToken(os!.authUrl, os!.user.name, os!.user.password, os!.project.name);
  const r = await fetch(`${os!.octaviaUrl}/v2/lbaas${path}`, { method, headers: { 'x-auth-token': token } });
  const text = await r.text();
  if (r.status === 404) return { notFound: true };
  if (r.status >= 300) throw new Error(`octavia ${method} ${path}: ${r.status} ${text.slice(0, 300)}`);
  return text ? (JSON.parse(text) as Record<string, unknown>) : {};
}

async function poll<T>(what: string, fn: () => Promise<T | undefined>, ms = 120_000): Promise<T> {
  const until = Date.now() + ms;
  for (;;) {
    const v = await fn().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > until) throw new Error(`${what}: not after ${ms} ms`);
    await new Promise((r) => setTimeout(r, 1000));
  }
}

/** What OCCM made for a Service: its load balancer, floating IP and security group. */
type Made = { uid: string; lb: string; vipPort: string; fip: string; address: string; sg: string };

/** A Service of type LoadBalancer whose VIP is a port made beforehand (the no-op provider makes none); what OCCM made for it. */
async function serviceWithLoadBalancer(c: Ctx, name: string): Promise<Made> {
  const vip = (await neutron('POST', '/ports', { port: { network_id: os!.networkId, name: `vip-${name}` } }))
    .port as { id: string };
  const svc = await c.kube.create(SERVICES, {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: {
      name,
      namespace: NS,
      annotations: { 'loadbalancer.openstack.org/port-id': vip.id },
    },
    spec: {
      type: 'LoadBalancer',
      selector: { app: name },
      ports: [{ port: 80, targetPort: 8080, protocol: 'TCP' }],
    },
  } as never);
  const uid = svc.metadata.uid!;
  const address = await poll(`OCCM's load balancer for ${NS}/${name}`, async () => {
    const s = await c.kube.get(SERVICES, NS, name);
    const ingress = (s?.status as { loadBalancer?: { ingress?: { ip?: string }[] } } | undefined)
      ?.loadBalancer?.ingress?.[0]?.ip;
    return ingress || undefined;
  });
  const lbs = (await octavia('GET', `/loadbalancers?name=kube_service_${CLUSTER_NAME}_${NS}_${name}`))
    .loadbalancers as { id: string; vip_port_id: string }[];
  assert.is(lbs.length, 1, `one load balancer for ${NS}/${name}`);
  const fips = (await neutron('GET', `/floatingips?port_id=${vip.id}`)).floatingips as {
    id: string;
    description: string;
    floating_ip_address: string;
  }[];
  assert.is(fips.length, 1, 'one floating IP on the VIP port');
  assert.is(
    fips[0]!.description,
    `Floating IP for Kubernetes external service ${NS}/${name} from cluster ${CLUSTER_NAME}`,
  );
  const sgs = (await neutron('GET', `/security-groups?name=lb-sg-${uid}-${NS}-${name}`)).security_groups as {
    id: string;
  }[];
  assert.is(sgs.length, 1, `OCCM's security group lb-sg-${uid}-${NS}-${name}`);
  return { uid, lb: lbs[0]!.id, vipPort: vip.id, fip: fips[0]!.id, address, sg: sgs[0]!.id };
}

const exists = {
  lb: async (id: string) => {
    const lb = (await octavia('GET', `/loadbalancers/${id}`)).loadbalancer as
      | { provisioning_status: string }
      | undefined;
    return lb !== undefined && lb.provisioning_status !== 'DELETED';
  },
  fip: async (id: string) => !(await neutron('GET', `/floatingips/${id}`)).notFound,
  sg: async (id: string) => !(await neutron('GET', `/security-groups/${id}`)).notFound,
};

test.before(async (c) => {
  if (missing) return;
  c.dir = mkdtempSync(join(tmpdir(), 'twopass-occm-'));
  c.cluster = await startCluster();
  c.kube = adminClient(c.cluster);
  // A node as the service controller needs one: Ready, its InternalIP the address of a Neutron
  // port whose device_id its providerID names (OCCM puts the Services' security groups on it).
  const device = randomUUID();
  const port = (await neutron('POST', '/ports', { port: { network_id: os!.networkId, device_id: device } }))
    .port as { id: string; fixed_ips: { ip_address: string }[] };
  c.nodePort = { id: port.id, ip: port.fixed_ips[0]!.ip_address };
  await c.kube.create(NODES, {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: 'occm-worker-1' },
    spec: { providerID: `openstack:///${device}` },
    status: {
      addresses: [{ type: 'InternalIP', address: c.nodePort.ip }],
      conditions: [{ type: 'Ready', status: 'True', reason: 'KubeletReady', message: 'test node' }],
    },
  } as never);
  await c.kube.create(NAMESPACES, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } } as never);
  c.occm = await startOccm(c.cluster, os!, CLUSTER_NAME, join(c.dir, 'occm'));
  c.env = appCredCloud(os!, c.dir);
});

test.after(async (c) => {
  if (missing) return;
  await c.occm?.kill();
  await c.kube?.close();
  await c.cluster?.stop();
  if (c.nodePort) await neutron('DELETE', `/ports/${c.nodePort.id}`).catch(() => undefined);
  if (c.dir) rmSync(c.dir, { recursive: true, force: true });
});

const it = (name: string, fn: (c: Ctx) => Promise<void>) =>
  (missing ? test.skip : test)(name, async (c) => {
    try {
      await fn(c);
    } catch (err) {
      console.log(`--- OCCM's log (end) ---\n${c.occm?.log().slice(-4000)}`);
      throw err;
    }
  });

/** A pack run against this suite's cluster and the project, on a clock the test moves. */
const packRun = (c: Ctx, rule: CloudRule, start: number, cluster = CLUSTER_NAME) =>
  runPack(c, rule, start, { projectId: os!.project.id, cluster });

/** The leak of #3145 by real actions: OCCM down, the Service's finalizer removed, the Service deleted. */
async function leakWhileDown(c: Ctx, name: string): Promise<void> {
  await c.occm.kill();
  const old = (await c.kube.get(SERVICES, NS, name)) as KubeObject;
  assert.ok(
    (old.metadata.finalizers as string[] | undefined)?.includes(
      'service.kubernetes.io/load-balancer-cleanup',
    ),
    'OCCM set its finalizer',
  );
  await c.kube.replace(SERVICES, { ...old, metadata: { ...old.metadata, finalizers: [] } } as never);
  await c.kube.delete(SERVICES, NS, name);
  await poll('the Service gone', async () => ((await c.kube.get(SERVICES, NS, name)) ? undefined : true));
}

it("a Service's finalizer removed while OCCM is down, then the Service deleted (#3145): its load balancer goes, its security group is taken off the node's port and goes, its floating IP goes once off the VIP port (never while on it); another Service's are untouched, and OCCM started again finds its own as it left them", async (c) => {
  const live = await serviceWithLoadBalancer(c, 'web');
  const leaked = await serviceWithLoadBalancer(c, 'old');
  const nodeSgs = (await neutron('GET', `/ports/${c.nodePort.id}`)).port as { security_groups: string[] };
  assert.ok(nodeSgs.security_groups.includes(leaked.sg), "OCCM put the Service's group on the node's port");

  // the leak, by real actions: OCCM down, the finalizer removed, the Service deleted
  await c.occm.kill();
  const old = (await c.kube.get(SERVICES, NS, 'old')) as KubeObject;
  assert.ok(
    (old.metadata.finalizers as string[] | undefined)?.includes(
      'service.kubernetes.io/load-balancer-cleanup',
    ),
    'OCCM set its finalizer',
  );
  await c.kube.replace(SERVICES, { ...old, metadata: { ...old.metadata, finalizers: [] } } as never);
  await c.kube.delete(SERVICES, NS, 'old');
  await poll('the Service gone', async () => ((await c.kube.get(SERVICES, NS, 'old')) ? undefined : true));
  for (const [what, ok] of [
    ['load balancer', await exists.lb(leaked.lb)],
    ['floating IP', await exists.fip(leaked.fip)],
    ['security group', await exists.sg(leaked.sg)],
  ] as const)
    assert.ok(ok, `the ${what} is left behind`);

  const t0 = Date.now() + MIN;
  const lbs = packRun(c, pack('cpo-load-balancers'), t0);
  const fips = packRun(c, pack('cpo-floating-ips'), t0);
  const sgs = packRun(c, pack('cpo-security-groups'), t0);
  for (const r of [lbs, fips, sgs]) await r.run();
  for (const r of [lbs, fips, sgs]) r.now += 31 * MIN;
  const lbRun = await lbs.run();
  assert.is(lbRun.exitCode, EXIT.ok, JSON.stringify(lbs.events('delete.failed')));
  assert.equal(lbRun.deleted, [leaked.lb], JSON.stringify(lbs.lines.filter((l) => l.key === live.lb)));
  const fipRun = await fips.run();
  assert.equal(fipRun.deleted, [], 'the floating IP is still on the VIP port: it waits');
  assert.ok(
    fips
      .events('target.indeterminate')
      .some((e) => e.key === leaked.fip && /still associated with port/.test(String(e.reason))),
  );
  const sgRun = await sgs.run();
  assert.is(sgRun.exitCode, EXIT.ok, JSON.stringify(sgs.events('delete.failed')));
  assert.equal(sgRun.deleted, [leaked.sg], JSON.stringify(sgs.lines.filter((l) => l.key === leaked.sg)));
  const after = (await neutron('GET', `/ports/${c.nodePort.id}`)).port as { security_groups: string[] };
  assert.not.ok(after.security_groups.includes(leaked.sg), "taken off the node's port first");
  assert.ok(after.security_groups.includes(live.sg), "the live Service's group stays on it");
  await poll('Octavia done with the load balancer', async () =>
    (await exists.lb(leaked.lb)) ? undefined : true,
  );

  // A real Octavia deletes the VIP port with its load balancer; the no-op provider makes none
  // (the test made it beforehand), so it goes as Octavia's own would.
  await neutron('DELETE', `/ports/${leaked.vipPort}`);
  for (const r of [fips, sgs]) r.now += MIN;
  await fips.run(); // off the port: a new revision, its grace starts again
  fips.now += 31 * MIN;
  const fipRun2 = await fips.run();
  assert.is(fipRun2.exitCode, EXIT.ok, JSON.stringify(fips.events('delete.failed')));
  assert.equal(fipRun2.deleted, [leaked.fip]);
  assert.not.ok(await exists.fip(leaked.fip));

  // the other Service's, untouched
  assert.ok(await exists.lb(live.lb));
  assert.ok(await exists.fip(live.fip));
  assert.ok(await exists.sg(live.sg));
  assert.not.ok(await exists.sg(leaked.sg));

  // OCCM again: it finds its own as it left them (the same load balancer, no new one, no error for it)
  const mark = c.occm.log().length;
  await c.occm.start();
  await new Promise((r) => setTimeout(r, 8000));
  const again = (await octavia('GET', `/loadbalancers?name=kube_service_${CLUSTER_NAME}_${NS}_web`))
    .loadbalancers as { id: string; provisioning_status: string }[];
  assert.equal(
    again.map((l) => l.id),
    [live.lb],
    'the same load balancer',
  );
  const since = c.occm.log().slice(mark);
  assert.not.match(
    since,
    /Error syncing load balancer.*shop\/web|failed to ensure load balancer.*shop\/web/i,
    since.slice(-3000),
  );
  const web = (await c.kube.get(SERVICES, NS, 'web')) as KubeObject;
  assert.is(
    (web.status as { loadBalancer: { ingress: { ip: string }[] } }).loadBalancer.ingress[0]!.ip,
    live.address,
  );
});

it("OCCM killed in the middle of its own delete (its load balancer gone, its security group not yet): started again it forgets the group; exactly that group is reclaimed, taken off the node's port first; a new Service of the same name keeps its own", async (c) => {
  const pid = os!.octaviaProviderPid;
  assert.ok(pid, "the Octavia provider loop's process");
  const first = await serviceWithLoadBalancer(c, 'mid');
  // the provider held: the delete OCCM asks for stays PENDING_DELETE, and OCCM waits on it
  process.kill(pid, 'SIGSTOP');
  try {
    await c.kube.delete(SERVICES, NS, 'mid');
    await poll('OCCM deleting the load balancer', async () => {
      const lb = (await octavia('GET', `/loadbalancers/${first.lb}`)).loadbalancer as
        | { provisioning_status: string }
        | undefined;
      return lb?.provisioning_status === 'PENDING_DELETE' ? true : undefined;
    });
    await c.occm.kill();
  } finally {
    process.kill(pid, 'SIGCONT');
  }
  await poll('Octavia done with the load balancer', async () =>
    (await exists.lb(first.lb)) ? undefined : true,
  );
  assert.not.ok(await exists.fip(first.fip), 'OCCM deleted the floating IP before the load balancer');
  // started again, it finds no load balancer for the Service, lets it go, and never looks at the group again
  await c.occm.start();
  await poll('the Service gone', async () => ((await c.kube.get(SERVICES, NS, 'mid')) ? undefined : true));
  assert.ok(await exists.sg(first.sg), 'the group is left behind');
  const onNode = async () =>
    ((await neutron('GET', `/ports/${c.nodePort.id}`)).port as { security_groups: string[] }).security_groups;
  assert.ok((await onNode()).includes(first.sg), "and left on the node's port");
  // a new Service of the same name: a new UID, a group of its own
  const second = await serviceWithLoadBalancer(c, 'mid');
  assert.is.not(second.uid, first.uid);
  assert.is.not(second.sg, first.sg);

  const sgs = packRun(c, pack('cpo-security-groups'), Date.now() + MIN);
  await sgs.run();
  sgs.now += 31 * MIN;
  const res = await sgs.run();
  assert.is(res.exitCode, EXIT.ok, JSON.stringify(sgs.events('delete.failed')));
  assert.equal(res.deleted, [first.sg], JSON.stringify(sgs.lines.filter((l) => l.key === first.sg)));
  assert.not.ok(await exists.sg(first.sg));
  assert.ok(await exists.sg(second.sg), 'the new Service keeps its own');
  const groups = await onNode();
  assert.not.ok(groups.includes(first.sg));
  assert.ok(groups.includes(second.sg));
  await neutron('DELETE', `/ports/${first.vipPort}`).catch(() => undefined);
});

it("--cluster-name changed: OCCM renames a live Service's load balancer to the new name; a leak of the old name belongs to no Service of the new name, so the packs under the new name leave it; run under the old name once more (the documented step) they reclaim it, and the renamed one is not theirs", async (c) => {
  const live = await serviceWithLoadBalancer(c, 'keep');
  const leaked = await serviceWithLoadBalancer(c, 'gone');
  await leakWhileDown(c, 'gone');
  const NEW = `${CLUSTER_NAME}-b`;
  await c.occm.start(NEW);
  try {
    // found by the Service's load-balancer-id annotation, renamed with its listeners and pools
    const named = async (cluster: string) =>
      ((await octavia('GET', '/loadbalancers')).loadbalancers as { id: string; name: string }[])
        .filter((l) => l.name.startsWith(`kube_service_${cluster}_${NS}_`))
        .map((l) => l.id);
    // every live Service's (this one's and the earlier tests') renamed; the leak keeps its name
    await poll(
      "OCCM renaming the live Services' load balancers",
      async () => {
        const lb = (await octavia('GET', `/loadbalancers/${live.lb}`)).loadbalancer as { name: string };
        const old = await named(CLUSTER_NAME);
        return lb.name === `kube_service_${NEW}_${NS}_keep` && old.length === 1 && old[0] === leaked.lb
          ? true
          : undefined;
      },
      90_000,
    );
    const t0 = Date.now() + MIN;
    // under the new name: the old name's leak is not a target; the live one is in use
    const lbsNew = packRun(c, pack('cpo-load-balancers'), t0, NEW);
    await lbsNew.run();
    lbsNew.now += 31 * MIN;
    const underNew = await lbsNew.run();
    assert.is(underNew.exitCode, EXIT.ok);
    assert.equal(underNew.deleted, [], 'nothing of the old name is judged under the new one');
    assert.ok(await exists.lb(leaked.lb), 'the leak stays');
    // each name's targets are exactly the load balancers named with it
    const newOnes = await named(NEW);
    assert.ok(newOnes.includes(live.lb) && !newOnes.includes(leaked.lb), JSON.stringify(newOnes));
    assert.is(underNew.summary?.targets, newOnes.length, 'the targets under the new name');
    assert.is(underNew.summary?.used, newOnes.length, 'each in use (its Service, its node port)');
    assert.equal(await named(CLUSTER_NAME), [leaked.lb], "the old name's only load balancer left: the leak");
    // under the old name, once: the leak goes; the renamed one is not the old name's
    const lbsOld = packRun(c, pack('cpo-load-balancers'), t0, CLUSTER_NAME);
    const sgsOld = packRun(c, pack('cpo-security-groups'), t0, CLUSTER_NAME);
    for (const r of [lbsOld, sgsOld]) await r.run();
    for (const r of [lbsOld, sgsOld]) r.now += 31 * MIN;
    const underOld = await lbsOld.run();
    assert.is(underOld.exitCode, EXIT.ok, JSON.stringify(lbsOld.events('delete.failed')));
    assert.equal(underOld.deleted, [leaked.lb]);
    assert.is(underOld.summary?.targets, 1, 'so the only target under the old name');
    const sgOld = await sgsOld.run();
    assert.is(sgOld.exitCode, EXIT.ok, JSON.stringify(sgsOld.events('delete.failed')));
    assert.equal(
      sgOld.deleted,
      [leaked.sg],
      "the leaked Service's group (its Service is gone), not the live one's",
    );
    assert.ok(await exists.lb(live.lb));
    assert.ok(await exists.sg(live.sg));
    assert.ok(await exists.fip(live.fip));
  } finally {
    await neutron('DELETE', `/ports/${leaked.vipPort}`).catch(() => undefined);
    await c.occm.kill();
    await c.occm.start(CLUSTER_NAME);
  }
});

test.run();
