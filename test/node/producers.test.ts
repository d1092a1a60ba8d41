/**
 * The real producers make the leaks: whereabouts' CNI plugin (v0.9.4) allocates through
 * containerd on the test node, Multus' thin plugin (v3.9.3) writes the pods'
 * network-status, and the shipped whereabouts-ips CronJob reclaims what a lost node left,
 * in Jobs on the same node. Every assertion is on what the plugins really wrote.
 *
 * SKIPPED (and said so) without the node (root, Debian's packages, the kube binaries) or the
 * producers (test/node/build.sh producers); TWOPASS_REQUIRE_NODE=1 (CI) makes that a failure.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { stringify } from 'yaml';
import { IPPOOLS, NETWORK_STATUS, RESERVATIONS } from '../../functions/whereabouts-ips/model.ts';
import type { KubeHttpClient } from '../../shared/kube/client.ts';
import { type KubeObject, LEASES, NAMESPACES, PODS } from '../../shared/kube/resources.ts';
import { adminClient, type Cluster, startCluster } from '../cluster/cluster.ts';
import { eventually } from '../helpers/time.ts';
import {
  apply,
  jobEnd,
  kubectl,
  NS,
  type Obj,
  renderChart,
  renderOverlay,
  runJob,
  shortGrace,
  summary,
  uninstall,
  withConfig,
} from './jobs.ts';
import { IMAGE_ARCHIVE, NODE_NAME, type Node, nodeAvailable, startNode } from './node.ts';
import {
  POOL_NS,
  poolName,
  producerCrds,
  producersAvailable,
  whereaboutsNad,
  withMultus,
} from './producers.ts';

const ROOT = new URL('../../', import.meta.url).pathname;
const why = nodeAvailable() ?? producersAvailable();
if (why && process.env.TWOPASS_REQUIRE_NODE === '1')
  throw new Error(`the real producers' node suite is required (TWOPASS_REQUIRE_NODE=1) but ${why}`);
if (why) console.log(`  !!! the real producers' node suite is SKIPPED: ${why} !!!`);

type Ctx = { cluster: Cluster; node: Node; kube: KubeHttpClient; installed?: Obj[] };
const test = suite<Ctx>('the real producers (whereabouts v0.9.4, Multus v3.9.3) on a real node');
const it = why ? test.skip : test;

const NODES = { group: '', version: 'v1', plural: 'nodes', kind: 'Node', namespaced: false } as const;
const APPS = 'wb-apps';
const NETWORKS = 'k8s.v1.cni.cncf.io/networks';

test.before(async (ctx) => {
  if (why) return;
  const built = spawnSync('bash', [join(ROOT, 'test/node/image.sh')], {
    encoding: 'utf8',
    timeout: 1_200_000,
  });
  if (built.status !== 0) throw new Error(`test/node/image.sh: ${built.stdout}${built.stderr}`);
  ctx.cluster = await startCluster({ serviceAccounts: true });
  kubectl(
    ctx.cluster,
    ['apply', '-f', '-'],
    producerCrds()
      .map((d) => stringify(d))
      .join('---\n'),
  );
  ctx.node = await startNode(ctx.cluster, [IMAGE_ARCHIVE], { cni: withMultus });
  ctx.node.tag('localhost/twopass:test', 'docker.io/library/twopass:0.1.0');
  ctx.kube = adminClient(ctx.cluster);
  await ctx.kube.create(NAMESPACES, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: APPS } });
  await eventually(
    'the node is Ready and the namespace has its ServiceAccount',
    async () => {
      const n = await ctx.kube.get(NODES, undefined, NODE_NAME);
      const ready = (
        n?.status as { conditions?: { type: string; status: string }[] } | undefined
      )?.conditions?.find((c) => c.type === 'Ready');
      const sa = await ctx.kube.get(
        { group: '', version: 'v1', plural: 'serviceaccounts', kind: 'ServiceAccount', namespaced: true },
        APPS,
        'default',
      );
      return ready?.status === 'True' && sa ? true : undefined;
    },
    90_000,
  );
});
test.after.each(async (ctx) => {
  if (ctx.installed) await uninstall(ctx.cluster, ctx.installed);
  delete ctx.installed;
});
test.after(async (ctx) => {
  await ctx.kube?.close();
  await ctx.node?.stop();
  await ctx.cluster?.stop();
});

/** A pod that sleeps (the local pause image) and asks for `network` through Multus. */
async function createPod(kube: KubeHttpClient, name: string, network: string): Promise<KubeObject> {
  return kube.create(PODS, {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: APPS, annotations: { [NETWORKS]: network } },
    spec: {
      terminationGracePeriodSeconds: 0,
      containers: [{ name: 'c', image: 'localhost/pause:test', imagePullPolicy: 'Never' }],
    },
  });
}

