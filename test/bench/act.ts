/**
 * Deleting runs at scale, each beside the same world's dry run: what the run that follows a
 * lost node costs (law 11). 1% of the pods are gone: their DanmEps (over five DanmNets),
 * whereabouts allocations and CiliumEndpoints are confirmed orphans; then a dry run and a
 * deleting run, each in its own process, are measured on the real kube-apiserver (its CPU
 * read from /proc) and on the fake at 150,000 pods. lbaas-ports deletes 10% of its ports on
 * the real Neutron, in parallel groups and one at a time.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PORT_ANNOTATION } from '../../functions/lbaas-ports/index.ts';
import { IPPOOLS } from '../../functions/whereabouts-ips/model.ts';
import { KubeHttpClient } from '../../shared/kube/client.ts';
import { DEPLOYMENTS, type KubeObject, NAMESPACES, PODS, SERVICES } from '../../shared/kube/resources.ts';
import { formatAddress, parseCidr } from '../../shared/net/ip.ts';
import { installCrdsFromDir } from '../../shared/sandbox/crds.ts';
import { FakeKubeServer } from '../../shared/sandbox/kube/server.ts';
import { CILIUM } from '../../shared/sandbox/scenarios/cilium.ts';
import { forceDeletePod, R } from '../../shared/sandbox/scenarios/danm.ts';
import { controllerDeployment } from '../../shared/sandbox/scenarios/lbaas-controller.ts';
import { ADMIN_TOKEN, adminClient, startCluster } from '../cluster/cluster.ts';
import { testTime } from '../helpers/time.ts';
import { startOpenStack } from '../openstack/real-openstack.ts';
import { realWorld } from '../openstack/real-world.ts';
import { inParallel, mdTable, ms, runProcess } from './common.ts';
import { danmWorld, NS, whereaboutsWorld } from './worlds.ts';

const NETS = 5;
const MIN = 60_000;
const GRACE_PASSED = 31 * MIN;
type One = {
  exit: number;
  error?: string;
  ms: number;
  peakRssMiB: number;
  kubeRequests: number;
  cloudRequests: number;
  conflicts: number;
  confirmed: number;
  deleted: number;
  skipped: number;
  failed: number;
  units?: number;
  evidenceReads?: number;
};

async function one(args: string[]): Promise<One> {
  const r = await runProcess(process.execPath, [new URL('./act-one.ts', import.meta.url).pathname, ...args]);
  try {
    return JSON.parse(r.stdout.trim().split('\n').pop() ?? '') as One;
  } catch {
    throw new Error(`act-one ${args.join(' ')} exit ${r.code}: ${r.stderr.slice(-1500)}`);
  }
}

type Measured = { dry: One; wet: One; dryCpu?: number; wetCpu?: number };

/** A first observation, then (past every grace) a dry run and a deleting run of the same world. */
async function dryThenDelete(
  fn: string,
  common: string[],
  cpu?: () => number,
  extra: { settings?: Record<string, unknown>; concurrency?: number } = {},
): Promise<Measured> {
  const state = mkdtempSync(join(tmpdir(), 'twopass-act-'));
  const t0 = Date.now();
  const args = [
    '--fn',
    fn,
    '--state',
    state,
    ...common,
    ...(extra.settings ? ['--settings', JSON.stringify(extra.settings)] : []),
    ...(extra.concurrency ? ['--concurrency', String(extra.concurrency)] : []),
  ];
  const first = await one([...args, '--now', String(t0), '--record', 'true']);
  if (first.exit !== 0) throw new Error(`${fn}: the first observation exited ${first.exit}: ${first.error}`);
  const later = String(t0 + GRACE_PASSED);
  const c0 = cpu?.();
  const dry = await one([...args, '--now', later]);
  const c1 = cpu?.();
  const wet = await one([...args, '--now', later, '--apply', 'true']);
  const c2 = cpu?.();
  // A table row is a measurement only when the runs did what they are measured for.
  for (const [what, o] of [
    ['dry run', dry],
    ['deleting run', wet],
  ] as const)
    if (o.exit !== 0) throw new Error(`${fn}: the ${what} exited ${o.exit}: ${o.error}`);
  if (wet.deleted === 0 || wet.failed > 0)
    throw new Error(
      `${fn}: the deleting run deleted ${wet.deleted}, failed ${wet.failed} (confirmed ${wet.confirmed})`,
    );
  return {
    dry,
    wet,
    ...(c0 !== undefined && c1 !== undefined && c2 !== undefined ? { dryCpu: c1 - c0, wetCpu: c2 - c1 } : {}),
  };
}

