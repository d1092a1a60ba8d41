/**
 * Benchmark 2 and 5: each function end to end on the fake API servers at 10k and
 * 100k objects, next to the naive per-object cleaner and the listing floor, each
 * in its own process (peak RSS); requests and bytes are counted by the servers.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KubeHttpClient } from '../../shared/kube/client.ts';
import { NAMESPACES } from '../../shared/kube/resources.ts';
import { installCrdsFromDir } from '../../shared/sandbox/crds.ts';
import { FakeKubeServer } from '../../shared/sandbox/kube/server.ts';
import { FakeOpenStack } from '../../shared/sandbox/openstack/server.ts';
import { testTime } from '../helpers/time.ts';
import { mdTable, ms } from './common.ts';
import { danmWorld, lbaasWorld, NS, whereaboutsWorld } from './worlds.ts';

/** Runs e2e-one.ts in its own process (a clean peak RSS) and returns its JSON line. */
export function child(args: string[]): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    // TWOPASS_BENCH_NODE_ARGS: flags for the measured process, e.g. --cpu-prof (profiling a gap)
    const flags = process.env.TWOPASS_BENCH_NODE_ARGS?.split(' ').filter(Boolean) ?? [];
    const c = spawn(
      process.execPath,
      [...flags, new URL('./e2e-one.ts', import.meta.url).pathname, ...args],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let out = '';
    let err = '';
    c.stdout.on('data', (d: Buffer) => (out += d));
    c.stderr.on('data', (d: Buffer) => (err += d));
    c.on('exit', (code) => {
      try {
        resolve(JSON.parse(out.trim().split('\n').pop() ?? '') as Record<string, unknown>);
      } catch {
        reject(new Error(`e2e-one ${args.join(' ')} exit ${code}: ${err.slice(-1500)}`));
      }
    });
  });
}

export async function e2eBench(
  sizes = [10_000, 100_000],
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
      const res: Record<string, { ms: number; rss: number; req: number; bytes: number }> = {};
      for (const variant of ['floor', 'twopass', ...(fn === 'lbaas-ports' ? [] : ['naive'])]) {
        const k0 = fake.requests.length;
        const o0 = os.requests.length;
        const r = await child(['--fn', fn, '--variant', variant, '--server', fake.url, '--env', env]);
        const kreq = fake.requests.slice(k0);
        const oreq = os.requests.slice(o0);
        res[variant] = {
          ms: Number(r.ms),
          rss: Number(r.peakRssMiB),
          req: kreq.length + oreq.length,
          bytes: [...kreq, ...oreq].reduce((a, x) => a + x.bytes, 0),
        };
      }
      const tp = res.twopass!;
      const fl = res.floor!;
      const nv = res.naive;
      const mib = (b: number) => `${(b / 2 ** 20).toFixed(1)} MiB`;
      rows.push([
        fn,
        n.toLocaleString('en'),
        `${ms(seedMs)}`,
        `${fl.req} / ${mib(fl.bytes)} / ${ms(fl.ms)} / ${fl.rss} MiB`,
        `${tp.req} / ${mib(tp.bytes)} / ${ms(tp.ms)} / ${tp.rss} MiB`,
        nv ? `${nv.req} / ${mib(nv.bytes)} / ${ms(nv.ms)} / ${nv.rss} MiB` : 'n/a',
        `${(tp.ms / fl.ms).toFixed(2)}x`,
        nv ? `${(nv.req / tp.req).toFixed(0)}x req, ${(nv.ms / tp.ms).toFixed(1)}x time` : 'n/a',
      ]);
      await fake.stop();
      await os.stop();
    }
  }
  return mdTable(
    'End to end on the fake API servers (requests / bytes received / wall time / peak RSS)',
    [
      'function',
      'objects',
      'bulk seed',
      'listing floor',
      'twopass run (observe + decide + state save)',
      'naive: list, then GET each pod',
      'twopass / floor',
      'naive / twopass',
    ],
    rows,
    'Page size 500. twopass runs as a dry run with --record (no deletions). Both twopass and the floor ask for gzip (the fake compresses pages over 128 KiB, as the API server does). lbaas-ports counts Kubernetes and Neutron requests; its floor makes the same Neutron lists (with a token) and the Services list. Goals: twopass within 1.3x of the floor at 100k; naive at least 10x the requests and 5x the time; twopass peak RSS under 256 MiB at 100k.',
  );
}

if (import.meta.main) {
  const sizes = process.argv.includes('--quick') ? [10_000] : [10_000, 100_000];
  console.log(await e2eBench(sizes));
}
