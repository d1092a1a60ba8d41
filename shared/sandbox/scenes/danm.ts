/**
 * The founding DANM incident in the sandbox: a StatefulSet pod re-created under the same name
 * on a lost node, its CNI ADD in flight, and three passes of danm-endpoints on the simulated
 * clock; what the demo claims is checked against the fake cluster afterwards.
 */
import { danmEndpoints } from '../../../functions/danm-endpoints/index.ts';
import { MINUTE as MIN } from '../../contract/index.ts';
import type { RunResult } from '../../runtime/run.ts';
import { type Scene, startScene } from '../pass.ts';
import { allocated, R, seedIncident } from '../scenarios/danm.ts';

export async function danmScene(s: Scene): Promise<{
  runs: RunResult[];
  problems: string[];
  /** DanmEps left, the network's set bits, DanmEps reclaimed by the last pass. */
  endpoints: number;
  bits: string[];
  reclaimed: number;
}> {
  const { kube, advance, say } = s;
  const { runs, problems, pass } = startScene(danmEndpoints, s);
  const w = await seedIncident.before(kube);
  say(
    'Seeded as the real DANM plugin writes: DanmNet default/test-net1 (10.10.10.0/24, allocation pool from .10,\n' +
      "      first-fit), StatefulSet pods ss-cinfo-0..4 with DanmEps on .10-.14 (named by random UUIDs, the pods' labels).",
  );
  advance(50 * MIN);
  await seedIncident.nodeLost(kube, w);
  say(
    '08:50 node clive-alp-worker-03 lost; ss-cinfo-0 and ss-cinfo-4 force-deleted; the StatefulSet re-creates',
  );
  say(
    `      ss-cinfo-0 with a NEW UID; its CNI ADD has set ${w.inFlight} (the first free) but not yet written its DanmEp.`,
  );
  await pass('pass 1 at 08:50 (apply): first observation');
  advance(1 * MIN);
  await seedIncident.cniDone(kube, w);
  say('');
  say('08:51 CNI ADD finished: the new ss-cinfo-0 has its DanmEp on .15; the new ss-cinfo-4 came up on .16.');
  await pass('pass 2 at 08:51 (apply): .15 is held by the new DanmEp; the old endpoints are pending');
  advance(5 * MIN);
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
  if (!epUids.has(w.newEps['ss-cinfo-0']!.metadata.uid)) problems.push('the new ss-cinfo-0 lost its DanmEp');
  for (const name of ['ss-cinfo-0', 'ss-cinfo-4'])
    if (epUids.has(w.oldEps[name]!.metadata.uid)) problems.push(`the old ${name} DanmEp was not reclaimed`);
  if (runs.some((r) => r.exitCode !== 0))
    problems.push(`a pass exited ${runs.map((r) => r.exitCode).join(',')}`);
  return { runs, problems, endpoints: eps.items.length, bits, reclaimed: last.deleted.length };
}