/** The whereabouts addresses Multus' network-status lists for a pod (the `wb` interface's). */
function wbAddresses(pod: KubeObject | undefined, network: string): string[] {
  const raw = pod?.metadata.annotations?.[NETWORK_STATUS];
  if (!raw) return [];
  const list = JSON.parse(raw) as { name: string; ips?: string[] }[];
  return list.filter((n) => n.name === `${APPS}/${network}`).flatMap((n) => n.ips ?? []);
}

/** Waits until the pod runs and Multus lists its whereabouts address; the address. */
async function runningWith(
  kube: KubeHttpClient,
  name: string,
  network: string,
  ms = 120_000,
): Promise<string> {
  return eventually(
    `pod ${APPS}/${name} runs with a ${network} address`,
    async () => {
      const p = await kube.get(PODS, APPS, name);
      const ips = wbAddresses(p, network);
      return (p?.status as { phase?: string } | undefined)?.phase === 'Running' && ips.length === 1
        ? ips[0]
        : undefined;
    },
    ms,
  );
}

type Allocation = { id: string; podref: string; ifname?: string };
async function pool(kube: KubeHttpClient, range: string): Promise<Record<string, Allocation>> {
  const p = await kube.get(IPPOOLS, POOL_NS, poolName(range));
  return ((p?.spec as { allocations?: Record<string, Allocation> } | undefined)?.allocations ?? {}) as Record<
    string,
    Allocation
  >;
}
const offset = (ip: string) => String(Number(ip.split('.')[3]));

/** The Events of a pod whose reason is `reason`, as `kubectl describe pod` lists them. */
function podEvents(cluster: Cluster, name: string, reason: string): string[] {
  const out = JSON.parse(
    kubectl(cluster, [
      'get',
      'events',
      '-n',
      APPS,
      '--field-selector',
      `involvedObject.name=${name},reason=${reason}`,
      '-o',
      'json',
    ]),
  ) as { items: { message: string }[] };
  return out.items.map((e) => e.message);
}

/** `twopass restore whereabouts-ips --run RUN` from the host against the cluster's state. */
function restore(
  cluster: Cluster,
  run: string,
): { status: number | null; lines: Record<string, unknown>[]; err: string } {
  const r = spawnSync(
    process.execPath,
    [
      join(ROOT, 'shared/cli.ts'),
      'restore',
      'whereabouts-ips',
      '--run',
      run,
      '--state',
      `configmap:${NS}`,
      '--kubeconfig',
      cluster.kubeconfigPath,
      '--output',
      'json',
    ],
    { encoding: 'utf8', cwd: ROOT },
  );
  return {
    status: r.status,
    err: r.stderr,
    lines: r.stdout
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>),
  };
}

