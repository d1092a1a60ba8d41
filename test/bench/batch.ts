/**
 * Writes to one object together: N leaked bits on one DanmNet and N leaked allocations in
 * one IPPool, on the fake API server at the default concurrency (4). A first observation,
 * then one run after the grace window: how many went in that run, and what it cost.
 */
import { danmEndpoints } from '../../functions/danm-endpoints/index.ts';
import { whereaboutsIps } from '../../functions/whereabouts-ips/index.ts';
import type { AnyFunction } from '../../shared/contract/index.ts';
import { MINUTE as MIN } from '../../shared/contract/index.ts';
import { KubeHttpClient } from '../../shared/kube/client.ts';
import { NAMESPACES } from '../../shared/kube/resources.ts';
import { installCrdsFromDir } from '../../shared/sandbox/crds.ts';
import { FakeKubeServer } from '../../shared/sandbox/kube/server.ts';
import { createNetwork } from '../../shared/sandbox/scenarios/danm.ts';
import { containerId, createPool } from '../../shared/sandbox/scenarios/whereabouts.ts';
import { runner } from '../helpers/runner.ts';
import { testTime } from '../helpers/time.ts';

type Row = {
  fn: string;
  leaks: number;
  reclaimed: number;
  requests: number;
  writes: number;
  events: number;
  ms: number;
};

async function one(fn: AnyFunction, leaks: number): Promise<Row> {
  const fake = new FakeKubeServer();
  await fake.start();
  const kube = new KubeHttpClient({ server: fake.url, time: testTime() });
  try {
    await installCrdsFromDir(kube);
    const ns = 'bench';
    await kube.create(NAMESPACES, { metadata: { name: ns } });
    if (fn === danmEndpoints) {
      const bits = Array.from({ length: leaks }, (_, i) => {
        const n = i + 2;
        return `10.20.${Math.floor(n / 256)}.${n % 256}`;
      });
      await createNetwork(kube, ns, 'net', '10.20.0.0/16', bits);
    } else {
      const allocs: Record<string, { id: string; podref: string }> = {};
      for (let i = 0; i < leaks; i++) {
        const n = i + 2;
        allocs[`10.30.${Math.floor(n / 256)}.${n % 256}`] = { id: containerId(), podref: `${ns}/gone-${i}` };
      }
      await createPool(kube, ns, 'pool', '10.30.0.0/16', allocs);
    }
    const r = runner(fn, { server: fake.url }, [ns], Date.now() + MIN, {
      maxDeletions: 100_000,
      maxDeletionPercent: 100,
    });
    await r.run();
    r.now += 11 * MIN;
    const seq = fake.requests.length;
    const t0 = performance.now();
    const res = await r.run();
    const ms = performance.now() - t0;
    const reqs = fake.requests.slice(seq);
    return {
      fn: fn.name,
      leaks,
      reclaimed: res.deleted.length,
      requests: reqs.length,
      writes: reqs.filter(
        (q) => (q.method === 'PUT' || q.method === 'PATCH') && !q.path.includes('configmaps'),
      ).length,
      events: reqs.filter((q) => q.method === 'POST' && q.path.endsWith('/events')).length,
      ms: Math.round(ms),
    };
  } finally {
    await kube.close();
    await fake.stop();
  }
}

export async function batchBench(sizes: readonly number[]): Promise<string> {
  const rows: Row[] = [];
  for (const fn of [danmEndpoints, whereaboutsIps]) for (const n of sizes) rows.push(await one(fn, n));
  const head =
    '### Leaks of one object, reclaimed in the first run after their grace (fake API server, concurrency 4)\n\n' +
    '| function | leaks in one object | reclaimed in that run | requests | writes to the object | Events | wall ms |\n|---|---|---|---|---|---|---|';
  return `${head}\n${rows.map((r) => `| ${r.fn} | ${r.leaks} | ${r.reclaimed} | ${r.requests} | ${r.writes} | ${r.events} | ${r.ms} |`).join('\n')}\n`;
}