const HEAD = [
  'function',
  'run',
  'deleted',
  'requests',
  'per deletion',
  'wall time',
  'apiserver CPU',
  'peak RSS',
  'conflicts',
  'batches / evidence reads',
  'request target',
];

/** The request budget: dry × (1 + evidence reads) + 4 per deletion + 10 per batch. */
function rows(label: string, m: Measured, requests: (o: One) => number): (string | number)[][] {
  const dryReq = requests(m.dry);
  const wetReq = requests(m.wet);
  const reads = m.wet.evidenceReads ?? 0;
  const budget = dryReq * (1 + reads) + 4 * m.wet.deleted + 10 * (m.wet.units ?? 0);
  const cpu = (s: number | undefined) => (s === undefined ? 'n/a' : `${s.toFixed(2)} s`);
  return [
    [
      label,
      'dry run',
      0,
      dryReq,
      '',
      ms(m.dry.ms),
      cpu(m.dryCpu),
      `${m.dry.peakRssMiB} MiB`,
      m.dry.conflicts,
      '',
      '',
    ],
    [
      label,
      'deleting run',
      m.wet.deleted,
      wetReq,
      m.wet.deleted ? ((wetReq - dryReq) / m.wet.deleted).toFixed(2) : '',
      `${ms(m.wet.ms)} (${(m.wet.ms / m.dry.ms).toFixed(2)}x)`,
      m.dryCpu !== undefined && m.wetCpu !== undefined
        ? `${cpu(m.wetCpu)} (${(m.wetCpu / Math.max(m.dryCpu, 0.01)).toFixed(2)}x)`
        : 'n/a',
      `${m.wet.peakRssMiB} MiB (${(((m.wet.peakRssMiB - m.dry.peakRssMiB) / m.dry.peakRssMiB) * 100).toFixed(0)}%)`,
      m.wet.conflicts,
      `${m.wet.units ?? 0} / ${reads}`,
      `${wetReq} <= ${budget}: ${wetReq <= budget ? 'met' : 'MISSED'}`,
    ],
  ];
}

const kubeReq = (o: One) => o.kubeRequests;
const allReq = (o: One) => o.kubeRequests + o.cloudRequests;

/** A /16 DanmNet's bitmap with the first `used` host addresses set (and the two reserved ends). */
function bitmap(cidrText: string, used: number): string {
  const cidr = parseCidr(cidrText)!;
  const bits = Number(cidr.size);
  const bytes = new Uint8Array(Math.ceil(bits / 8));
  const set = (i: number) => {
    bytes[i >> 3]! |= 0x80 >> (i & 7);
  };
  set(0);
  set(bits - 1);
  for (let i = 1; i <= used; i++) set(i);
  return Buffer.from(bytes).toString('base64');
}

/** The pods a lost node took: one in each hundred, spread over the DanmNets (pod i is on net i % NETS). */
const lost = (i: number) => i % 100 === Math.floor(i / 100) % NETS;

const netCidr = (k: number) => `10.${100 + k}.0.0/16`;
const podAddress = (i: number) => {
  const c = parseCidr(netCidr(i % NETS))!;
  return formatAddress(4, c.network + BigInt(Math.floor(i / NETS) + 1));
};

