/** whereabouts objects as twopass reads them. Parsing never throws. */
import type { KubeObject, ObjectIdentity, ResourceRef } from '../../shared/kube/resources.ts';
import { type Address, type Cidr, formatAddress, parseAddress, parseCidr } from '../../shared/net/ip.ts';

export const GROUP = 'whereabouts.cni.cncf.io';
export const IPPOOLS: ResourceRef = {
  group: GROUP,
  version: 'v1alpha1',
  plural: 'ippools',
  kind: 'IPPool',
  namespaced: true,
};
export const RESERVATIONS: ResourceRef = {
  group: GROUP,
  version: 'v1alpha1',
  plural: 'overlappingrangeipreservations',
  kind: 'OverlappingRangeIPReservation',
  namespaced: true,
};
export const NETWORK_STATUS = 'k8s.v1.cni.cncf.io/network-status';

export type Allocation = Readonly<{
  offset: string;
  id: string;
  podref: string;
  ifname: string;
  ip?: string;
  problem?: string;
}>;
export type Pool = ObjectIdentity &
  Readonly<{
    cidr?: Cidr;
    problem?: string;
    allocations: readonly Allocation[];
  }>;

/** The whereabouts range: a CIDR, optionally written `start-end/prefix` (the CIDR part decides offsets). */
export function parseRange(range: unknown): Cidr | undefined {
  if (typeof range !== 'string') return undefined;
  const m = /^(?:[^-/]+-)?([^/]+)\/(\d{1,3})$/.exec(range.trim());
  if (!m) return undefined;
  return parseCidr(`${m[1]}/${m[2]}`);
}

export function validPodref(podref: unknown): podref is string {
  return typeof podref === 'string' && /^[a-z0-9]([-a-z0-9]*[a-z0-9])?\/[^/\s]+$/.test(podref);
}

export function parsePool(o: KubeObject): Pool {
  const md = o.metadata;
  const spec = (o.spec ?? {}) as { range?: unknown; allocations?: unknown };
  const base = identityOf(md);
  const cidr = parseRange(spec.range);
  const rawAllocs =
    spec.allocations && typeof spec.allocations === 'object' && !Array.isArray(spec.allocations)
      ? (spec.allocations as Record<string, unknown>)
      : undefined;
  const allocations: Allocation[] = [];
  for (const [offset, a] of Object.entries(rawAllocs ?? {})) {
    const v = (a ?? {}) as { id?: unknown; podref?: unknown; ifname?: unknown };
    const alloc = {
      offset,
      id: typeof v.id === 'string' ? v.id : '',
      podref: typeof v.podref === 'string' ? v.podref : '',
      ifname: typeof v.ifname === 'string' ? v.ifname : '',
    };
    let problem: string | undefined;
    let ip: string | undefined;
    if (!/^\d+$/.test(offset)) problem = `offset ${JSON.stringify(offset)} is not a number`;
    else if (!cidr) problem = `pool range ${JSON.stringify(spec.range)} cannot be parsed`;
    else if (BigInt(offset) >= cidr.size) problem = `offset ${offset} is outside ${cidr.text}`;
    else ip = formatAddress(cidr.family, cidr.network + BigInt(offset));
    if (!problem && alloc.id === '') problem = 'allocation has no container id';
    if (!problem && !validPodref(alloc.podref))
      problem = `podref ${JSON.stringify(v.podref)} is not namespace/name`;
    allocations.push({ ...alloc, ...(ip ? { ip } : {}), ...(problem ? { problem } : {}) });
  }
  const problem = !cidr
    ? `range ${JSON.stringify(spec.range)} cannot be parsed`
    : rawAllocs === undefined && spec.allocations !== undefined
      ? 'spec.allocations is not an object'
      : undefined;
  return { ...base, ...(cidr ? { cidr } : {}), ...(problem ? { problem } : {}), allocations };
}

export type Reservation = ObjectIdentity &
  Readonly<{
    ip?: Address;
    containerid: string;
    podref: string;
    ifname: string;
    problem?: string;
  }>;

/** Reservations are named by their IP (IPv6 with ':' written as '-'). */
export function parseReservation(o: KubeObject): Reservation {
  const md = o.metadata;
  const spec = (o.spec ?? {}) as { containerid?: unknown; podref?: unknown; ifname?: unknown };
  const ip =
    parseAddress(md.name) ?? (md.name.includes('-') ? parseAddress(md.name.replace(/-/g, ':')) : undefined);
  const r = {
    ...identityOf(md),
    containerid: typeof spec.containerid === 'string' ? spec.containerid : '',
    podref: typeof spec.podref === 'string' ? spec.podref : '',
    ifname: typeof spec.ifname === 'string' ? spec.ifname : '',
  };
  let problem: string | undefined;
  if (!ip) problem = `name ${JSON.stringify(md.name)} is not an IP address`;
  else if (!validPodref(spec.podref)) problem = `podref ${JSON.stringify(spec.podref)} is not namespace/name`;
  return { ...r, ...(ip ? { ip } : {}), ...(problem ? { problem } : {}) };
}

/** The IPs a pod's network-status annotation lists; undefined when absent; a string reason when malformed. */
export function networkStatusIps(
  annotations: Record<string, string> | undefined,
): Set<string> | undefined | string {
  const raw = annotations?.[NETWORK_STATUS];
  if (raw === undefined) return undefined;
  let v: unknown;
  try {
    v = JSON.parse(raw);
  } catch {
    return `${NETWORK_STATUS} is not JSON`;
  }
  if (!Array.isArray(v)) return `${NETWORK_STATUS} is not a list`;
  const ips = new Set<string>();
  for (const n of v) {
    const list = (n as { ips?: unknown } | null)?.ips;
    if (list === undefined) continue;
    if (!Array.isArray(list)) return `${NETWORK_STATUS} has an ips field that is not a list`;
    for (const ip of list) {
      const a = typeof ip === 'string' ? parseAddress(ip.split('/')[0]!) : undefined;
      if (!a) return `${NETWORK_STATUS} lists ${JSON.stringify(ip)}, not an IP`;
      ips.add(a.text);
    }
  }
  return ips;
}

/** What a pool or a reservation is known by: its identity, its version and its keep-mark. */
function identityOf(md: KubeObject['metadata']) {
  return {
    uid: md.uid,
    name: md.name,
    namespace: md.namespace ?? '',
    resourceVersion: md.resourceVersion,
    annotations: md.annotations,
  };
}