it('node lost, pod force-deleted, pool exhausted: the third pod cannot get an address until the CronJob frees exactly the leaked allocation and its reservation; the kubelet then starts it on that address; restoring the freed one is refused', async (ctx) => {
  const { cluster, node, kube } = ctx;
  const RANGE = '10.89.0.0/24';
  kubectl(
    cluster,
    ['apply', '-f', '-'],
    stringify(
      whereaboutsNad(node.dir, { range: RANGE, rangeStart: '10.89.0.10', rangeEnd: '10.89.0.11' }, APPS),
    ),
  );
  await createPod(kube, 'a', 'wb');
  await createPod(kube, 'b', 'wb');
  const ipA = await runningWith(kube, 'a', 'wb');
  const ipB = await runningWith(kube, 'b', 'wb');
  const before = await pool(kube, RANGE);
  assert.equal(Object.keys(before).sort(), [offset(ipA), offset(ipB)].sort(), 'whereabouts allocated both');
  assert.is(before[offset(ipA)]!.podref, `${APPS}/a`);
  assert.is(before[offset(ipA)]!.ifname, 'net1');
  const resvA = await kube.get(RESERVATIONS, POOL_NS, ipA);
  assert.ok(resvA, 'whereabouts wrote a reservation');
  assert.equal(resvA!.spec, { podref: `${APPS}/a`, ifname: 'net1' }, 'podref and ifname, no container id');

  // the node is lost with its containerd state; a is force-deleted while it is down
  await node.lose();
  kubectl(cluster, ['delete', 'pod', 'a', '-n', APPS, '--grace-period=0', '--force']);
  await node.restart();
  // b comes back in a new sandbox: whereabouts finds its allocation by podref and takes it over
  const idB = before[offset(ipB)]!.id;
  await eventually(
    "b's new sandbox takes its allocation over",
    async () => {
      const a = (await pool(kube, RANGE))[offset(ipB)];
      return a && a.id !== idB && a.podref === `${APPS}/b` ? true : undefined;
    },
    180_000,
  );
  assert.is(await runningWith(kube, 'b', 'wb', 120_000), ipB, 'the surviving pod keeps its address');
  const afterLoss = await pool(kube, RANGE);
  assert.is(afterLoss[offset(ipA)]?.id, before[offset(ipA)]!.id, 'no DEL came for a: its allocation leaked');

  await createPod(kube, 'c', 'wb');
  const refusal = await eventually(
    'the third pod cannot get an address',
    () => {
      const m = podEvents(cluster, 'c', 'FailedCreatePodSandBox').find((x) =>
        x.includes('Could not allocate IP in range'),
      );
      return m;
    },
    120_000,
  );
  assert.match(refusal, /whereabouts|Could not allocate/);

  const objs = withConfig(renderOverlay('whereabouts-ips'), shortGrace('whereabouts-ips'));
  ctx.installed = objs;
  apply(cluster, objs);
  const first = await runJob(cluster, node, 'twopass-whereabouts-ips');
  assert.is(first.condition, 'Complete', summary(first));
  assert.not.ok(
    first.events.some((e) => e.event === 'resource.deleted'),
    summary(first),
  );
  await new Promise((r) => setTimeout(r, 2500)); // the grace
  const second = await runJob(cluster, node, 'twopass-whereabouts-ips');
  assert.is(second.condition, 'Complete', summary(second));
  const deleted = second.events.filter((e) => e.event === 'resource.deleted');
  assert.is(deleted.length, 2, summary(second));
  assert.ok(
    deleted.every((e) => String(e.name).includes(ipA)),
    summary(second),
  );
  assert.ok(
    second.events.some((e) => e.event === 'delete.started' && String(e.name).includes(ipA)),
    'each deletion is announced before it is made',
  );

  const freed = await pool(kube, RANGE);
  assert.not.ok(freed[offset(ipA)]?.podref === `${APPS}/a`, "a's allocation is gone");
  assert.is(freed[offset(ipB)]?.podref, `${APPS}/b`, "b's allocation is untouched");
  assert.ok(await kube.get(RESERVATIONS, POOL_NS, ipB), "b's reservation is untouched");

  // the kubelet's retry gives c the freed address
  const ipC = await runningWith(kube, 'c', 'wb', 240_000);
  assert.is(ipC, ipA, 'the third pod runs on the freed address');
  const runId = String(second.events.find((e) => e.event === 'run.finished')?.runId ?? '');
  assert.ok(runId, summary(second));
  const r = restore(cluster, runId);
  assert.is(r.status, 1, `${r.err}${JSON.stringify(r.lines)}`);
  const refused = r.lines.filter((l) => l.event === 'restore.refused');
  assert.ok(
    refused.some((l) => /allocated again|exists/.test(String(l.reason))),
    JSON.stringify(r.lines),
  );
  assert.not.ok(
    r.lines.some((l) => l.event === 'restore.ready'),
    JSON.stringify(r.lines),
  );
  for (const p of ['b', 'c']) await kube.delete(PODS, APPS, p);
});