/** n pods, each with a DanmEp (over five DanmNets), a whereabouts allocation and a CiliumEndpoint. */
async function seedReal(kube: KubeHttpClient, n: number): Promise<void> {
  await installCrdsFromDir(kube, 'danm', 'whereabouts', 'cilium');
  await kube.create(NAMESPACES, { metadata: { name: NS } });
  for (let k = 0; k < NETS; k++)
    await kube.create(R.DanmNet, {
      apiVersion: 'danm.k8s.io/v1',
      kind: 'DanmNet',
      metadata: { name: `net-${k}`, namespace: NS },
      spec: {
        NetworkID: `net-${k}`,
        NetworkType: 'ipvlan',
        Options: { cidr: netCidr(k), alloc: bitmap(netCidr(k), Math.ceil(n / NETS)) },
      },
    });
  const uids: string[] = [];
  await inParallel(n, 32, async (i) => {
    const net = `net-${i % NETS}`;
    const pod = await kube.create(PODS, {
      metadata: {
        name: `pod-${i}`,
        namespace: NS,
        labels: { app: 'bench' },
        annotations: { 'danm.k8s.io/interfaces': JSON.stringify([{ network: net }]) },
      },
      spec: { containers: [{ name: 'app', image: 'registry.local/app:1.0' }] },
    });
    uids[i] = pod.metadata.uid;
    await kube.create(R.danmeps, {
      apiVersion: 'danm.k8s.io/v1',
      kind: 'DanmEp',
      metadata: { name: `ep-${i}`, namespace: NS },
      spec: {
        NetworkName: net,
        NetworkType: 'ipvlan',
        apiType: 'DanmNet',
        Pod: `pod-${i}`,
        PodUID: pod.metadata.uid,
        Host: 'node-1',
        CID: `cid${i}`,
        Interface: { Name: 'eth0', Address: `${podAddress(i)}/16`, MacAddress: '02:00:00:00:00:01' },
      },
    });
    await kube.create(CILIUM.endpoints, {
      apiVersion: 'cilium.io/v2',
      kind: 'CiliumEndpoint',
      metadata: {
        name: `pod-${i}`,
        namespace: NS,
        ownerReferences: [{ apiVersion: 'v1', kind: 'Pod', name: `pod-${i}`, uid: pod.metadata.uid }],
      },
      status: { identity: { id: 1000 + (i % 50) } },
    });
  });
  const pools = Math.ceil(n / 1000);
  await inParallel(pools, 8, async (p) => {
    const allocations: Record<string, { id: string; podref: string; ifname: string }> = {};
    for (let j = 0; j < 1000 && p * 1000 + j < n; j++) {
      const i = p * 1000 + j;
      allocations[String(j + 1)] = { id: `c${i}`, podref: `${NS}/pod-${i}`, ifname: 'net1' };
    }
    await kube.create(IPPOOLS, {
      apiVersion: 'whereabouts.cni.cncf.io/v1alpha1',
      kind: 'IPPool',
      metadata: { name: `pool-${p}`, namespace: NS },
      spec: { range: `10.${64 + (p >> 6)}.${(p & 63) * 4}.0/22`, allocations },
    });
  });
}

/** The functions measured: all three, or those TWOPASS_BENCH_ACT_ONLY names (comma-separated). */
function benchFunctions(): string[] {
  const all = ['danm-endpoints', 'whereabouts-ips', 'rule:cilium-endpoints'];
  const only = process.env.TWOPASS_BENCH_ACT_ONLY?.split(',').map((x) => x.trim());
  return only ? all.filter((f) => only.includes(f)) : all;
}

