import {
  defineFunction,
  GUARD_DEFAULTS,
  MINUTE,
  NotInstalledError,
  type ObserveContext,
} from '../../shared/contract/index.ts';
import type { KubeReader, KubeReadWriter } from '../../shared/kube/ports.ts';
import { PODS } from '../../shared/kube/resources.ts';
import {
  type AllocData,
  allocationKind,
  type ResvData,
  type Settings,
  whereaboutsIpsSettings,
} from './kinds.ts';
import { GROUP, IPPOOLS, parsePool, parseReservation, RESERVATIONS, type Reservation } from './model.ts';
import { judge, type PodView, podMap } from './pods.ts';
import { reservationKind } from './reservation.ts';

export { judge } from './pods.ts';
export const NAME = 'whereabouts-ips';
/** The pod named by podref is alive but its network-status does not list the address. */
export const NOT_LISTED = {
  alloc: 'IPPoolAllocationNotListed',
  resv: 'OverlappingRangeIPReservationNotListed',
} as const;
const NOT_LISTED_NOTE =
  'the pod named by podref is alive, but its k8s.v1.cni.cncf.io/network-status annotation does not list this address. ' +
  'Either the allocation leaked (the pod got another address, e.g. after a CNI retry) or the annotation lags behind the ' +
  'allocation. No API field tells the two apart: the allocation records a container ID, and a pod shows neither its ' +
  'sandbox ID nor when its annotation was written. So this kind waits longer (kindGrace IPPoolAllocationNotListed / ' +
  'OverlappingRangeIPReservationNotListed, default 1h, against 5m when the pod is gone), and any change to the pod ' +
  'that lists the address rescues it.';

type Kinds = {
  IPPoolAllocation: AllocData;
  IPPoolAllocationNotListed: AllocData;
  OverlappingRangeIPReservation: ResvData;
  OverlappingRangeIPReservationNotListed: ResvData;
};

async function observe(kube: KubeReader, ctx: ObserveContext<Settings, Kinds>): Promise<void> {
  const { pageSize } = ctx.settings;
  const { signal } = ctx;
  const namespaces = ctx.settings.namespaces ? new Set(ctx.settings.namespaces) : undefined;
  const inScope = (ns: string) => !namespaces || namespaces.has(ns);
  if (!(await kube.serves(GROUP, 'v1alpha1', 'ippools', signal)))
    throw new NotInstalledError(
      `${GROUP}/v1alpha1 does not serve ippools: is whereabouts installed, and may this identity discover it?`,
      { call: 'discover whereabouts' },
    );
  // Targets first: pools, then reservations; pods (the evidence) last.
  // Each page is parsed as it arrives (the raw pools and reservations are dropped).
  const pools = await kube.listAll(IPPOOLS, { pageSize, signal, view: parsePool });
  ctx.source('ippools', 'target', pools);
  const hasResv = await kube.serves(GROUP, 'v1alpha1', RESERVATIONS.plural, signal);
  const resvs = hasResv
    ? await kube.listAll(RESERVATIONS, { pageSize, signal, view: parseReservation })
    : undefined;
  ctx.source('overlappingrangeipreservations', 'target', resvs ?? { notServed: true });
  // Each pod is kept only as the addresses of its network-status, by podref, as its page arrives.
  const { view, pods } = podMap();
  ctx.source('pods', 'evidence', await kube.listAll(PODS, { metadataOnly: true, pageSize, signal, view }));

  const byIp = new Map<string, { id: string; podref: string; ifname: string }[]>(); // allocations by IP, across pools
  const parsedPools = pools.items;
  for (const pool of parsedPools)
    for (const a of pool.allocations)
      if (a.ip && !a.problem) {
        const held = byIp.get(a.ip);
        if (held) held.push(a);
        else byIp.set(a.ip, [a]);
      }
  const resvByIp = new Map<string, Reservation>();
  const parsedResvs = resvs?.items ?? [];
  for (const r of parsedResvs) if (r.ip && !r.problem) resvByIp.set(r.ip.text, r);

  judgeAllocations(ctx, parsedPools, pods, resvByIp, inScope);
  judgeReservations(ctx, parsedResvs, pods, byIp, inScope);
}

type Ctx = ObserveContext<Settings, Kinds>;
type Pools = readonly ReturnType<typeof parsePool>[];
type Resvs = readonly ReturnType<typeof parseReservation>[];

