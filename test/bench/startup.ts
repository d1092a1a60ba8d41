/**
 * Start-up: what a run costs before its first request, with and without Node's module
 * compile cache (the image ships one), and what loading the Kubernetes client library costs
 * (only a kubeconfig file loads it; the CronJobs' in-cluster path does not).
 * Each cell is a fresh process; the variants are interleaved.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KubeHttpClient } from '../../shared/kube/client.ts';
import { installCrdsFromDir } from '../../shared/sandbox/crds.ts';
import { FakeKubeServer } from '../../shared/sandbox/kube/server.ts';
import { leakedEndpoint } from '../../shared/sandbox/scenarios/danm.ts';
import { CLI, cliFiles } from '../helpers/cli.ts';
import { testTime } from '../helpers/time.ts';
import { mdTable, ms } from './common.ts';

type Timing = { wall: number; first?: number };

/** One process: wall time to exit, and to the fake server's first request (if any). */
function timed(args: string[], env: Record<string, string>, fake?: FakeKubeServer): Promise<Timing> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    let first: number | undefined;
    if (fake)
      fake.onRequest = () => {
        first ??= performance.now() - started;
      };
    const clean = { ...process.env };
    delete clean.NODE_COMPILE_CACHE;
    delete clean.NODE_DISABLE_COMPILE_CACHE;
    const c = spawn(process.execPath, args, {
      env: { ...clean, TWOPASS_OUTPUT: '', ...env },
      stdio: 'ignore',
    });
    c.on('error', reject);
    c.on('exit', (code) => {
      if (fake) fake.onRequest = undefined;
      if (code !== 0 && code !== null && args.includes('run') && code > 1)
        reject(new Error(`${args.join(' ')}: exit ${code}`));
      else resolve({ wall: performance.now() - started, ...(first !== undefined ? { first } : {}) });
    });
  });
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const cell = (xs: number[]) => (xs.length ? `${ms(Math.min(...xs))} / ${ms(median(xs))}` : 'n/a');

export async function startupBench(rounds = 7): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'twopass-startup-'));
  const fake = new FakeKubeServer();
  await fake.start();
  try {
    const admin = new KubeHttpClient({ server: fake.url, time: testTime() });
    await installCrdsFromDir(admin);
    await leakedEndpoint(admin, 'default', '10.10.10.7');
    await admin.close();
    const files = cliFiles(dir, fake.kubeconfig(), '');
    const cache = join(dir, 'compile-cache');
    const off = { NODE_DISABLE_COMPILE_CACHE: '1' };
    const on = { NODE_COMPILE_CACHE: cache };
    const lib = ['--input-type=module', '-e', "await import('@kubernetes/client-node')"];
    const variants: { what: string; args: string[]; env: Record<string, string>; fake?: boolean }[] = [
      { what: '`twopass --version`, no compile cache', args: [CLI, '--version'], env: off },
      { what: '`twopass --version`, compile cache', args: [CLI, '--version'], env: on },
      {
        what: 'dry run of danm-endpoints (kubeconfig file), no compile cache',
        args: [CLI, 'run', 'danm-endpoints', ...files, '--state', `file:${join(dir, 's')}`],
        env: off,
        fake: true,
      },
      {
        what: 'dry run of danm-endpoints (kubeconfig file), compile cache',
        args: [CLI, 'run', 'danm-endpoints', ...files, '--state', `file:${join(dir, 's')}`],
        env: on,
        fake: true,
      },
      { what: 'loading the client library alone, no compile cache', args: lib, env: off },
      { what: 'loading the client library alone, compile cache', args: lib, env: on },
    ];
    // the cache is written by a first run of each (as the image's build does)
    for (const v of variants) if (v.env === on) await timed(v.args, v.env, v.fake ? fake : undefined);
    const walls = variants.map(() => [] as number[]);
    const firsts = variants.map(() => [] as number[]);
    for (let r = 0; r < rounds; r++)
      for (const [i, v] of variants.entries()) {
        const t = await timed(v.args, v.env, v.fake ? fake : undefined);
        walls[i]!.push(t.wall);
        if (t.first !== undefined) firsts[i]!.push(t.first);
      }
    const rows = variants.map((v, i) => [v.what, cell(walls[i]!), cell(firsts[i]!)]);
    return mdTable(
      'Start-up: before the first request (fresh processes, min / median)',
      ['process', 'wall time to exit', 'to the first request'],
      rows,
      `${rounds} rounds, interleaved; a tiny world (one leaked DanmEp) so that the run itself is a few requests. ` +
        "The compile cache is Node's (NODE_COMPILE_CACHE), warmed by one run, as the image is built with it (per user ID, read-only at run time). " +
        'A kubeconfig file loads the Kubernetes client library for its auth plugins; a pod without one (the CronJobs) reads its ServiceAccount directly and does not load it: the last rows are what that saves.',
    );
  } finally {
    await fake.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) console.log(await startupBench());
