/**
 * `npm run bench`: every benchmark, each printing a markdown table; the tables are
 * also written to test/bench/RESULTS.md. Benchmarks are not tests: no verdicts.
 *   npm run bench -- engine|e2e|http|rules|batch|startup|churn|act|real|peer|node   one of them
 *   npm run bench -- --quick                smaller sizes
 */
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { stopRealCluster } from '../cluster/cluster.ts';
import { actBench } from './act.ts';
import { batchBench } from './batch.ts';
import { churnBench } from './churn.ts';
import { resultsFile } from './common.ts';
import { e2eBench } from './e2e.ts';
import { engineBench } from './engine.ts';
import { httpBench } from './http.ts';
import { nodeMemoryBench } from './node-memory.ts';
import { peerBench } from './peer.ts';
import { realBench } from './real.ts';
import { rulesBench } from './rules.ts';
import { startupBench } from './startup.ts';

const quick = process.argv.includes('--quick');
const only = process.argv.slice(2).filter((a) => !a.startsWith('--'));
const want = (name: string) => only.length === 0 || only.includes(name);
const sections: string[] = [];
const out = (s: string) => {
  console.log(s);
  sections.push(s);
};
let failed = 0;
/** The cluster binaries, built (once, then cached) exactly as `npm test` does. */
function buildCluster(): void {
  const b = spawnSync('bash', [new URL('../cluster/build.sh', import.meta.url).pathname], {
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  if (b.status !== 0) throw new Error('test/cluster/build.sh failed: cannot run the real-cluster benchmark');
}
/** One benchmark; a failure is printed as its section (and the exit code), never losing the others. */
async function section(name: string, bench: () => string | Promise<string>): Promise<void> {
  if (!want(name)) return;
  try {
    out(await bench());
  } catch (err) {
    failed++;
    out(`### ${name}\n\nfailed: ${(err as Error).message.slice(0, 2000)}\n`);
  }
}
await section('engine', () => engineBench(quick ? [10_000, 100_000] : [10_000, 100_000, 1_000_000]));
await section('e2e', () => e2eBench(quick ? [10_000] : [10_000, 150_000]));
await section('http', () => httpBench());
await section('rules', () => rulesBench(quick ? [10_000] : [10_000, 150_000]));
await section('batch', () => batchBench(quick ? [6, 50] : [6, 50, 300]));
await section('startup', () => startupBench(quick ? 3 : 7));
if (want('real')) {
  if (process.env.TWOPASS_NO_REAL_CLUSTER === '1')
    out('### Real kube-apiserver\n\nskipped: TWOPASS_NO_REAL_CLUSTER=1\n');
  else {
    buildCluster();
    await section('real', () => realBench(quick ? 5_000 : 50_000));
  }
}
await section('churn', () =>
  churnBench(quick ? [1000, 0] : [4000, 1000, 250, 50, 0], process.env.TWOPASS_NO_REAL_CLUSTER !== '1'),
);
if (want('act')) {
  // Deleting runs: the fakes always; the real kube-apiserver and Neutron unless told not to.
  const real = process.env.TWOPASS_NO_REAL_CLUSTER !== '1';
  const os = real && process.env.TWOPASS_NO_REAL_OPENSTACK !== '1';
  if (!real) out('### Deleting runs on the real servers\n\nskipped: TWOPASS_NO_REAL_CLUSTER=1\n');
  else if (!os) out('### Deleting runs on the real Neutron\n\nskipped: TWOPASS_NO_REAL_OPENSTACK=1\n');
  await section('act', () =>
    actBench({
      ...(real ? { realPods: quick ? 5_000 : 50_000 } : {}),
      fakePods: quick ? 10_000 : 150_000,
      ...(os ? { ports: quick ? 100 : 1_000 } : {}),
    }),
  );
}
if (want('peer')) {
  if (process.env.TWOPASS_NO_REAL_CLUSTER === '1')
    out('### The peer\n\nskipped: TWOPASS_NO_REAL_CLUSTER=1\n');
  else await section('peer', () => peerBench(quick ? [5_000] : [5_000, 30_000]));
}
// the real node (root, test/node/build.sh): the CronJob's pod under its memory limit
await section('node', () => nodeMemoryBench(quick ? [10_000] : [10_000, 50_000, 150_000, 300_000]));
if (!quick && only.length === 0) {
  const path = new URL('./RESULTS.md', import.meta.url);
  let previous: string | undefined;
  try {
    previous = readFileSync(path, 'utf8');
  } catch {
    /* first run */
  }
  writeFileSync(path, resultsFile(previous, sections));
}
// the real cluster the churn benchmark started (the others start and stop their own)
await stopRealCluster();
if (failed) process.exitCode = 1;
