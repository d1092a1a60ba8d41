/**
 * `twopass demo` (what `npm start` runs): the fake Kubernetes API server starts
 * in-process on 127.0.0.1, is seeded with the founding DANM incident, and the
 * real danm-endpoints code runs against it over HTTP for several passes on a
 * simulated clock. Nothing outside the sandbox is touched.
 */

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { danmEndpoints } from '../../functions/danm-endpoints/index.ts';
import { resolveConfig } from '../config.ts';
import { MINUTE as MIN } from '../contract/index.ts';
import { KubeHttpClient } from '../kube/client.ts';
import { createLogger, type OutputMode } from '../log/logger.ts';
import type { RunResult } from '../runtime/run.ts';
import { instantTime } from '../time.ts';
import { installCrdsFromDir } from './crds.ts';
import { FakeKubeServer } from './kube/server.ts';
import { passes, type Scene } from './pass.ts';
import { allocated, R, seedIncident } from './scenarios/danm.ts';
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
    const pass = passes(
      danmEndpoints,
      cfg,
      { time: instantTime(clock), log, kubeOptions: { server: fake.url } },
      say,
      runs,
    );

    say(
      'twopass sandbox: a fake Kubernetes API server on 127.0.0.1, seeded with the DANM StatefulSet incident.',
    );
    say(
      `Fake API server: ${fake.url}   state: ${dir}   clock: simulated, starting ${new Date(now).toISOString()}`,
    );
    const w = await seedIncident.before(kube);
    say(
      'Seeded as the real DANM plugin writes: DanmNet default/test-net1 (10.10.10.0/24, allocation pool from .10,\n' +
        "      first-fit), StatefulSet pods ss-cinfo-0..4 with DanmEps on .10-.14 (named by random UUIDs, the pods' labels).",
    );
    now += 50 * MIN;
    await seedIncident.nodeLost(kube, w);
    say(
      '08:50 node clive-alp-worker-03 lost; ss-cinfo-0 and ss-cinfo-4 force-deleted; the StatefulSet re-creates',
    );
    say(
      `      ss-cinfo-0 with a NEW UID; its CNI ADD has set ${w.inFlight} (the first free) but not yet written its DanmEp.`,
    );
    await pass('pass 1 at 08:50 (apply): first observation');
    now += 1 * MIN;
    await seedIncident.cniDone(kube, w);
    say('');
    say(
      '08:51 CNI ADD finished: the new ss-cinfo-0 has its DanmEp on .15; the new ss-cinfo-4 came up on .16.',
    );
    await pass('pass 2 at 08:51 (apply): .15 is held by the new DanmEp; the old endpoints are pending');
    now += 5 * MIN;
    const last = await pass(
      'pass 3 at 08:56 (apply): a grace window after the first observation, re-checked, deleted',
    );

    // Verify what the demo claims.
    const eps = await kube.listAll(R.danmeps, { namespace: 'default' });
    const net = (await kube.get(R.DanmNet, 'default', 'test-net1'))!;
    const bits = allocated(net);
    const expected = seedIncident.reclaimedBits;
    if (JSON.stringify(bits) !== JSON.stringify(expected))
      problems.push(`bitmap holds ${bits.join(' ')}, expected ${expected.join(' ')}`);
    const epUids = new Set(eps.items.map((e) => e.metadata.uid));
    if (!epUids.has(w.newEps['ss-cinfo-0']!.metadata.uid))
      problems.push('the new ss-cinfo-0 lost its DanmEp');
    for (const name of ['ss-cinfo-0', 'ss-cinfo-4'])
      if (epUids.has(w.oldEps[name]!.metadata.uid)) problems.push(`the old ${name} DanmEp was not reclaimed`);
    if (runs.some((r) => r.exitCode !== 0))
      problems.push(`a pass exited ${runs.map((r) => r.exitCode).join(',')}`);

    // The whereabouts scenario: a StatefulSet pod re-created under the same name.
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
    say(
      `DanmEps now: ${eps.items.length} (ss-cinfo-1..3, the new ss-cinfo-0 on .15, the new ss-cinfo-4 on .16)`,
    );
    say(`test-net1 bitmap now: ${bits.join(' ')}  (network and broadcast reserved)`);
    say(
      `reclaimed in pass 3: ${last.deleted.length} DanmEps of the force-deleted pods, with their addresses .10 and .14`,
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
