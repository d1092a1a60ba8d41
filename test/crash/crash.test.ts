/**
 * The real-process smoke test of crashes: the CLI runs as a child process against the fake
 * API server (ConfigMap state, a Lease) and is SIGKILLed while it holds the Lease. Every
 * crash point, each provably reached, is in crash-points.test.ts (injected, simulated clock);
 * this file checks that a real kill leaves what those tests assume: a held Lease that expires.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import type { KubeHttpClient } from '../../shared/kube/client.ts';
import { type KubeObject, NAMESPACES } from '../../shared/kube/resources.ts';
import {
  allocated,
  createEndpoint,
  createNetwork,
  createPod,
  forceDeletePod,
  R,
  setBits,
} from '../../shared/sandbox/scenarios/danm.ts';
import { CLI } from '../helpers/cli.ts';
import { fakeTarget } from '../helpers/kube-target.ts';

/** Killed at its first network read: the Lease is held, nothing decided. */
const killWhen = (method: string, path: string) => method === 'GET' && path.includes('/danmnets');

function runCli(
  args: string[],
  onSpawn?: (c: ChildProcess) => void,
): Promise<{ code: number | null; signal: string | null; out: string }> {
  return new Promise((resolve) => {
    const c = spawn(process.execPath, [CLI, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, TWOPASS_OUTPUT: '' },
    });
    let out = '';
    c.stdout.on('data', (d: Buffer) => (out += d.toString()));
    c.stderr.on('data', (d: Buffer) => (out += d.toString()));
    onSpawn?.(c);
    c.on('exit', (code, signal) => resolve({ code, signal, out }));
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test('SIGKILL while holding the Lease: later runs delete nothing in use and reclaim every orphan', async () => {
  const t = await fakeTarget();
  const kube: KubeHttpClient = t.client();
  try {
    const fake = t.fake!;
    const ns = await t.namespace();
    await kube.create(NAMESPACES, { metadata: { name: 'twopass-system' } });
    await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', []);
    const live: KubeObject[] = [];
    for (let i = 0; i < 2; i++)
      live.push(
        await createEndpoint(
          kube,
          await createPod(kube, ns, `live-${i}`),
          'test-net1',
          `10.10.10.${20 + i}/24`,
        ),
      );
    const orphans: KubeObject[] = [];
    for (let i = 0; i < 3; i++) {
      orphans.push(
        await createEndpoint(
          kube,
          await createPod(kube, ns, `gone-${i}`),
          'test-net1',
          `10.10.10.${30 + i}/24`,
        ),
      );
      await forceDeletePod(kube, ns, `gone-${i}`);
    }
    await setBits(kube, ns, 'test-net1', [
      '10.10.10.20',
      '10.10.10.21',
      '10.10.10.30',
      '10.10.10.31',
      '10.10.10.32',
      '10.10.10.40',
    ]);
    const dir = mkdtempSync(join(tmpdir(), 'twopass-crash-'));
    writeFileSync(join(dir, 'kubeconfig'), t.kubeconfig());
    writeFileSync(
      join(dir, 'config.yaml'),
      `state: configmap:twopass-system\nleaseDuration: 2s\nfunctions:\n  danm-endpoints:\n    grace: 1s\n    minAge: 0s\n    kindGrace: { DanmBit: 1s }\n    maxDeletionPercent: 100\n    settings: { namespaces: [${ns}] }\n  whereabouts-ips: { enabled: false }\n`,
    );
    const mark = fake.requests.length;
    const args = [
      'run',
      'danm-endpoints',
      '--kubeconfig',
      join(dir, 'kubeconfig'),
      '--config',
      join(dir, 'config.yaml'),
      '--apply',
    ];
    const first = await runCli(args);
    assert.is(first.code, 0, first.out.slice(-500));
    await sleep(1100);
    // the crashing run
    let killed = false;
    const crashed = await runCli(args, (c) => {
      fake.onRequest = (m, p) => {
        if (!killed && killWhen(m, p)) {
          killed = true;
          c.kill('SIGKILL');
        }
      };
    });
    fake.onRequest = undefined;
    assert.ok(killed, 'the run reached the network list');
    assert.is(crashed.signal, 'SIGKILL');
    // the Lease left by the killed run blocks until it expires
    const blocked = await runCli(args);
    assert.ok(blocked.code === 5 || blocked.code === 0, `exit ${blocked.code}`);
    await sleep(2200);
    // a crash between a DanmEp delete and its bit clear leaks the address: it is reclaimed later as a
    // leaked bit, which takes a few more observations
    const settled = async () =>
      JSON.stringify(allocated((await kube.get(R.DanmNet, ns, 'test-net1'))!)) ===
      JSON.stringify(['10.10.10.0', '10.10.10.20', '10.10.10.21', '10.10.10.255']);
    let last = '';
    for (let i = 0; i < 10 && !(await settled()); i++) {
      const r = await runCli(args);
      assert.is(r.code, 0, r.out.slice(-800));
      last = r.out
        .split('\n')
        .filter((l) => /candidate|deleted|skipped|indeterminate/.test(l))
        .map((l) => l.slice(0, 300))
        .join('\n');
      await sleep(1100);
    }
    for (const ep of live)
      assert.ok(await kube.get(R.danmeps, ns, ep.metadata.name), 'a live DanmEp survived');
    for (const ep of orphans)
      assert.is(await kube.get(R.danmeps, ns, ep.metadata.name), undefined, 'every orphan DanmEp reclaimed');
    const bits = allocated((await kube.get(R.DanmNet, ns, 'test-net1'))!);
    assert.equal(
      bits,
      ['10.10.10.0', '10.10.10.20', '10.10.10.21', '10.10.10.255'],
      `live addresses kept, orphans and the leaked bit freed; last run:\n${last}`,
    );
    // never freed twice: each orphan address was cleared by exactly one successful write
    const clears = fake.requests
      .slice(mark)
      .filter((r) => r.method === 'PUT' && r.path.includes('/danmnets/') && r.status === 200).length;
    assert.ok(clears <= 4, `at most one clear per orphan address (saw ${clears} network writes)`);
  } finally {
    await kube.close();
    await t.close();
  }
});

test('two runs at once: exactly one proceeds, the other exits 5 having observed and written nothing', async () => {
  const t = await fakeTarget();
  const kube = t.client();
  try {
    const fake = t.fake!;
    await kube.create(NAMESPACES, { metadata: { name: 'twopass-system' } });
    const dir = mkdtempSync(join(tmpdir(), 'twopass-race-'));
    writeFileSync(join(dir, 'kubeconfig'), t.kubeconfig());
    writeFileSync(join(dir, 'config.yaml'), 'state: configmap:twopass-system\nleaseDuration: 30s\n');
    const args = [
      'run',
      'danm-endpoints',
      '--kubeconfig',
      join(dir, 'kubeconfig'),
      '--config',
      join(dir, 'config.yaml'),
      '--apply',
    ];
    fake.faults.add({ method: 'GET', path: '/api/v1/pods', delayMs: 1500, times: 1 }); // the first run is still observing
    const [a, b] = await Promise.all([runCli(args), sleep(300).then(() => runCli(args))]);
    const codes = [a.code, b.code].sort();
    assert.equal(codes, [0, 5]);
    const loser = a.code === 5 ? a : b;
    assert.not.ok(loser.out.includes('"event":"snapshot.taken"'), 'the locked run observed nothing');
    assert.match(loser.out, /held by twopass-/);
  } finally {
    await kube.close();
    await t.close();
  }
});

test.run();