/** Each allocation of each pool: its pod (by podref) and the reservation of its address. */
function judgeAllocations(
  ctx: Ctx,
  parsedPools: Pools,
  pods: ReadonlyMap<string, PodView>,
  resvByIp: ReadonlyMap<string, Reservation>,
  inScope: (ns: string) => boolean,
): void {
  for (const pool of parsedPools) {
    if (!inScope(pool.namespace)) continue;
    if (pool.problem)
      ctx.note('pool.unreadable', {
        kind: 'IPPool',
        name: `${pool.namespace}/${pool.name}`,
        reason: pool.problem,
      });
    for (const a of pool.allocations) {
      // A live pod of that name that does not list the address: its own kind, with a longer grace.
      const kind = pods.has(a.podref) ? NOT_LISTED.alloc : 'IPPoolAllocation';
      const init = {
        key: `${pool.uid}/${a.offset}/${a.id}`,
        fingerprint: [kind, a.offset, a.id, a.podref, a.ifname].join('|'),
        // The container ID (short) tells a re-created pod's allocation from its predecessor's.
        name: `${pool.namespace}/${pool.name} ${a.ip ?? `offset ${a.offset}`} (${a.podref || '?'}, container ${a.id.slice(0, 12) || '?'})`,
        marks: [pool],
      };
      if (a.problem || !a.ip) {
        ctx.unreadable(kind, init, a.problem ?? 'no address');
        continue;
      }
      const v = ctx.target(kind, {
        ...init,
        data: {
          namespace: pool.namespace,
          pool: pool.name,
          poolUid: pool.uid,
          offset: a.offset,
          id: a.id,
          podref: a.podref,
          ifname: a.ifname,
          ip: a.ip,
        },
      });
      const r = resvByIp.get(a.ip);
      if (r && !agree(a, r)) {
        v.indeterminate(
          `allocation (${a.id}, ${a.podref}, ${a.ifname || '-'}) and reservation (${r.containerid || '-'}, ${r.podref}, ${r.ifname || '-'}) of ${a.ip} disagree`,
        );
        continue;
      }
      const j = judge(pods, a.podref, a.ip);
      if (j === 'used') v.used();
      else if (j !== 'unused') v.indeterminate(j.indeterminate);
    }
  }
}

/** Each reservation: its pod (by podref) and the allocations of its address. */
function judgeReservations(
  ctx: Ctx,
  parsedResvs: Resvs,
  pods: ReadonlyMap<string, PodView>,
  byIp: ReadonlyMap<string, { id: string; podref: string; ifname: string }[]>,
  inScope: (ns: string) => boolean,
): void {
  for (const r of parsedResvs) {
    if (!inScope(r.namespace)) continue;
    const kind = pods.has(r.podref) ? NOT_LISTED.resv : 'OverlappingRangeIPReservation';
    const init = {
      key: r.uid,
      fingerprint: `${kind}|${r.uid}@${r.resourceVersion}`,
      name: `${r.namespace}/${r.name} (${r.podref || '?'})`,
      marks: [r],
    };
    if (r.problem || !r.ip) {
      ctx.unreadable(kind, init, r.problem ?? 'no address');
      continue;
    }
    const v = ctx.target(kind, {
      ...init,
      data: {
        namespace: r.namespace,
        name: r.name,
        uid: r.uid,
        rv: r.resourceVersion,
        podref: r.podref,
        ip: r.ip.text,
      },
    });
    const allocs = byIp.get(r.ip.text) ?? [];
    if (allocs.some((a) => !agree(a, r))) {
      v.indeterminate(`reservation and allocation of ${r.ip.text} disagree`);
      continue;
    }
    const j = judge(pods, r.podref, r.ip.text);
    if (j === 'used') v.used();
    else if (j !== 'unused') v.indeterminate(j.indeterminate);
  }
}

/**
 * Whether an allocation and the reservation of its address name the same holder. whereabouts
 * writes a reservation with podref and ifname only (v0.9: no container id; a re-created pod of
 * the same name takes its allocation over with a new container id and keeps the reservation),
 * so the container id is compared only where a reservation carries one.
 */
function agree(a: { id: string; podref: string; ifname: string }, r: Reservation): boolean {
  if (a.podref !== r.podref) return false;
  if (r.containerid !== '' && r.containerid !== a.id) return false;
  return r.ifname === '' || a.ifname === '' || r.ifname === a.ifname;
}

export const whereaboutsIps = defineFunction<
  typeof whereaboutsIpsSettings,
  KubeReader,
  KubeReadWriter,
  Kinds
>({
  name: NAME,
  description:
    'whereabouts IPPool allocations and OverlappingRangeIPReservations whose pod is gone or no longer has the address',
  settings: whereaboutsIpsSettings,
  defaults: { schedule: '*/5 * * * *', graceMs: 5 * MINUTE, ...GUARD_DEFAULTS },
  access: {
    cluster: [
      { apiGroups: ['whereabouts.cni.cncf.io'], resources: ['ippools'], verbs: ['list', 'get', 'patch'] },
      {
        apiGroups: ['whereabouts.cni.cncf.io'],
        resources: ['overlappingrangeipreservations'],
        verbs: ['list', 'get', 'delete'],
      },
      { apiGroups: [''], resources: ['pods'], verbs: ['list', 'get'] },
    ],
  },
  kinds: {
    // The allocations of one pool are removed together, in one patch (reservations one by one).
    IPPoolAllocation: allocationKind,
    IPPoolAllocationNotListed: {
      ...allocationKind,
      graceMs: 60 * MINUTE,
      note: NOT_LISTED_NOTE,
      unused:
        "a pod of its podref's name exists, but its network-status lists other addresses (a leftover of an earlier pod of that name)",
    },
    OverlappingRangeIPReservation: reservationKind,
    OverlappingRangeIPReservationNotListed: {
      ...reservationKind,
      graceMs: 60 * MINUTE,
      note: NOT_LISTED_NOTE,
      unused:
        "a pod of its podref's name exists, but its network-status lists other addresses (a leftover of an earlier pod of that name)",
    },
  },
  observe,
});

export { whereaboutsIpsSettings } from './kinds.ts';
