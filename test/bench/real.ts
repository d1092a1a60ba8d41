/**
 * Benchmark 3 and 5 on the real test cluster: 20k pods seeded with concurrent
 * creates (its own rate reported), metadata-only vs full pod lists, a page-size
 * sweep, and a whole twopass run next to the listing floor.
 */
import { readFileSync } from 'node:fs';
import { KubeHttpClient } from '../../shared/kube/client.ts';
import { NAMESPACES, PODS } from '../../shared/kube/resources.ts';
import { ADMIN_TOKEN, startCluster } from '../cluster/cluster.ts';
import { testTime } from '../helpers/time.ts';
import { inParallel, max, mdTable, median, min, ms } from './common.ts';
import { child, IMAGE_NODE_OPTIONS } from './e2e.ts';
import { watchList } from './watchlist.ts';

const RUNS = 3;
const mib = (n: number) => `${Math.round(n)} MiB`;
const secs = (n: number) => `${n.toFixed(2)} s`;

export async function realBench(n = 20_000): Promise<string> {
  const cluster = await startCluster();
  const out: string[] = [];
  try {
    let bytes = 0;
    let requests = 0;
    const opts = {
      server: cluster.server,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      tls: { rejectUnauthorized: false },
    };
    const kube = new KubeHttpClient({
      ...opts,
      connections: 32,
      time: testTime(),
      onResponse: (i) => {
        bytes += i.bytes;
        requests++;
      },
    });
    await kube.create(NAMESPACES, { metadata: { name: 'bench' } });
    const t = performance.now();
    await inParallel(n, 32, async (i) => {
      await kube.create(PODS, {
        metadata: {
          name: `pod-${i}`,
          namespace: 'bench',
          labels: { app: 'bench' },
          annotations: { 'danm.k8s.io/interfaces': '[{"network":"net"}]' },
        },
        spec: {
          containers: [
            { name: 'app', image: 'registry.local/app:1.0', resources: { requests: { cpu: '10m' } } },
          ],
        },
      });
    });
    const seedMs = performance.now() - t;
    const rows: (string | number)[][] = [];
    // What a complete snapshot costs the servers: their CPU seconds (utime + stime from
    // /proc/<pid>/stat) and resident memory growth during the list, next to the client's side.
    const pids = cluster.pids;
    const cost = () => (pids ? { api: procStat(pids.apiserver), etcd: procStat(pids.etcd) } : undefined);
    // page size 0: a streaming list (watch-list) instead of pages
    const variants = [
      ['full objects, streaming', false, 0, true],
      ['metadata only, streaming', true, 0, true],
      ['full objects', false, 500, true],
      ['full objects', false, 500, false],
      ['full objects', false, 1000, true],
      ['metadata only', true, 100, true],
      ['metadata only', true, 500, true],
      ['metadata only', true, 500, false],
      ['metadata only', true, 1000, true],
      ['metadata only', true, 5000, true],
      // page size -1: no list, a GET by name of 1 pod in 100 (4 at a time): what a re-check of the pods a lost node's leaks name costs, beside a list
      ['GET by name, 1% of the pods', false, -1, true],
    ] as const;
    type Sample = {
      ms: number;
      api: number;
      etcd: number;
      apiRss: number;
      rss: number;
      bytes: number;
      requests: number;
      items: number;
    };
    const samples = variants.map((): Sample[] => []);
    // Three rounds, the variants interleaved in each: a warm-up effect (the first list after
    // seeding fills caches) then lands on one sample of every variant, not on one variant.
    for (let round = 0; round < RUNS; round++)
      for (const [v, [, metadataOnly, pageSize, gzip]] of variants.entries()) {
        const c = new KubeHttpClient({
          ...opts,
          pageSize,
          gzip,
          time: testTime(),
          onResponse: (i) => {
            bytes += i.bytes;
            requests++;
          },
        });
        bytes = 0;
        requests = 0;
        const rss0 = process.memoryUsage().rss;
        const before = cost();
        const s = performance.now();
        let items: number;
        if (pageSize === 0) {
          const w = await watchList(cluster.server, opts.headers, '/api/v1/pods', metadataOnly, gzip);
          items = w.items;
          bytes = w.bytes;
          requests = 1;
        } else if (pageSize === -1) {
          const names = Array.from({ length: Math.ceil(n / 100) }, (_, i) => `pod-${i * 100}`);
          await inParallel(names.length, 4, async (i) => {
            await c.get(PODS, 'bench', names[i]!);
          });
          items = names.length;
        } else items = (await c.listAll(PODS, { metadataOnly })).items.length;
        const el = performance.now() - s;
        const after = cost();
        samples[v]!.push({
          ms: el,
          api: before && after ? after.api.cpuSeconds - before.api.cpuSeconds : Number.NaN,
          etcd: before && after ? after.etcd.cpuSeconds - before.etcd.cpuSeconds : Number.NaN,
          apiRss: before && after ? after.api.rssMiB - before.api.rssMiB : Number.NaN,
          rss: (process.memoryUsage().rss - rss0) / 2 ** 20,
          bytes,
          requests,
          items,
        });
        await c.close();
      }
    for (const [v, [label, , pageSize, gzip]] of variants.entries()) {
      const xs = samples[v]!;
      const mm = (f: (x: Sample) => number, fmt: (n: number) => string) => {
        const sorted = xs.map(f).sort((p, q) => p - q);
        return `${fmt(sorted[0]!)} / ${fmt(sorted[Math.floor(sorted.length / 2)]!)}`;
      };
      rows.push([
        label,
        pageSize === -1 ? 'none' : pageSize || 'stream',
        gzip ? 'yes' : 'no',
        xs[0]!.items,
        xs[0]!.requests,
        `${(xs[0]!.bytes / 2 ** 20).toFixed(1)} MiB`,
        mm((x) => x.ms, ms),
        mm((x) => Math.max(0, x.rss), mib),
        mm((x) => x.api, secs),
        mm((x) => Math.max(0, x.apiRss), mib),
        mm((x) => x.etcd, secs),
      ]);
    }
    await kube.close();
    out.push(
      mdTable(
        `Real kube-apiserver (${cluster.version}): listing ${n.toLocaleString('en')} pods`,
        [
          'list',
          'page size',
          'gzip',
          'items',
          'requests',
          'bytes received',
          'time (min / median)',
          'client RSS growth',
          'kube-apiserver CPU',
          'kube-apiserver RSS growth',
          'etcd CPU',
        ],
        rows,
        `Seeding ${n.toLocaleString('en')} pods with 32 concurrent creates took ${ms(seedMs)} (${Math.round(n / (seedMs / 1000))} creates/s). Each cell min / median of ${RUNS} runs, the variants interleaved. resourceVersion unset (a consistent list); server costs read from /proc/<pid> before and after each list.`,
      ),
    );
    const args = [
      '--server',
      cluster.server,
      '--headers',
      JSON.stringify(opts.headers),
      '--insecure',
      'true',
    ];
    const runs: Record<'floor' | 'twopass' | 'capped', { ms: number[]; rss: number[] }> = {
      floor: { ms: [], rss: [] },
      twopass: { ms: [], rss: [] },
      capped: { ms: [], rss: [] },
    };
    for (let round = 0; round < RUNS; round++)
      for (const variant of ['floor', 'twopass', 'capped'] as const) {
        const r = await child(
          ['--fn', 'danm-endpoints', '--variant', variant === 'capped' ? 'twopass' : variant, ...args],
          variant === 'capped' ? IMAGE_NODE_OPTIONS : [],
        );
        runs[variant].ms.push(Number(r.ms));
        runs[variant].rss.push(Number(r.peakRssMiB));
      }
    const row = (label: string, v: { ms: number[]; rss: number[] }) => [
      label,
      `${ms(min(v.ms))} / ${ms(median(v.ms))}`,
      `${max(v.rss)} MiB`,
    ];
    out.push(
      mdTable(
        `Real kube-apiserver: a whole danm-endpoints run vs the listing floor (${n.toLocaleString('en')} pods)`,
        ['variant', 'time (min / median)', 'peak RSS'],
        [
          row('listing floor (same lists, one connection, JSON.parse)', runs.floor),
          row('twopass run (observe + decide + state save)', runs.twopass),
          row('twopass, heap capped as in the image (infra/Dockerfile NODE_OPTIONS)', runs.capped),
          ['ratio (medians)', `${(median(runs.twopass.ms) / median(runs.floor.ms)).toFixed(2)}x`, ''],
        ],
        `${RUNS} rounds, each variant a fresh process, interleaved. Goals: within 1.2x of the floor; peak RSS under 160 MiB at 50,000 pods.`,
      ),
    );
  } finally {
    await cluster.stop();
  }
  return out.join('\n');
}

if (import.meta.main) console.log(await realBench(Number(process.argv[2] ?? 20_000)));

/** A process's CPU seconds so far (utime + stime) and resident memory, from /proc. */
function procStat(pid: number): { cpuSeconds: number; rssMiB: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]); // utime, stime (fields 14 and 15)
  const rss = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
  return { cpuSeconds: ticks / 100, rssMiB: Number(rss ?? 0) / 1024 };
}