async function realKube(n: number): Promise<string> {
  const cluster = await startCluster();
  try {
    const headers = { authorization: `Bearer ${ADMIN_TOKEN}` };
    const kube = adminClient(cluster, ADMIN_TOKEN, { connections: 32 });
    const t = performance.now();
    await seedReal(kube, n);
    const seedMs = performance.now() - t;
    // A node is lost: 1% of the pods are force-deleted, what they held is left behind
    // (one pod in each hundred, taken so that the DanmNets share the orphans).
    await inParallel(n, 32, async (i) => {
      if (lost(i)) await forceDeletePod(kube, NS, `pod-${i}`);
    });
    await kube.close();
    const pids = cluster.pids;
    const cpu = pids ? () => procCpu(pids.apiserver) : undefined;
    const common = ['--server', cluster.server, '--headers', JSON.stringify(headers), '--insecure', 'true'];
    const out: (string | number)[][] = [];
    for (const fn of benchFunctions())
      out.push(...rows(fn.replace('rule:', 'rule '), await dryThenDelete(fn, common, cpu), kubeReq));
    return mdTable(
      `Deleting runs on the real kube-apiserver (${cluster.version}): ${n.toLocaleString('en')} pods, 1% of them gone`,
      HEAD,
      out,
      `Seeded in ${ms(seedMs)}: ${n.toLocaleString('en')} pods, each with a DanmEp on one of ${NETS} DanmNets, a whereabouts allocation (${Math.ceil(n / 1000)} IPPools) and a CiliumEndpoint owned by it; then ${Math.ceil(n / 100)} pods force-deleted. Per function: a first observation, then (the simulated clock past every grace) a dry run and a deleting run, each in its own process, concurrency 4, evidenceMaxAge 30s. Requests are every Kubernetes response the run received (state in files, no Lease); apiserver CPU is utime + stime from /proc around each run; "per deletion" is (deleting - dry) / deleted; conflicts are 409s. One round: a deleting run cannot be repeated on the same world.`,
    );
  } finally {
    await cluster.stop();
  }
}

/** The fake API server at `n` pods (seeded straight into its store): danm-endpoints, whereabouts-ips, the cilium-endpoints rule. */
async function fakeKube(n: number): Promise<string> {
  const out: (string | number)[][] = [];
  for (const fn of benchFunctions()) {
    const fake = new FakeKubeServer({ continueTtlMs: 3_600_000 });
    await fake.start();
    try {
      const admin = new KubeHttpClient({ server: fake.url, time: testTime() });
      await installCrdsFromDir(admin);
      await admin.close();
      fake.store.seed(NAMESPACES, [{ metadata: { name: NS } }]);
      if (fn === 'danm-endpoints') danmWorld(fake, n);
      else if (fn === 'whereabouts-ips') whereaboutsWorld(fake, n);
      else ciliumWorld(fake, n);
      const m = await dryThenDelete(fn, ['--server', fake.url]);
      out.push(...rows(fn.replace('rule:', 'rule '), m, kubeReq));
    } finally {
      await fake.stop();
    }
  }
  return mdTable(
    `Deleting runs on the fake API server: ${n.toLocaleString('en')} pods, 1% of their objects orphaned`,
    HEAD,
    out,
    'The worlds of the end-to-end benchmark (danm-endpoints: one DanmNet). Server CPU is not separable here (the fake runs in the benchmark process). Same protocol as on the real apiserver.',
  );
}

/** n pods, each with a CiliumEndpoint owned by it; 1% of the endpoints name a Pod UID that is gone. */
function ciliumWorld(fake: FakeKubeServer, n: number): void {
  const pods = fake.store.seed(
    PODS,
    Array.from({ length: n }, (_, i) => ({
      metadata: { name: `pod-${i}`, namespace: NS, labels: { app: 'bench' } },
      spec: { containers: [{ name: 'app', image: 'registry.local/app:1.0' }] },
    })),
  ) as unknown as KubeObject[];
  fake.store.seed(
    CILIUM.endpoints,
    pods.map((p, i) => ({
      metadata: {
        name: p.metadata.name,
        namespace: NS,
        ownerReferences: [
          {
            apiVersion: 'v1',
            kind: 'Pod',
            name: p.metadata.name,
            uid: i % 100 === 0 ? `gone-${i}` : p.metadata.uid,
          },
        ],
      },
      status: { identity: { id: 1000 + (i % 50) } },
    })),
  );
}