/** The whereabouts log's text after `from` bytes (the plugin's own debug log, on the node). */
const wbLog = (node: Node, from = 0) => {
  const f = join(node.dir, 'whereabouts.log');
  return existsSync(f) ? readFileSync(f).subarray(from).toString('utf8') : '';
};
const wbLogSize = (node: Node) => wbLog(node).length;

it("a StatefulSet pod re-created under the same name while its ADD is in flight: runs during the window keep its predecessor's allocation; whereabouts then hands that same allocation to the new pod, and nothing is reclaimed", async (ctx) => {
  const { cluster, node, kube } = ctx;
  const RANGE = '10.90.0.0/24';
  kubectl(
    cluster,
    ['apply', '-f', '-'],
    stringify(whereaboutsNad(node.dir, { range: RANGE }, APPS, 'wb-slow')),
  );
  kubectl(
    cluster,
    ['apply', '-f', '-'],
    stringify({
      apiVersion: 'apps/v1',
      kind: 'StatefulSet',
      metadata: { name: 'db', namespace: APPS },
      spec: {
        serviceName: 'db',
        replicas: 1,
        selector: { matchLabels: { app: 'db' } },
        template: {
          metadata: { labels: { app: 'db' }, annotations: { [NETWORKS]: 'wb-slow' } },
          spec: {
            terminationGracePeriodSeconds: 0,
            containers: [{ name: 'c', image: 'localhost/pause:test', imagePullPolicy: 'Never' }],
          },
        },
      },
    }),
  );
  const ip = await runningWith(kube, 'db-0', 'wb-slow', 240_000);
  const old = (await kube.get(PODS, APPS, 'db-0'))!;
  const oldAlloc = (await pool(kube, RANGE))[offset(ip)]!;
  assert.is(oldAlloc.podref, `${APPS}/db-0`);
  const objs = withConfig(renderOverlay('whereabouts-ips'), shortGrace('whereabouts-ips'));
  ctx.installed = objs;
  apply(cluster, objs);

  await node.lose();
  kubectl(cluster, ['delete', 'pod', 'db-0', '-n', APPS, '--grace-period=0', '--force']);
  const fresh = await eventually(
    'the StatefulSet controller re-creates db-0',
    async () => {
      const p = await kube.get(PODS, APPS, 'db-0');
      return p && p.metadata.uid !== old.metadata.uid ? p : undefined;
    },
    60_000,
  );
  // whereabouts serializes its ADDs and DELs on the Lease `whereabouts`: held by another
  // node's ADD, the new pod's ADD waits before it reads the pool
  const lease = await kube.create(LEASES, {
    apiVersion: 'coordination.k8s.io/v1',
    kind: 'Lease',
    metadata: { name: 'whereabouts', namespace: POOL_NS },
    spec: {
      holderIdentity: 'another-node',
      leaseDurationSeconds: 600,
      acquireTime: new Date().toISOString().replace('Z', '000Z'),
      renewTime: new Date().toISOString().replace('Z', '000Z'),
    },
  });
  const mark = wbLogSize(node);
  await node.restart();
  await eventually(
    "the new db-0's ADD reached whereabouts",
    () => /ADD - IPAM configuration successfully read.*PodName:db-0/.test(wbLog(node, mark)) || undefined,
    180_000,
  );
  // two runs inside the window: the pod of that name exists, its network-status is not written yet
  const first = await runJob(cluster, node, 'twopass-whereabouts-ips');
  await new Promise((r) => setTimeout(r, 2500));
  const second = await runJob(cluster, node, 'twopass-whereabouts-ips');
  for (const j of [first, second]) {
    assert.is(j.condition, 'Complete', summary(j));
    assert.not.ok(
      j.events.some((e) => e.event === 'resource.deleted' || e.event === 'candidate.confirmed'),
      summary(j),
    );
  }
  const inWindow = (await pool(kube, RANGE))[offset(ip)];
  assert.is(
    inWindow?.id,
    oldAlloc.id,
    'both runs ran while the ADD was in flight (the pool not yet written)',
  );
  assert.is(
    wbAddresses(await kube.get(PODS, APPS, 'db-0'), 'wb-slow').length,
    0,
    "and before Multus wrote the new pod's network-status",
  );
  // the other ADD ends: the Lease is free, and the new pod's ADD goes on
  await kube.delete(LEASES, POOL_NS, lease.metadata.name);

  // whereabouts finds the allocation by podref and interface and gives it to the new pod
  const ip2 = await runningWith(kube, 'db-0', 'wb-slow', 240_000);
  assert.is(ip2, ip, "the new pod has its predecessor's address");
  const taken = (await pool(kube, RANGE))[offset(ip)]!;
  assert.is(taken.podref, `${APPS}/db-0`);
  assert.is.not(taken.id, oldAlloc.id, 'the allocation carries the new sandbox');
  assert.is(Object.keys(await pool(kube, RANGE)).length, 1, 'no second allocation was made');
  assert.is((await kube.get(PODS, APPS, 'db-0'))!.metadata.uid, fresh.metadata.uid);
  const third = await runJob(cluster, node, 'twopass-whereabouts-ips');
  await new Promise((r) => setTimeout(r, 2500));
  const fourth = await runJob(cluster, node, 'twopass-whereabouts-ips');
  for (const j of [third, fourth]) {
    assert.is(j.condition, 'Complete', summary(j));
    assert.not.ok(
      j.events.some((e) => e.event === 'resource.deleted'),
      summary(j),
    );
  }
  assert.is((await pool(kube, RANGE))[offset(ip)]?.id, taken.id, 'the live allocation stays');
  assert.ok(await kube.get(RESERVATIONS, POOL_NS, ip), 'and its reservation');
  kubectl(cluster, ['delete', 'statefulset', 'db', '-n', APPS, '--wait=false']);
});

