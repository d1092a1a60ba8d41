/**
 * The sandbox's whereabouts scene: StatefulSet db-0 re-created under the same name (whereabouts
 * hands it its allocation back), then again with the network under another interface name.
 */

import { whereaboutsIps } from '../../../functions/whereabouts-ips/index.ts';
import { MINUTE as MIN } from '../../contract/index.ts';
import type { RunResult } from '../../runtime/run.ts';
import { type Scene, startScene } from '../pass.ts';
import { forceDeletePod } from '../scenarios/danm.ts';
import {
  allocate,
  allocations,
  containerId,
  createPodWithStatus,
  createPool,
  offsetOf,
  takeOver,
} from '../scenarios/whereabouts.ts';

const RANGE = '192.168.2.0/24';

export async function whereaboutsScene(
  s: Scene,
): Promise<{ runs: RunResult[]; problems: string[]; reclaimed: number }> {
  const { kube, advance, say } = s;
  const ns = 'default';
  const { runs, problems, pass } = startScene(whereaboutsIps, s);
  say('');
  say('whereabouts: IPPool default/pool (192.168.2.0/24); StatefulSet pod db-0 holds 192.168.2.10 on net1.');
  const oldId = containerId();
  await createPool(kube, ns, 'pool', RANGE, { '192.168.2.10': { id: oldId, podref: `${ns}/db-0` } });
  await createPodWithStatus(kube, ns, 'db-0', ['192.168.2.10']);
  say('Its node is lost; db-0 is force-deleted and re-created under the same name. whereabouts finds');
  say("the allocation of default/db-0 on net1 and hands it over: .10 again, with the new sandbox's id.");
  await forceDeletePod(kube, ns, 'db-0');
  await takeOver(kube, ns, 'pool', { id: containerId(), podref: `${ns}/db-0`, ifname: 'net1' });
  await createPodWithStatus(kube, ns, 'db-0', ['192.168.2.10']);
  await pass('whereabouts pass 1 (apply): the allocation names a live pod that lists it: in use');
  say('The node is lost again while the StatefulSet now attaches the network as net2: db-0 is');
  say('re-created, whereabouts allocates .11 for net2, and no DEL ever comes for the net1 allocation.');
  await forceDeletePod(kube, ns, 'db-0');
  await allocate(kube, ns, 'pool', RANGE, '192.168.2.11', {
    id: containerId(),
    podref: `${ns}/db-0`,
    ifname: 'net2',
  });
  await createPodWithStatus(kube, ns, 'db-0', ['192.168.2.11']);
  await pass('whereabouts pass 2 (apply): the net1 allocation is a first observation, db-0 keeps .11');
  say('A pod named db-0 is alive and does not list .10: a leftover, or an annotation that lags? Nothing');
  say('in the API tells them apart, so this kind (IPPoolAllocationNotListed) waits an hour, not 5 minutes.');
  advance(6 * MIN);
  await pass('whereabouts pass 3 (apply): six minutes later, still pending (its grace is 1h)');
  advance(55 * MIN);
  const last = await pass(
    'whereabouts pass 4 (apply): an hour on, re-checked, removed with a tested JSON Patch',
  );
  const left = Object.keys(await allocations(kube, ns, 'pool'));
  if (JSON.stringify(left) !== JSON.stringify([offsetOf(RANGE, '192.168.2.11')]))
    problems.push(`pool holds offsets ${left.join(',')}`);
  if (last.deleted.length !== 1) problems.push(`whereabouts reclaimed ${last.deleted.length}, expected 1`);
  if (runs[0]?.deleted.length !== 0) problems.push('the taken-over allocation was reclaimed');
  return { runs, problems, reclaimed: last.deleted.length };
}
