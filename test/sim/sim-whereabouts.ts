/** whereabouts-ips in the simulator. */
import { whereaboutsIps } from '../../functions/whereabouts-ips/index.ts';
import type { Policy } from '../../shared/engine/types.ts';
import { podsBeforePoolsCleaner } from './baselines/pods-before-pools.ts';
import { type Cleaner, MIN, simPolicy, twopassCleaner } from './harness.ts';
import { Rng } from './rng.ts';
import type { Script } from './scripts.ts';
import { WhereaboutsWorld } from './worlds/whereabouts.ts';

export const WB_POLICY: Policy = simPolicy(5 * MIN);
export const WB_BOUNDS = { IPPoolAllocation: 5 * MIN + 2 * 5 * MIN };
export const wbWorld = (clock: () => number) => new WhereaboutsWorld(clock);
export const wbTwopass = (w: WhereaboutsWorld, clock: () => number, policy: Policy = WB_POLICY): Cleaner =>
  twopassCleaner(whereaboutsIps, w.kube, w.kube, clock, policy);
export const wbBaseline = (w: WhereaboutsWorld): Cleaner => podsBeforePoolsCleaner(w.kube);

const three = (w: WhereaboutsWorld, now: number) => {
  for (const n of ['db-0', 'db-1', 'db-2']) w.createPod(n, now, 0);
};

export const WB_SCRIPTS: Script<WhereaboutsWorld>[] = [
  {
    name: 'StatefulSet pod re-created under the same name, annotation lagging',
    incident: '2 name reuse, 3 allocation before evidence',
    minutes: 40,
    intervalMinutes: 5,
    setup: three,
    at: {
      2: (w, now) => {
        w.deletePod('db-0', now, true, new Rng(1));
        w.createPod('db-0', now, 4 * MIN);
      },
    },
    mustReclaim: true,
  },
  {
    name: 'pool listing racing pod creation',
    incident: '4 wrong list order',
    minutes: 20,
    intervalMinutes: 5,
    setup: three,
    midRun: { minute: 5, listCall: 2, run: (w, now) => w.createPod('new-0', now, 0) },
  },
];