/** lbaas-ports on the real Keystone + Neutron: `ports` ports with FIPs, 10% orphans, in parallel groups and one at a time. */
async function realNeutron(ports: number): Promise<string> {
  const os = await startOpenStack();
  const cluster = await startCluster();
  try {
    const { controllerPort } = realWorld(os);
    const headers = { authorization: `Bearer ${ADMIN_TOKEN}` };
    const kube = adminClient(cluster, ADMIN_TOKEN, { connections: 16 });
    await kube.create(NAMESPACES, { metadata: { name: NS } });
    const dir = mkdtempSync(join(tmpdir(), 'twopass-act-os-'));
    writeFileSync(
      join(dir, 'clouds.yaml'),
      `clouds:\n  real:\n    auth_type: v3applicationcredential\n    region_name: ${os.region}\n    interface: public\n    auth:\n      auth_url: ${os.authUrl}\n      application_credential_id: ${os.appCred.id}\n      application_credential_secret: ${os.appCred.secret}\n`,
    );
    const env = { OS_CLOUD: 'real', OS_CLIENT_CONFIG_FILE: join(dir, 'clouds.yaml') };
    const common = [
      '--server',
      cluster.server,
      '--headers',
      JSON.stringify(headers),
      '--insecure',
      'true',
      '--env',
      JSON.stringify(env),
    ];
    const seed = async (count: number, orphanEvery: number, prefix: string) => {
      await inParallel(count, 4, async (i) => {
        const u = await controllerPort();
        if (i % orphanEvery === 0) return; // no Service names it: an orphan
        await kube.create(SERVICES, {
          metadata: {
            name: `${prefix}-${i}`,
            namespace: NS,
            annotations: {
              [PORT_ANNOTATION]: u.port.id,
              'cah-loadbalancer.k8s.cloudandheat.com/managed': 'true',
            },
          },
          // headless: the test cluster's Service range (a /24) cannot hold 900 cluster IPs,
          // and lbaas-ports reads only the annotations of a Service that names its port
          spec: { type: 'ClusterIP', clusterIP: 'None', ports: [{ port: 80 }] },
        });
      });
    };
    // the ch-k8s-lbaas controller scaled to 0, read in every pass and around every DELETE
    await kube.create(DEPLOYMENTS, controllerDeployment());
    const t = performance.now();
    await seed(ports, 10, 'svc');
    const seedMs = performance.now() - t;
    const settings = { projectId: os.project.id };
    const out: (string | number)[][] = [];
    const parallel = await dryThenDelete('lbaas-ports', common, undefined, { settings });
    out.push(...rows('lbaas-ports, groups of 8 (default)', parallel, allReq));
    // the same number of orphans again, deleted one at a time
    await seed(ports / 10, 1, 'again');
    const serial = await dryThenDelete('lbaas-ports', common, undefined, {
      settings: { ...settings, concurrency: 1 },
    });
    out.push(...rows('lbaas-ports, one at a time (concurrency: 1)', serial, allReq));
    await kube.close();
    return mdTable(
      `Deleting runs on the real Neutron (${ports.toLocaleString('en')} tagged ports with FIPs, 10% orphans)`,
      HEAD,
      out,
      `Seeded in ${ms(seedMs)} (a port and its FIP cost the real Neutron about a second each). Requests are Kubernetes responses plus Neutron calls; a deletion is a port or its FIP, each counted. Parallel groups vs one at a time: ${(serial.wet.ms / parallel.wet.ms).toFixed(1)}x the wall time.`,
    );
  } finally {
    await cluster.stop();
    await os.stop();
  }
}

export async function actBench(
  o: { realPods?: number; fakePods?: number; ports?: number },
  /** Told of each table as it is done (a later section that fails loses none). */
  done: (table: string) => void = () => {},
): Promise<string> {
  const out: string[] = [];
  const section = async (make: () => Promise<string>) => {
    try {
      out.push(await make());
    } catch (err) {
      out.push(`### Deleting runs\n\nfailed: ${(err as Error).message.slice(0, 1500)}\n`);
    }
    done(out.at(-1)!);
  };
  if (o.realPods) await section(() => realKube(o.realPods!));
  if (o.fakePods) await section(() => fakeKube(o.fakePods!));
  if (o.ports) await section(() => realNeutron(o.ports!));
  return out.join('\n');
}

function procCpu(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

if (import.meta.main)
  await actBench(
    {
      realPods: Number(process.argv[2] ?? 5_000),
      fakePods: Number(process.argv[3] ?? 10_000),
      ports: Number(process.argv[4] ?? 100),
    },
    (t) => console.log(t),
  );