/** The running tasks of containerd (sandboxes and containers) by id; empty while the node is lost. */
function runningTasks(node: Node): Set<string> {
  try {
    return new Set(
      node
        .ctr('tasks', 'ls')
        .split('\n')
        .slice(1)
        .map((l) => l.trim().split(/\s+/))
        .filter((f) => f[2] === 'RUNNING')
        .map((f) => f[0]!),
    );
  } catch {
    return new Set();
  }
}

it('churn: pods created and deleted (some force-deleted, some on a node that is then lost) while the Helm-installed CronJob fires every minute at a short grace: no two running pods ever share an address, no allocation of a live sandbox is freed, and every leak is freed within two runs', async (ctx) => {
  const { cluster, node, kube } = ctx;
  const RANGE = '10.91.0.0/24';
  const NET = 'wb-churn';
  kubectl(
    cluster,
    ['apply', '-f', '-'],
    stringify(
      whereaboutsNad(
        node.dir,
        { range: RANGE, rangeStart: '10.91.0.10', rangeEnd: '10.91.0.250' },
        APPS,
        NET,
      ),
    ),
  );
  kubectl(cluster, ['create', 'namespace', NS]);
  const objs = withConfig(
    renderChart(['functions.whereabouts-ips.apply=true', 'functions.danm-endpoints.enabled=false']),
    shortGrace('whereabouts-ips'),
  );
  ctx.installed = objs;
  apply(cluster, objs);
  kubectl(cluster, [
    'patch',
    'cronjob',
    'twopass-whereabouts-ips',
    '-n',
    NS,
    '-p',
    '{"spec":{"schedule":"* * * * *","suspend":false,"successfulJobsHistoryLimit":100,"failedJobsHistoryLimit":100}}',
  ]);

  const violations: string[] = [];
  /** Sandbox id to the last time its task was seen running. */
  const lastRunning = new Map<string, number>();
  /** Allocation (container id) to when it was first seen with its pod gone. */
  const orphanSince = new Map<string, { at: number; ip: string; podref: string }>();
  const leaks = new Map<string, { at: number; ip: string; podref: string }>();
  const freed: { id: string; ip: string; at: number; job: string }[] = [];
  const runs: { name: string; started: number; ended: number; condition: string }[] = [];
  const seenJobs = new Set<string>();
  let pods = 0;

  const sample = async () => {
    const now = Date.now();
    for (const t of runningTasks(node)) lastRunning.set(t, now);
    const list = (await kube.listAll(PODS, { namespace: APPS })).items;
    const byIp = new Map<string, string>();
    for (const p of list) {
      if ((p.status as { phase?: string } | undefined)?.phase !== 'Running') continue;
      for (const ip of wbAddresses(p, NET)) {
        const other = byIp.get(ip);
        if (other) violations.push(`${ip} held by running pods ${other} and ${p.metadata.name}`);
        byIp.set(ip, p.metadata.name);
      }
    }
    const names = new Set(list.map((p) => `${APPS}/${p.metadata.name}`));
    const allocs = await pool(kube, RANGE);
    const present = new Set<string>();
    for (const [off, a] of Object.entries(allocs)) {
      present.add(a.id);
      const ip = `10.91.0.${off}`;
      if (names.has(a.podref)) orphanSince.delete(a.id);
      else if (!orphanSince.has(a.id)) orphanSince.set(a.id, { at: now, ip, podref: a.podref });
      // gone from the API for 20 s with its allocation still there: no DEL is coming
      const o = orphanSince.get(a.id);
      if (o && now - o.at > 20_000) leaks.set(a.id, o);
    }
    for (const id of orphanSince.keys()) if (!present.has(id)) orphanSince.delete(id);
    // the CronJob's Jobs, read as each ends (its pod's log holds the diff log)
    const jobs = JSON.parse(kubectl(cluster, ['get', 'jobs', '-n', NS, '-o', 'json'])) as { items: Obj[] };
    for (const j of jobs.items) {
      const done = (j.status?.conditions as { type: string; status: string }[] | undefined)?.some(
        (c) => (c.type === 'Complete' || c.type === 'Failed') && c.status === 'True',
      );
      if (!done || seenJobs.has(j.metadata.name)) continue;
      seenJobs.add(j.metadata.name);
      const end = await jobEnd(cluster, node, j.metadata.name);
      const started = Date.parse(String(j.status?.startTime));
      runs.push({ name: j.metadata.name, started, ended: now, condition: end.condition });
      if (end.condition !== 'Complete') violations.push(`Job ${j.metadata.name} ${summary(end)}`);
      for (const e of end.events) {
        if (e.event !== 'resource.deleted' || e.kind !== 'IPPoolAllocation') continue;
        const m = /(\d+\.\d+\.\d+\.\d+) \(([^,]+), container ([0-9a-f]+)\)/.exec(String(e.name));
        if (!m) {
          violations.push(`cannot read deletion ${String(e.name)}`);
          continue;
        }
        const [, ip, , prefix] = m;
        const id = [...lastRunning.keys()].find((t) => t.startsWith(prefix!)) ?? prefix!;
        freed.push({ id, ip: ip!, at: Date.parse(String(e.time ?? '')) || now, job: j.metadata.name });
      }
    }
  };

  let monitoring = true;
  const monitor = (async () => {
    while (monitoring) {
      await sample().catch((e: Error) => violations.push(`monitor: ${e.message}`));
      await new Promise((r) => setTimeout(r, 2000));
    }
  })();

  const live: string[] = [];
  const create = async (n: number) => {
    for (let i = 0; i < n; i++) {
      const name = `p-${++pods}`;
      await createPod(kube, name, NET);
      live.push(name);
    }
  };
  const take = (n: number) => live.splice(0, n);
  const started = Date.now();
  try {
    for (let round = 1; round <= 12; round++) {
      await create(10);
      await new Promise((r) => setTimeout(r, 8000));
      for (const p of take(4)) await kube.delete(PODS, APPS, p);
      for (const p of take(2)) await kube.delete(PODS, APPS, p, undefined, { gracePeriodSeconds: 0 });
      if (round % 4 === 0) {
        // a node lost: the pods force-deleted while it is down never get their DEL
        await node.lose();
        for (const p of take(3)) await kube.delete(PODS, APPS, p, undefined, { gracePeriodSeconds: 0 });
        await new Promise((r) => setTimeout(r, 5000));
        await node.restart();
      }
    }
    // the churn ends; the CronJob goes on until every leak is freed
    const drained = await eventually(
      'every leak is freed',
      () => ([...leaks.keys()].every((id) => freed.some((f) => f.id === id)) && leaks.size > 0) || undefined,
      300_000,
    ).catch(() => false);
    monitoring = false;
    await monitor;
    // wrong frees: a freed allocation whose sandbox was still running after its Job started
    for (const f of freed) {
      const job = runs.find((r) => r.name === f.job)!;
      const seen = lastRunning.get(f.id);
      if (seen && seen >= job.started)
        violations.push(`${f.ip} freed while its sandbox ${f.id.slice(0, 12)} ran`);
    }
    // within two runs: the runs that started after the leak was seen, up to the one that freed it
    const late: string[] = [];
    for (const [id, l] of leaks) {
      const f = freed.find((x) => x.id === id);
      if (!f) continue;
      const job = runs.find((r) => r.name === f.job)!;
      const between = runs.filter((r) => r.started > l.at && r.started <= job.started).length;
      if (between > 2) late.push(`${l.ip} (${l.podref}) freed by the ${between}th run after it leaked`);
    }
    console.log(
      `  churn: ${pods} pods in ${Math.round((Date.now() - started) / 1000)} s, ${leaks.size} leaks made, ` +
        `${freed.filter((f) => leaks.has(f.id)).length} freed by twopass (${freed.length} allocations freed in all), ` +
        `${runs.length} runs, wrong frees = ${violations.filter((v) => v.includes('freed while')).length}`,
    );
    assert.equal(violations, [], violations.join('\n'));
    assert.ok(
      drained,
      `leaks not freed: ${JSON.stringify([...leaks.entries()].filter(([id]) => !freed.some((f) => f.id === id)))}`,
    );
    assert.ok(leaks.size >= 6, `the lost nodes made leaks (${leaks.size})`);
    assert.equal(late, [], late.join('\n'));
    // the allocations left are those of pods that exist
    const names = new Set(
      (await kube.listAll(PODS, { namespace: APPS })).items.map((p) => `${APPS}/${p.metadata.name}`),
    );
    for (const a of Object.values(await pool(kube, RANGE)))
      assert.ok(names.has(a.podref), `${a.podref} is gone, its allocation stays`);
  } finally {
    monitoring = false;
    await monitor;
    kubectl(cluster, [
      'patch',
      'cronjob',
      'twopass-whereabouts-ips',
      '-n',
      NS,
      '-p',
      '{"spec":{"suspend":true}}',
    ]);
    for (const p of live) await kube.delete(PODS, APPS, p).catch(() => undefined);
  }
});

test.run();
