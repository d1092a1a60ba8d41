/** lbaas-ports in the simulator (a shorter grace than production's 30 min keeps schedules short). */
import { lbaasPorts } from '../../functions/lbaas-ports/index.ts';
import type { Policy } from '../../shared/engine/types.ts';
import { lbaasMemoryCleaner } from './baselines/lbaas-memory.ts';
import { type Cleaner, MIN, simPolicy, twopassCleaner } from './harness.ts';
import type { Script } from './scripts.ts';
import { LbaasWorld } from './worlds/lbaas.ts';

export const LB_POLICY: Policy = simPolicy(10 * MIN);
export const LB_BOUNDS = { Port: 10 * MIN + 2 * 5 * MIN };
export const lbWorld = (clock: () => number) => new LbaasWorld(clock);
export const lbTwopass = (w: LbaasWorld, clock: () => number, policy: Policy = LB_POLICY): Cleaner =>
  twopassCleaner(
    lbaasPorts,
    { kube: w.kube, neutron: w.neutron },
    { kube: w.kube, neutron: w.neutron },
    clock,
    policy,
    { projectId: 'p' },
  );
export const lbBaseline = (w: LbaasWorld): Cleaner => lbaasMemoryCleaner(w);

export const LB_SCRIPTS: Script<LbaasWorld>[] = [
  {
    name: 'seed: cleanup right after a controller restart, before every Service re-synced',
    incident: '1 start-up before sync',
    minutes: 40,
    intervalMinutes: 5,
    setup: (w, now) => {
      for (const n of ['ingress-nginx-controller', 'monitoring', 'web']) w.createService(n, now, 0);
      w.tick(now + 2 * MIN);
    },
    at: { 3: (w) => w.deleteService('web') },
    mustReclaim: true,
  },
  {
    name: 'a Service being placed takes a free port',
    incident: 'mid-sync Service',
    minutes: 40,
    intervalMinutes: 5,
    setup: (w, now) => {
      w.createService('a', now, 0);
      w.tick(now + 2 * MIN);
      w.controllerDown = true;
      w.deleteService('a'); // its port is left behind, free
      w.controllerDown = false;
    },
    at: { 14: (w, now) => w.createService('b', now, 60_000) },
  },
];
