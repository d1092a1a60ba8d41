/**
 * The real-process smoke test of crashes: the CLI runs as a child process against the fake
 * API server (ConfigMap state, a Lease) and is SIGKILLed while it holds the Lease. Every
 * crash point, each provably reached, is in crash-points.test.ts (injected, simulated clock);
 * this file checks that a real kill leaves what those tests assume: a held Lease that expires.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { cliFiles, spawnCli } from '../helpers/cli.ts';
import type { KubeTarget } from '../helpers/kube-target.ts';
import { bits, ORPHANS, present, SETTLED, STATE_NS, world } from './world.ts';

/** Killed at its first network read: the Lease is held, nothing decided. */
const killWhen = (method: string, path: string) => method === 'GET' && path.includes('/danmnets');

/** The CLI as a child process; stdout and stderr together (the assertions read both). */
const runCli = async (args: string[], onSpawn?: (c: ChildProcess) => void, clockStart?: number) => {
  const r = await spawnCli(args, onSpawn, clockStart ? { TWOPASS_CLOCK_START: String(clockStart) } : {});
  return { code: r.code, signal: r.signal, out: r.out + r.err };
};

/** `twopass run danm-endpoints --apply` against the target with this config. */
function cliArgs(t: KubeTarget, config: string): string[] {
  const dir = mkdtempSync(join(tmpdir(), 'twopass-crash-'));
  const files = cliFiles(dir, t.kubeconfig(), `state: configmap:${STATE_NS}\n${config}`);
  return ['run', 'danm-endpoints', ...files, '--apply'];
}

// Each process runs on one timeline through TWOPASS_CLOCK_START: no test waits for the real clock.
const MIN = 60_000;

test('SIGKILL while holding the Lease: later runs delete nothing in use and reclaim every orphan', async () => {
  const w = await world();
  try {
    const fake = w.t.fake!;
    const args = cliArgs(
      w.t,
      `leaseDuration: 60s\nfunctions:\n  danm-endpoints:\n    grace: 1m\n    minAge: 1m\n    kindGrace: { DanmBit: 1m }\n    maxDeletionPercent: 100\n    settings: { namespaces: [${w.ns}] }\n`,
    );
    const t0 = Date.now();
    const mark = fake.requests.length;
    const first = await runCli(args, undefined, t0);
    assert.is(first.code, 0, first.out.slice(-500));
    let killed = false;
    const crashed = await runCli(
      args,
      (c) => {
        fake.onRequest = (m, p) => {
          if (!killed && killWhen(m, p)) {
            killed = true;
            c.kill('SIGKILL');
          }
        };
      },
      t0 + 2 * MIN,
    );
    fake.onRequest = undefined;
    assert.ok(killed, 'the run reached the network list');
    assert.is(crashed.signal, 'SIGKILL');
    // 10 s later on the timeline the Lease of the killed run still holds: exit 5, nothing written
    const writesBefore = fake.requests.filter((r) => r.method !== 'GET').length;
    const blocked = await runCli(args, undefined, t0 + 2 * MIN + 10_000);
    assert.is(blocked.code, 5, blocked.out.slice(-500));
    assert.match(blocked.out, /held by twopass-/);
    assert.is(
      fake.requests.filter((r) => r.method !== 'GET').length,
      writesBefore,
      'the blocked run wrote nothing',
    );
    // past the Lease's expiry, runs a grace apart settle the world
    let runs = 0;
    for (let i = 1; i <= 6 && JSON.stringify(await bits(w)) !== JSON.stringify(SETTLED); i++) {
      const r = await runCli(args, undefined, t0 + 4 * MIN + i * 2 * MIN);
      assert.is(r.code, 0, r.out.slice(-800));
      runs++;
    }
    assert.ok(runs >= 1 && runs <= 3, `settled within three runs after the Lease expired (took ${runs})`);
    for (const ep of w.live) assert.ok(await present(w, ep), 'a live DanmEp survived');
    for (const ep of w.orphans) assert.not.ok(await present(w, ep), 'every orphan DanmEp reclaimed');
    assert.equal(await bits(w), SETTLED, 'live addresses kept, orphans and the leaked bit freed');
    const clears = fake.requests
      .slice(mark)
      .filter((r) => r.method === 'PUT' && r.path.includes('/danmnets/') && r.status === 200).length;
    assert.ok(clears <= ORPHANS.length + 1, `at most one clear per freed address (saw ${clears})`);
  } finally {
    await w.kube.close();
    await w.t.close();
  }
});

test('two runs at once: the one holding the Lease proceeds, the other exits 5 having observed and written nothing', async () => {
  const w = await world();
  try {
    const args = cliArgs(w.t, 'leaseDuration: 30s\n');
    // the first run's pod list is held until the second has run to its end (however slowly a
    // loaded machine starts it): the first holds the Lease all that time
    let release: () => void = () => {};
    const held = new Promise<void>((r) => {
      release = r;
      setTimeout(r, 120_000).unref();
    });
    w.t.fake!.faults.add({ method: 'GET', path: '/api/v1/pods', until: held, times: 1 });
    let second: Promise<Awaited<ReturnType<typeof runCli>>> | undefined;
    const fake = w.t.fake!;
    fake.onRequest = (m, p) => {
      if (!second && m === 'GET' && p.includes('/api/v1/pods')) second = runCli(args).finally(release);
    };
    const a = await runCli(args);
    fake.onRequest = undefined;
    assert.ok(second, 'the first run reached its pod list');
    const b = await second!;
    // the first run took the Lease before its pod list, so it is the one that proceeds; the
    // second, started while the first held it, is the one locked out
    assert.is(a.code, 0, `the first run, holding the Lease, proceeds: ${a.out.slice(-2000)}`);
    assert.is(b.code, 5, `the second run is locked out: ${b.out.slice(-2000)}`);
    assert.ok(a.out.includes('"event":"snapshot.taken"'), 'the first run observed');
    assert.not.ok(b.out.includes('"event":"snapshot.taken"'), 'the locked run observed nothing');
    assert.match(b.out, /held by twopass-/);
  } finally {
    await w.kube.close();
    await w.t.close();
  }
});

test.run();
