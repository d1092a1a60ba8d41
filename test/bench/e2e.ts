/**
 * Benchmark 2 and 5: each function end to end on the fake API servers at 10k and
 * 100k objects, next to the naive per-object cleaner and the listing floor, each
 * in its own process (peak RSS); requests and bytes are counted by the servers.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KubeHttpClient } from '../../shared/kube/client.ts';
import { NAMESPACES } from '../../shared/kube/resources.ts';
import { installCrdsFromDir } from '../../shared/sandbox/crds.ts';
import { FakeKubeServer } from '../../shared/sandbox/kube/server.ts';
import { FakeOpenStack } from '../../shared/sandbox/openstack/server.ts';
import { testTime } from '../helpers/time.ts';
import { max, mdTable, median, min, ms, runProcess } from './common.ts';
import { danmWorld, lbaasWorld, NS, whereaboutsWorld } from './worlds.ts';

const RUNS = 3;
/** The V8 flags the image runs with (its NODE_OPTIONS). */
export const IMAGE_NODE_OPTIONS = (
  /^ENV NODE_OPTIONS="([^"]*)"/m.exec(
    readFileSync(new URL('../../infra/Dockerfile', import.meta.url), 'utf8'),
  )?.[1] ?? ''
)
  .split(' ')
  .filter(Boolean);
const QPS = [20, 50];

/** Runs e2e-one.ts in its own process (a clean peak RSS) and returns its JSON line. */
export async function child(args: string[], nodeFlags: string[] = []): Promise<Record<string, unknown>> {
  // TWOPASS_BENCH_NODE_ARGS: flags for the measured process, e.g. --cpu-prof (profiling a gap)
  const flags = [...nodeFlags, ...(process.env.TWOPASS_BENCH_NODE_ARGS?.split(' ').filter(Boolean) ?? [])];
  const r = await runProcess(process.execPath, [
    ...flags,
    new URL('./e2e-one.ts', import.meta.url).pathname,
    ...args,
  ]);
  try {
    return JSON.parse(r.stdout.trim().split('\n').pop() ?? '') as Record<string, unknown>;
  } catch {
    throw new Error(`e2e-one ${args.join(' ')} exit ${r.code}: ${r.stderr.slice(-1500)}`);
  }
}

export async function e2eBench(
  sizes = [10_000, 150_000],
  fns = ['danm-endpoints', 'whereabouts-ips', 'lbaas-ports'],
): Promise<string> {
  const rows: (string | number)[][] = [];
  for (const fn of fns) {
    for (const n of sizes) {
      const fake = new FakeKubeServer({ continueTtlMs: 3_600_000 });
      await fake.start();
      const os = new FakeOpenStack();
      await os.start();
      const admin = new KubeHttpClient({ server: fake.url, time: testTime() });
      await installCrdsFromDir(admin);
      await admin.close();
      fake.store.seed(NAMESPACES, [{ metadata: { name: NS } }]);
      const seedStart = performance.now();
      if (fn === 'danm-endpoints') danmWorld(fake, n);
      else if (fn === 'whereabouts-ips') whereaboutsWorld(fake, n);
      else lbaasWorld(fake, os, n);
      const seedMs = performance.now() - seedStart;
      const dir = mkdtempSync(join(tmpdir(), 'twopass-bench-os-'));
      writeFileSync(join(dir, 'clouds.yaml'), os.cloudsYaml());
      const env = JSON.stringify({ OS_CLOUD: 'fake', OS_CLIENT_CONFIG_FILE: join(dir, 'clouds.yaml') });
      type Cell = { ms: number[]; rss: number[]; req: number; bytes: number };
      const res: Record<string, Cell> = {};
      const variants = ['floor', 'twopass', 'capped', ...(fn === 'lbaas-ports' ? [] : ['naive'])];
      // Rounds interleave the variants: a noisy minute lands on one sample of each, not on one variant.
      for (let round = 0; round < RUNS; round++)
        for (const variant of variants) {
          const k0 = fake.requests.length;
          const o0 = os.requests.length;
          // capped: twopass with the heap cap the image sets (NODE_OPTIONS in infra/Dockerfile)
          const r = await child(
            [
              '--fn',
              fn,
              '--variant',
              variant === 'capped' ? 'twopass' : variant,
              '--server',
              fake.url,
              '--env',
              env,
            ],
            variant === 'capped' ? IMAGE_NODE_OPTIONS : [],
          );
          const kreq = fake.requests.slice(k0);
          const oreq = os.requests.slice(o0);
          res[variant] ??= {
            ms: [],
            rss: [],
            req: kreq.length + oreq.length,
            bytes: [...kreq, ...oreq].reduce((a, x) => a + x.bytes, 0),
          };
          const c = res[variant];
          c.ms.push(Number(r.ms));
          c.rss.push(Number(r.peakRssMiB));
        }
      const tp = res.twopass!;
      const cp = res.capped!;
      const fl = res.floor!;
      const nv = res.naive;
      const mib = (b: number) => `${(b / 2 ** 20).toFixed(1)} MiB`;
      const cell = (c: Cell) =>
        `${c.req} / ${mib(c.bytes)} / ${ms(min(c.ms))} / ${ms(median(c.ms))} / ${max(c.rss)} MiB`;
      // What the naive cleaner's requests cost at the client-side rate limit cleaners run with.
      const atQps = (req: number) =>
        QPS.map((q) => `${(req / q / 60).toFixed(req / q < 600 ? 1 : 0)} min at ${q}`).join(', ');
      rows.push([
        fn,
        n.toLocaleString('en'),
        `${ms(seedMs)}`,
        cell(fl),
        cell(tp),
        cell(cp),
        nv ? cell(nv) : 'n/a',
        `${(median(tp.ms) / median(fl.ms)).toFixed(2)}x`,
        nv
          ? `${(nv.req / tp.req).toFixed(0)}x req, ${(median(nv.ms) / median(tp.ms)).toFixed(1)}x time`
          : 'n/a',
        nv ? atQps(nv.req) : 'n/a',
      ]);
      await fake.stop();
      await os.stop();
    }
  }
  return mdTable(
    'End to end on the fake API servers (requests / bytes received / wall time min / median / peak RSS)',
    [
      'function',
      'objects',
      'bulk seed',
      'listing floor',
      'twopass run (observe + decide + state save)',
      'twopass, heap capped as in the image',
      'naive: list, then GET each pod',
      'twopass / floor (medians)',
      'naive / twopass',
      'naive at a client QPS limit of 20 / 50',
    ],
    rows,
    `Page size 500. Each cell: ${RUNS} runs, each a fresh process, the variants interleaved; peak RSS is the highest of the runs. twopass runs as a dry run with --record (no deletions). The naive cleaner's time is on loopback (a GET costs ~0.25 ms); the last column is what its requests take at the client-side rate limit cleaners usually run with (client-go's default is 5 QPS; 20-50 is typical when raised), against a remote apiserver.  Both twopass and the floor ask for gzip (the fake compresses pages over 128 KiB, as the API server does). lbaas-ports counts Kubernetes and Neutron requests; its floor makes the same Neutron lists (with a token) and the Services list. Goals: twopass within 1.2x of the floor at 150k, peak RSS under 160 MiB at 150k; naive at least 10x the requests and 5x the time.`,
  );
}

if (import.meta.main) {
  const sizes = process.argv.includes('--quick') ? [10_000] : [10_000, 150_000];
  console.log(await e2eBench(sizes));
}
