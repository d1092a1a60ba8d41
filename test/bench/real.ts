/**
 * Benchmark 3 and 5 on the real test cluster: 20k pods seeded with concurrent
 * creates (its own rate reported), metadata-only vs full pod lists, a page-size
 * sweep, and a whole twopass run next to the listing floor.
 */
import { KubeHttpClient } from '../../shared/kube/client.ts';
import { NAMESPACES, PODS } from '../../shared/kube/resources.ts';
import { ADMIN_TOKEN, startCluster } from '../cluster/cluster.ts';
import { testTime } from '../helpers/time.ts';
import { mdTable, ms } from './common.ts';
import { child } from './e2e.ts';

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
    let next = 0;
    await Promise.all(
      Array.from({ length: 32 }, async () => {
        for (;;) {
          const i = next++;
          if (i >= n) return;
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
        }
      }),
    );
    const seedMs = performance.now() - t;
    const rows: (string | number)[][] = [];
    for (const [label, metadataOnly, pageSize] of [
      ['full objects', false, 500],
      ['metadata only', true, 100],
      ['metadata only', true, 500],
      ['metadata only', true, 1000],
      ['metadata only', true, 5000],
    ] as const) {
      const c = new KubeHttpClient({
        ...opts,
        pageSize,
        time: testTime(),
        onResponse: (i) => {
          bytes += i.bytes;
          requests++;
        },
      });
      bytes = 0;
      requests = 0;
      const rss0 = process.memoryUsage().rss;
      const s = performance.now();
      const r = await c.listAll(PODS, { metadataOnly });
      const el = performance.now() - s;
      rows.push([
        label,
        pageSize,
        r.items.length,
        requests,
        `${(bytes / 2 ** 20).toFixed(1)} MiB`,
        ms(el),
        `${Math.max(0, Math.round((process.memoryUsage().rss - rss0) / 2 ** 20))} MiB`,
      ]);
      await c.close();
    }
    await kube.close();
    out.push(
      mdTable(
        `Real kube-apiserver (${cluster.version}): listing ${n.toLocaleString('en')} pods`,
        ['list', 'page size', 'items', 'requests', 'bytes', 'time', 'RSS growth'],
        rows,
        `Seeding ${n.toLocaleString('en')} pods with 32 concurrent creates took ${ms(seedMs)} (${Math.round(n / (seedMs / 1000))} creates/s).`,
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
    const floor = await child(['--fn', 'danm-endpoints', '--variant', 'floor', ...args]);
    const tp = await child(['--fn', 'danm-endpoints', '--variant', 'twopass', ...args]);
    out.push(
      mdTable(
        `Real kube-apiserver: a whole danm-endpoints run vs the listing floor (${n.toLocaleString('en')} pods)`,
        ['variant', 'time', 'peak RSS'],
        [
          [
            'listing floor (same lists, one connection, JSON.parse)',
            ms(Number(floor.ms)),
            `${floor.peakRssMiB} MiB`,
          ],
          ['twopass run (observe + decide + state save)', ms(Number(tp.ms)), `${tp.peakRssMiB} MiB`],
          ['ratio', `${(Number(tp.ms) / Number(floor.ms)).toFixed(2)}x`, ''],
        ],
        'Goal: within 1.3x of the floor.',
      ),
    );
  } finally {
    await cluster.stop();
  }
  return out.join('\n');
}

if (import.meta.main) console.log(await realBench(Number(process.argv[2] ?? 20_000)));
