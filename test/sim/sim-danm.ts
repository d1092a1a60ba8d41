/** danm-endpoints in the simulator: the incident scripts and the policy twopass runs with. */
import { danmEndpoints } from '../../functions/danm-endpoints/index.ts';
import type { Policy } from '../../shared/engine/types.ts';
import { danmNameMatchingCleaner } from './baselines/danm-name-matching.ts';
import { type Cleaner, MIN, twopassCleaner } from './harness.ts';
import { Rng } from './rng.ts';
import type { Script } from './scripts.ts';
import { DANM_LAYOUTS, DanmWorld } from './worlds/danm.ts';

export const DANM_POLICY: Policy = {
  graceMs: 5 * MIN,
  kindGraceMs: { DanmBit: 10 * MIN },
  maxDeletions: 1000,
  maxDeletionPercent: 100,
  maxEvidenceDropPercent: 100,
};
export const DANM_BOUNDS = { DanmEp: 15 * MIN, DanmBit: 35 * MIN };

/** Variant (the seed in random schedules) picks the layout: DanmNet `net`, or a `default` DanmNet, TenantNetwork or ClusterNetwork. */
export const danmWorld = (clock: () => number, variant = 0) =>
  new DanmWorld(clock, DANM_LAYOUTS[variant % DANM_LAYOUTS.length]!);
export const danmTwopass = (w: DanmWorld, clock: () => number, policy: Policy = DANM_POLICY): Cleaner =>
  twopassCleaner(danmEndpoints, w.kube, w.kube, clock, policy);
export const danmBaseline = (w: DanmWorld): Cleaner => danmNameMatchingCleaner(w.kube);

const rng = () => new Rng(7);
const five = (w: DanmWorld, now: number) => {
  for (let i = 0; i < 5; i++) w.createPod(`ss-${i}`, now, 0);
  w.tick(now);
};

/** A node is lost: three pods force-deleted, their CNI DEL never runs (three orphan DanmEps). */
const lostNode = (w: DanmWorld, now: number) => {
  for (const n of ['ss-1', 'ss-2', 'ss-3']) w.deletePod(n, now, rng(), { force: true, skipDel: true });
};

/** A pod (with its CNI ADD done at once) created in minute 5, between the run's first and second list. */
const podBetweenLists = (name: string) => ({
  minute: 5,
  listCall: 2,
  run: (w: DanmWorld, now: number) => {
    w.createPod(name, now, 0);
    w.tick(now);
  },
});

