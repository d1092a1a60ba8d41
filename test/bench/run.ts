/**
 * `npm run bench`: every benchmark, each printing a markdown table; the tables are
 * also written to test/bench/RESULTS.md. Benchmarks are not tests: no verdicts.
 *   npm run bench -- engine|e2e|http|rules|batch|real|peer   one of them
 *   npm run bench -- --quick                smaller sizes
 */
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { batchBench } from './batch.ts';
import { e2eBench } from './e2e.ts';
import { engineBench } from './engine.ts';
import { httpBench } from './http.ts';
import { peerBench } from './peer.ts';
import { realBench } from './real.ts';
import { rulesBench } from './rules.ts';

const quick = process.argv.includes('--quick');
const only = process.argv.slice(2).filter((a) => !a.startsWith('--'));
const want = (name: string) => only.length === 0 || only.includes(name);
const sections: string[] = [];
const out = (s: string) => {
  console.log(s);
  sections.push(s);
};
if (want('engine')) out(engineBench(quick ? [10_000, 100_000] : [10_000, 100_000, 1_000_000]));
if (want('e2e')) out(await e2eBench(quick ? [10_000] : [10_000, 100_000]));
if (want('http')) out(await httpBench());
if (want('rules')) out(rulesBench(quick ? [10_000] : [10_000, 150_000]));
if (want('batch')) out(await batchBench(quick ? [6, 50] : [6, 50, 300]));
if (want('real')) {
  if (process.env.TWOPASS_NO_REAL_CLUSTER === '1')
    out('### Real kube-apiserver\n\nskipped: TWOPASS_NO_REAL_CLUSTER=1\n');
  else {
    // the cluster binaries are built (once, then cached) exactly as `npm test` does
    const b = spawnSync('bash', [new URL('../cluster/build.sh', import.meta.url).pathname], {
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    if (b.status !== 0)
      throw new Error('test/cluster/build.sh failed: cannot run the real-cluster benchmark');
    out(await realBench(quick ? 5_000 : 50_000));
  }
}
if (want('peer')) {
  if (process.env.TWOPASS_NO_REAL_CLUSTER === '1')
    out('### The peer\n\nskipped: TWOPASS_NO_REAL_CLUSTER=1\n');
  else out(await peerBench(quick ? [5_000] : [5_000, 30_000]));
}
if (!quick && only.length === 0) {
  const path = new URL('./RESULTS.md', import.meta.url);
  let history = '';
  try {
    history = readFileSync(path, 'utf8').split('\n## What changed')[1] ?? '';
  } catch {
    /* first run */
  }
  writeFileSync(
    path,
    `# Benchmark results\n\nWritten by \`npm run bench\`; the latest run replaces the tables.\n\n${sections.join('\n')}\n## What changed${history || '\n'}`,
  );
}
