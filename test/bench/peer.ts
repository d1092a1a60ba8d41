/**
 * The peer, side by side: whereabouts' own IP reconciler (built from the Go module proxy,
 * test/bench/peer/) and `twopass run whereabouts-ips` against the same world on the real
 * kube-apiserver: N pods with network-status, IPPools of 1000 allocations, 1% of them
 * leaked (their pod is gone). Requests are counted from the apiserver's audit log by user
 * agent; bytes by a counting TCP proxy in front of the apiserver (TLS included); peak RSS
 * by /usr/bin/time. The world is restored between the peer and twopass.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type Server, connect as tcpConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { IPPOOLS, NETWORK_STATUS } from '../../functions/whereabouts-ips/model.ts';
import type { KubeHttpClient } from '../../shared/kube/client.ts';
import { NAMESPACES, PODS } from '../../shared/kube/resources.ts';
import { formatAddress, parseCidr } from '../../shared/net/ip.ts';
import { ADMIN_TOKEN, adminClient, type Cluster, startCluster } from '../cluster/cluster.ts';
import { inParallel, mdTable, ms, runProcess } from './common.ts';

export const PEER_VERSION = process.env.TWOPASS_WHEREABOUTS_VERSION ?? 'v0.9.2';
const NS = 'bench';

/** Builds (or finds cached) the peer binary; its path. */
export function buildPeer(): string {
  const r = spawnSync('bash', [new URL('./peer/build.sh', import.meta.url).pathname], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const path = r.stdout.trim().split('\n').pop() ?? '';
  if (r.status !== 0 || !path) throw new Error('test/bench/peer/build.sh failed: cannot build the peer');
  return path;
}

const poolRange = (p: number) => `10.${64 + (p >> 6)}.${(p & 63) * 4}.0/22`;
const addr = (i: number) => {
  const c = parseCidr(poolRange(Math.floor(i / 1000)))!;
  return formatAddress(4, c.network + BigInt((i % 1000) + 1));
};
const leaked = (i: number) => i % 100 === 0;

function poolObjects(n: number) {
  const out = [];
  for (let p = 0; p < Math.ceil(n / 1000); p++) {
    const allocations: Record<string, { id: string; podref: string; ifname: string }> = {};
    for (let j = 0; j < 1000 && p * 1000 + j < n; j++) {
      const i = p * 1000 + j;
      allocations[String(j + 1)] = {
        id: `c${i}`,
        podref: `${NS}/${leaked(i) ? `gone-${i}` : `pod-${i}`}`,
        ifname: 'net1',
      };
    }
    out.push({
      apiVersion: 'whereabouts.cni.cncf.io/v1alpha1',
      kind: 'IPPool',
      metadata: { name: `pool-${p}`, namespace: NS },
      spec: { range: poolRange(p), allocations },
    });
  }
  return out;
}

async function seed(kube: KubeHttpClient, n: number): Promise<number> {
  await kube.create(NAMESPACES, { metadata: { name: NS } });
  const t = performance.now();
  await inParallel(n, 32, async (i) => {
    if (leaked(i)) return; // its pod is gone
    await kube.create(PODS, {
      metadata: {
        name: `pod-${i}`,
        namespace: NS,
        annotations: {
          [NETWORK_STATUS]: JSON.stringify([{ name: `${NS}/net`, interface: 'net1', ips: [addr(i)] }]),
        },
      },
      spec: { containers: [{ name: 'app', image: 'registry.local/app:1.0' }] },
    });
  });
  await setPools(kube, n);
  return performance.now() - t;
}

/** (Re)creates the pools with every allocation, leaked ones included. */
async function setPools(kube: KubeHttpClient, n: number): Promise<void> {
  for (const p of poolObjects(n)) {
    const name = p.metadata.name;
    if (await kube.get(IPPOOLS, NS, name)) await kube.delete(IPPOOLS, NS, name);
    await kube.create(IPPOOLS, p);
  }
}

async function allocationCount(kube: KubeHttpClient): Promise<number> {
  let n = 0;
  for (const p of (await kube.listAll(IPPOOLS, {})).items)
    n += Object.keys((p.spec as { allocations?: object }).allocations ?? {}).length;
  return n;
}

/** A TCP proxy to the apiserver that counts the bytes each way. */
async function countingProxy(target: URL): Promise<{
  url: string;
  take: () => { received: number; sent: number };
  close: () => Promise<void>;
}> {
  let received = 0;
  let sent = 0;
  const server: Server = createServer((client) => {
    const up = tcpConnect(Number(target.port), target.hostname);
    client.on('data', (d: Buffer) => (sent += d.length));
    up.on('data', (d: Buffer) => (received += d.length));
    client.pipe(up).pipe(client);
    const end = () => {
      client.destroy();
      up.destroy();
    };
    client.on('error', end);
    up.on('error', end);
    client.on('close', end);
    up.on('close', end);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return {
    url: `https://127.0.0.1:${port}`,
    take: () => {
      const r = { received, sent };
      received = 0;
      sent = 0;
      return r;
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

/** Requests in the audit log after byte `from` (its size before the run), by user agent prefix. */
function auditRequests(cluster: Cluster, from: number, agent: string): number {
  let count = 0;
  for (const l of readFileSync(cluster.auditLog!).subarray(from).toString('utf8').split('\n')) {
    if (l && (JSON.parse(l) as { userAgent?: string }).userAgent?.startsWith(agent)) count++;
  }
  return count;
}

/** Runs a command under /usr/bin/time: its wall time, peak RSS and stdout. */
async function timed(cmd: string, args: string[]): Promise<{ ms: number; rssMiB: number; stdout: string }> {
  const t = performance.now();
  const r = await runProcess('/usr/bin/time', ['-f', 'maxrss-kib=%M', cmd, ...args]);
  const ms = performance.now() - t;
  const kib = /maxrss-kib=(\d+)/.exec(r.stderr)?.[1];
  if (r.code !== 0 || !kib) throw new Error(`${cmd} exit ${r.code}: ${r.stderr.slice(-1500)}`);
  return { ms, rssMiB: Math.round(Number(kib) / 1024), stdout: r.stdout };
}

export async function peerBench(sizes = [5_000, 30_000]): Promise<string> {
  const peer = buildPeer();
  const rows: (string | number)[][] = [];
  for (const n of sizes) {
    const cluster = await startCluster({ audit: true });
    const proxy = await countingProxy(new URL(cluster.server));
    try {
      const kube = adminClient(cluster, ADMIN_TOKEN, { connections: 32 });
      const seedMs = await seed(kube, n);
      const total = await allocationCount(kube);
      const dir = mkdtempSync(join(tmpdir(), 'twopass-peer-'));
      const kubeconfig = join(dir, 'kubeconfig');
      writeFileSync(kubeconfig, cluster.kubeconfig().replaceAll(cluster.server, proxy.url));
      const measure = async (label: string, agent: string, cmd: string, args: string[]) => {
        const from = statSync(cluster.auditLog!).size;
        proxy.take();
        const r = await timed(cmd, args);
        const bytes = proxy.take();
        const requests = auditRequests(cluster, from, agent);
        const left = await allocationCount(kube);
        return { label, ...r, requests, bytes, released: total - left };
      };
      // the peer: one reconciler run (lists pools and pods, updates each pool with leaks)
      const p = await measure('whereabouts reconciler', 'peer-reconciler', peer, ['-kubeconfig', kubeconfig]);
      await setPools(kube, n);
      // twopass: the observing run, then the deleting run (grace 0 for the benchmark)
      const one = new URL('./e2e-one.ts', import.meta.url).pathname;
      const state = mkdtempSync(join(tmpdir(), 'twopass-peer-state-'));
      const tpArgs = (apply: boolean) => [
        one,
        ...['--fn', 'whereabouts-ips', '--variant', 'twopass', '--server', proxy.url],
        ...['--headers', JSON.stringify({ authorization: `Bearer ${ADMIN_TOKEN}` }), '--insecure', 'true'],
        ...['--state', state, '--grace-ms', '0', '--apply', String(apply)],
      ];
      const t1 = await measure('twopass, first run (records)', 'twopass', process.execPath, tpArgs(false));
      const t2 = await measure('twopass, deleting run', 'twopass', process.execPath, tpArgs(true));
      await kube.close();
      const mib = (b: number) => `${(b / 2 ** 20).toFixed(1)} MiB`;
      for (const r of [p, t1, t2])
        rows.push([
          n.toLocaleString('en'),
          r.label,
          r.requests,
          mib(r.bytes.received),
          mib(r.bytes.sent),
          ms(r.ms),
          `${r.rssMiB} MiB`,
          `${r.released} of ${total / 100}`,
        ]);
      rows.push([
        n.toLocaleString('en'),
        `(seeding: ${ms(seedMs)}; ${total} allocations in ${Math.ceil(n / 1000)} pools)`,
        '',
        '',
        '',
        '',
        '',
        '',
      ]);
    } finally {
      await proxy.close();
      await cluster.stop();
    }
  }
  return mdTable(
    `The peer: whereabouts ${PEER_VERSION} reconciler vs twopass whereabouts-ips (real kube-apiserver)`,
    ['pods', 'run', 'requests', 'bytes received', 'bytes sent', 'wall time', 'peak RSS', 'released'],
    rows,
    `Same world for both (restored in between): pods with network-status, IPPools of 1000 allocations, 1% leaked (their pod is gone). The peer is whereabouts' own reconciler (pkg/reconciler, as its ip-control-loop runs it), built from the Go module proxy (test/bench/peer/). Requests from the apiserver's audit log (by user agent), bytes through a counting TCP proxy (TLS included), peak RSS from /usr/bin/time, wall time includes process start. twopass's deleting run has grace 0 here; it re-checks the allocations on fresh pods (a GET of each pod named, or one list of every pod shared by the pools where that costs the apiserver less), patches each pool with a test of every allocation it removes (the patch's answer is the read-back), and records one Event per pool.`,
  );
}

if (import.meta.main) {
  const sizes = process.argv.slice(2).map(Number).filter(Boolean);
  console.log(await peerBench(sizes.length ? sizes : [5_000, 30_000]));
}