export const DANM_SCRIPTS: Script<DanmWorld>[] = [
  {
    name: 'seed: StatefulSet pod re-created while its CNI ADD is in flight',
    incident: '2 name reuse',
    minutes: 40,
    intervalMinutes: 5,
    setup: five,
    at: {
      2: (w, now) => {
        for (const n of ['ss-0', 'ss-4']) w.deletePod(n, now, rng(), { force: true, skipDel: true });
      },
    },
    midRun: podBetweenLists('ss-0'),
    mustReclaim: true,
  },
  {
    name: 'allocation before evidence: the bit 4 minutes before the DanmEp',
    incident: '3 allocation before evidence',
    minutes: 40,
    intervalMinutes: 5,
    setup: five,
    at: { 3: (w, now) => void w.createPod('late-0', now, 4 * MIN) },
  },
  {
    name: 'wrong list order: a pod and its DanmEp created between two lists',
    incident: '4 wrong list order',
    minutes: 20,
    intervalMinutes: 5,
    setup: five,
    midRun: podBetweenLists('new-0'),
  },
  {
    name: 'double free: an orphan DanmEp whose address was re-assigned',
    incident: '6 freed then re-allocated, 7 double free',
    minutes: 40,
    intervalMinutes: 5,
    setup: (w, now) => {
      five(w, now);
      w.deletePod('ss-1', now, rng(), { force: true, skipDel: true });
      // someone freed its address and handed it to a new pod, whose DanmEp holds it now
      const ep = w.eps().find((e) => (e.spec as { Pod: string }).Pod === 'ss-1')!;
      const addr = (ep.spec as { Interface: { Address: string } }).Interface.Address;
      const idx = Number(addr.split('/')[0]!.split('.')[3]);
      const net = w.net();
      const spec = net.spec as { Options: Record<string, unknown> };
      w.kube.store.update(R_NET, 'default', 'net', {
        ...net,
        spec: { ...spec, Options: { ...spec.Options, alloc: w.bitmap().with(idx, false).encode() } },
      });
      w.createPod('reuser-0', now, 0);
      w.tick(now);
    },
    mustReclaim: true,
  },
  {
    name: 'long Terminating: a pod stays Terminating for an hour',
    incident: '8 long Terminating',
    minutes: 70,
    intervalMinutes: 5,
    setup: (w, now) => {
      w.createPod('slow-0', now, 0, { nodeName: 'node-1' });
      w.tick(now);
    },
    at: {
      1: (w, now) =>
        w.deletePod('slow-0', now, {
          int: () => 60,
          next: () => 0,
          chance: () => false,
          pick: <T>(x: readonly T[]) => x[0]!,
        } as unknown as Rng),
    },
  },
  {
    name: 'evidence lister broke: the pod list comes back empty',
    incident: '15 evidence lister broke (and 5 incomplete evidence source)',
    minutes: 30,
    intervalMinutes: 5,
    setup: five,
    at: {
      6: (w) => {
        w.brokenPodLister = true;
      },
    },
    policy: { ...DANM_POLICY, maxEvidenceDropPercent: 30 },
  },
  {
    name: 'six leaked bits on one network: all reclaimed in the first run after their grace',
    incident: 'liveness: writes to one object go together',
    // first observation at minute 0, DanmBit grace 10 min: the run at minute 10 must clear all six
    minutes: 10,
    intervalMinutes: 5,
    setup: (w, now) => {
      five(w, now);
      for (let i = 0; i < 6; i++) w.abandonAdd();
    },
    mustReclaim: true,
  },
  ...DANM_LAYOUTS.slice(1).map(
    (layout, i): Script<DanmWorld> => ({
      name: `seed on ${layout.kind} default: re-created StatefulSet pods (no annotation, or []) in CNI ADD on a freed address`,
      incident: '2 name reuse, default network',
      minutes: 40,
      intervalMinutes: 5,
      variant: i + 1,
      setup: (w, now) => {
        for (let k = 0; k < 5; k++) w.createPod(`ss-${k}`, now, 0, { ask: k % 2 ? 'empty' : 'none' });
        w.tick(now);
      },
      at: {
        2: (w, now) => {
          for (const n of ['ss-0', 'ss-4']) w.deletePod(n, now, rng(), { force: true, skipDel: true });
        },
        // someone frees the address of ss-0's orphaned DanmEp; the new ss-0 lands on it (CNI ADD in flight)
        3: (w, now) => {
          const ep = w.eps().find((e) => (e.spec as { Pod: string }).Pod === 'ss-0')!;
          const addr = (ep.spec as { Interface: { Address: string } }).Interface.Address;
          w.freeAddress(Number(addr.split('/')[0]!.split('.')[3]));
          w.createPod('ss-0', now, 8 * MIN, { ask: i % 2 ? 'none' : 'empty' });
        },
      },
      // ss-4 re-created between a name-matching cleaner's pod list and its DanmEp list
      midRun: {
        minute: 5,
        listCall: 2,
        run: (w, now) => {
          w.createPod('ss-4', now, 0, { ask: 'none' });
          w.tick(now);
        },
      },
      mustReclaim: true,
    }),
  ),
  // The act phase: batches, evidence age, pods with two interfaces on one network.
  {
    name: 'two interfaces on one network: eth1 in CNI ADD for 30 min while eth0 has its DanmEp',
    incident: '2 name reuse (per interface): a pod being set up on a network it already holds an address of',
    minutes: 40,
    intervalMinutes: 5,
    setup: five,
    at: { 1: (w, now) => void w.createPod('two-0', now, 0, { legs: 2, eth1DelayMs: 30 * MIN }) },
  },
  {
    name: "a lost node, batched: an orphan's address freed and handed to a new pod between the batch's evidence read and its write",
    incident: 'act phase: fresh evidence per batch (freed then re-allocated mid-batch)',
    minutes: 40,
    intervalMinutes: 5,
    setup: five,
    at: { 1: lostNode },
    // Minute 10 deletes the three orphan DanmEps (writes 1-3), then writes the bitmap (write 4):
    // just before it, ss-1's address is freed by someone else and a new pod takes it at once.
    midWrite: {
      minute: 10,
      writeCall: 4,
      run: (w, now) => {
        const ep = w.eps().find((e) => (e.spec as { Pod: string }).Pod === 'ss-1');
        const addr = ep ? undefined : w.lastDeletedAddress('ss-1');
        if (addr === undefined) return;
        w.freeAddress(addr);
        w.createPod('new-0', now, 0);
        w.tick(now);
      },
    },
    expect: (w) =>
      w.pods().some((p) => p.metadata.name === 'new-0') ? [] : ['the mid-batch pod was never created'],
    mustReclaim: true,
  },
  {
    name: 'a batch outliving the evidence bound: 40 s pass after its first delete, and its bitmap write reads the evidence again',
    incident: 'act phase: evidence bounded in age',
    minutes: 40,
    intervalMinutes: 5,
    setup: five,
    at: { 1: lostNode },
    midWrite: {
      minute: 10,
      writeCall: 1,
      run: (w, now, advance) => {
        w.markAged(now);
        advance(40_000);
      },
    },
    expect: (w) =>
      w.aged !== undefined && w.podLists.some((t) => t >= w.aged! + 40_000)
        ? []
        : ['evidence older than the bound was not read again before the bitmap write'],
    mustReclaim: true,
  },
  // What only the real plugin does (producers.md, "DANM v4.3.0 as it really writes").
  {
    name: 'first-fit: the addresses of reclaimed DanmEps are handed to the next pods at once',
    incident: 'DANM first-fit: a freed address re-allocated in the same second',
    minutes: 40,
    intervalMinutes: 5,
    setup: five,
    // the run at minute 10 deletes the three orphan DanmEps and clears their bits; the next
    // moment two new pods ADD, and first-fit hands them two of the addresses just freed (one
    // still in flight for 3 minutes, over the next run)
    at: {
      1: lostNode,
      11: (w, now) => {
        w.createPod('first-fit-0', now, 3 * MIN);
        w.createPod('first-fit-1', now, 0);
        w.tick(now);
      },
    },
    expect: (w) => {
      const freed = new Set(['ss-1', 'ss-2', 'ss-3'].map((n) => w.lastDeletedAddress(n)));
      const got = w
        .eps()
        .filter((e) => String((e.spec as { Pod: string }).Pod).startsWith('first-fit-'))
        .map((e) =>
          Number(
            (e.spec as { Interface: { Address: string } }).Interface.Address.split('/')[0]!.split('.')[3],
          ),
        );
      return got.length === 2 && got.every((i) => freed.has(i))
        ? []
        : [`first-fit did not hand out the freed addresses (freed ${[...freed]}, got ${got})`];
    },
    mustReclaim: true,
  },
  {
    name: 'ADDs that timed out: eight bits left set with no DanmEp, the retries on new addresses; all reclaimed',
    incident: 'DANM ADD timeout: leaked bits',
    minutes: 30,
    intervalMinutes: 5,
    setup: five,
    at: {
      1: (w, now) => {
        for (let i = 0; i < 8; i++) w.timedOutAdd(`slow-${i}`, now, rng());
      },
    },
    expect: (w) => {
      const missing = w
        .pods()
        .filter((p) => !w.eps().some((e) => (e.spec as { PodUID: string }).PodUID === p.metadata.uid));
      return missing.length
        ? [`pods without a DanmEp: ${missing.map((p) => p.metadata.name).join(', ')}`]
        : [];
    },
    mustReclaim: true,
  },
  {
    name: 'a node back without containerd state: DANM re-ADDs its pods under the same UIDs (deleting their DanmEps itself) while twopass deletes an orphan',
    incident: 'DANM re-ADD: DanmEps and bits that vanish or change under the cleaner',
    minutes: 40,
    intervalMinutes: 5,
    setup: (w, now) => {
      for (let i = 0; i < 5; i++) w.createPod(`ss-${i}`, now, 0, { nodeName: i < 3 ? 'node-1' : 'node-2' });
      w.tick(now);
    },
    at: { 1: (w, now) => w.deletePod('ss-4', now, rng(), { force: true, skipDel: true }) },
    // between twopass's delete of the orphan and its bitmap write
    midWrite: {
      minute: 10,
      writeCall: 2,
      run: (w, now) => {
        w.reAddNode('node-1', now, rng());
        w.tick(now);
      },
    },
    mustReclaim: true,
  },
  {
    name: 'a pool exhausted by leaked bits: a pod created later waits for an address (its ADD writes nothing); the leaks go and it gets one',
    incident: 'DANM exhaustion: an ADD refused on a full pool is not in flight',
    minutes: 45,
    intervalMinutes: 5,
    setup: five,
    at: {
      1: (w) => w.exhaust(),
      4: (w, now) => void w.createPod('waiting-0', now, 0),
    },
    expect: (w) =>
      w.eps().some((e) => (e.spec as { Pod: string }).Pod === 'waiting-0')
        ? []
        : ['the pod that waited for an address never got one (the leaked bits were never reclaimed)'],
    mustReclaim: true,
  },
  // Liveness under steady writes (decision 0016): the network is written every minute.
  {
    name: 'a busy network: a leaked bit reclaimed while pods come and go every minute',
    incident: 'liveness: a leaked bit on a network that is never quiet for its grace',
    minutes: 30,
    intervalMinutes: 5,
    setup: five,
    at: { 1: (w) => w.abandonAdd(), ...busy(2, 26) },
    expect: (w) => (w.reclaimedBits > 0 ? [] : ['the leaked bit was never cleared']),
    mustReclaim: true,
  },
  {
    name: 'a busy network: a leaked bit freed and handed to a pod deleted while its ADD is in flight starts again',
    incident: '6 freed then re-allocated, on a busy network (the address keeps its bit, not its history)',
    minutes: 40,
    intervalMinutes: 5,
    setup: five,
    at: {
      1: (w) => w.abandonAdd(),
      ...busy(2, 34),
      // after the run at minute 5 saw it leaked: someone frees it, first-fit hands it to ghost-0,
      // whose pod is force-deleted at once; its ADD writes the DanmEp 11 minutes later
      6: (w, now) => {
        const leaked = w.leakedIndex();
        if (leaked === undefined) return;
        w.freeAddress(leaked);
        const ghost = w.createPod('ghost-0', now, 11 * MIN);
        w.ghost = ghost?.metadata.uid;
        w.deletePod('ghost-0', now, rng(), { force: true, skipDel: true });
        busy(6, 6)[6]!(w, now);
      },
    },
    expect: (w) => {
      if (w.ghost === undefined) return ['ghost-0 was never created on the leaked address'];
      return w.clearedInflight.some((c) => c.owner === w.ghost)
        ? ["ghost-0's address was cleared while its ADD was in flight"]
        : [];
    },
    mustReclaim: true,
  },
  // The act phase (decision 0016): the network written between the snapshot and the bit's write.
  {
    name: "an allocation between the snapshot and a leaked bit's write: the leak still goes in that run",
    incident: 'liveness: a leaked bit on a network written while the run acts',
    minutes: 15,
    intervalMinutes: 5,
    setup: five,
    at: { 1: (w) => w.abandonAdd() },
    // first observation at 5 (grace 10 min for bits: confirmed at 15); the first write of that run
    midWrite: { minute: 15, writeCall: 1, run: (w, now) => void w.createPod('mid-0', now, 0) },
    expect: (w) =>
      w.reclaimedBits > 0 ? [] : ['the leak was held back by an allocation of another address'],
    mustReclaim: true,
  },
  {
    name: "a leaked bit freed and handed to a pod deleted while its ADD is in flight, between the snapshot and the bit's write",
    incident: '6 freed then re-allocated, inside one run (the bitmap is the same before and after)',
    minutes: 40,
    intervalMinutes: 5,
    setup: five,
    at: { 1: (w) => w.abandonAdd() },
    midWrite: {
      minute: 15,
      writeCall: 1,
      run: (w, now) => {
        const leaked = w.leakedIndex();
        if (leaked === undefined) return;
        w.freeAddress(leaked);
        w.ghost = w.createPod('ghost-0', now, 11 * MIN)?.metadata.uid;
        w.deletePod('ghost-0', now, rng(), { force: true, skipDel: true });
      },
    },
    expect: (w) => {
      if (w.ghost === undefined) return ['ghost-0 was never created on the leaked address'];
      return w.clearedInflight.some((c) => c.owner === w.ghost)
        ? ["ghost-0's address was cleared while its ADD was in flight"]
        : [];
    },
    mustReclaim: true,
  },
];

/** Pods coming and going every minute from `from` to `to`: one created (ADD at once), the last one deleted (DEL within 2 min). */
function busy(from: number, to: number): Record<number, (w: DanmWorld, now: number) => void> {
  const out: Record<number, (w: DanmWorld, now: number) => void> = {};
  for (let m = from; m <= to; m++)
    out[m] = (w, now) => {
      w.createPod(`busy-${m}`, now, 0);
      w.tick(now);
      w.deletePod(`busy-${m - 1}`, now, rng());
    };
  return out;
}

import { R } from '../../shared/sandbox/scenarios/danm.ts';

const R_NET = R.DanmNet;
