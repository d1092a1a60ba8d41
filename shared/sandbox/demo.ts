/**
 * `twopass demo` (what `npm start` runs): the fake Kubernetes API server starts
 * in-process on 127.0.0.1, is seeded with the founding DANM incident, and the
 * real danm-endpoints code runs against it over HTTP for several passes on a
 * simulated clock. Nothing outside the sandbox is touched.
 */

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { resolveConfig } from '../config.ts';
import { KubeHttpClient } from '../kube/client.ts';
import { createLogger, type OutputMode } from '../log/logger.ts';
import type { RunResult } from '../runtime/run.ts';
import { instantTime } from '../time.ts';
import { installCrdsFromDir } from './crds.ts';
import { FakeKubeServer } from './kube/server.ts';
import type { Scene } from './pass.ts';
import { danmScene } from './scenes/danm.ts';
import { lbaasScene } from './scenes/lbaas.ts';
import { ruleScene } from './scenes/rule.ts';
import { whereaboutsScene } from './scenes/whereabouts.ts';

export type DemoResult = Readonly<{ ok: boolean; runs: RunResult[]; problems: string[] }>;

export async function demo(opts: {
  output: OutputMode;
  out?: NodeJS.WritableStream;
  err?: NodeJS.WritableStream;
}): Promise<DemoResult> {
  const out = opts.out ?? process.stdout;
  const say = (s: string) => (opts.output === 'json' ? (opts.err ?? process.stderr) : out).write(`${s}\n`);
  let now = Date.parse('2020-02-14T08:00:00Z');
  const clock = () => now;
  const fake = new FakeKubeServer({ now: () => new Date(now) });
  await fake.start();
  const dir = mkdtempSync(join(tmpdir(), 'twopass-demo-'));
  const kube = new KubeHttpClient({ server: fake.url, time: instantTime(clock) });
  const problems: string[] = [];
  const runs: RunResult[] = [];
  try {
    await installCrdsFromDir(kube);
    const log = createLogger({ output: opts.output, stream: out, clock });
    // A two-target pool would trip the 20% guard; the sandbox raises it for whereabouts (a real
    // deployment sizes it to its pools).
    const cfg = resolveConfig({ functions: { 'whereabouts-ips': { maxDeletionPercent: 100 } } }, 'sandbox', {
      state: `file:${dir}`,
    });
    say(
      'twopass sandbox: a fake Kubernetes API server on 127.0.0.1, seeded with the DANM StatefulSet incident.',
    );
    say(
      `Fake API server: ${fake.url}   state: ${dir}   clock: simulated, starting ${new Date(now).toISOString()}`,
    );
    const scene: Scene = {
      kube,
      cfg,
      stateDir: dir,
      clock,
      advance: (ms) => {
        now += ms;
      },
      log,
      server: fake.url,
      say,
    };
    const dm = await danmScene(scene);
    runs.push(...dm.runs);
    problems.push(...dm.problems);

    // The whereabouts scenario: a StatefulSet pod re-created under the same name.
    const wb = await whereaboutsScene(scene);
    runs.push(...wb.runs);
    problems.push(...wb.problems);

    // The lbaas scenario: the controller restart that lost an in-use port.
    const lb = await lbaasScene(scene);
    runs.push(...lb.runs);
    problems.push(...lb.problems);

    // A rule in CEL: CiliumEndpoints of gone pods, by UID.
    const rl = await ruleScene(scene);
    runs.push(...rl.runs);
    problems.push(...rl.problems);

    say('');
    say(`── summary ${'─'.repeat(81)}`);
    say(`DanmEps now: ${dm.endpoints} (ss-cinfo-1..3, the new ss-cinfo-0 on .15, the new ss-cinfo-4 on .16)`);
    say(`test-net1 bitmap now: ${dm.bits.join(' ')}  (network and broadcast reserved)`);
    say(
      `reclaimed in pass 3: ${dm.reclaimed} DanmEps of the force-deleted pods, with their addresses .10 and .14`,
    );
    say(
      'the new ss-cinfo-0 kept its DanmEp and 10.10.10.15 in every pass: matched by Pod UID, never by name,',
    );
    say(
      'and its address, set before its DanmEp existed, was indeterminate (the pod was being set up), never a candidate.',
    );
    say(
      `whereabouts: the re-created db-0 took 192.168.2.10 over, then moved to 192.168.2.11 on net2; the left net1 allocation was reclaimed (${wb.reclaimed})`,
    );
    say(
      `rule cilium-endpoints: the re-created web-0 kept its endpoint; the endpoint of the gone cache-0 was reclaimed (${rl.reclaimed})`,
    );
    say(problems.length === 0 ? 'sandbox: OK' : `sandbox: PROBLEMS: ${problems.join('; ')}`);
    return { ok: problems.length === 0, runs, problems };
  } finally {
    await kube.close();
    await fake.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
