/**
 * DANM objects as twopass reads them: DanmEps and the three network kinds.
 * Parsing never throws; a malformed object comes back with the reason.
 */
import type { KubeObject, ObjectIdentity, ResourceRef } from '../../shared/kube/resources.ts';
import {
  type Address,
  type Cidr,
  contains,
  parseAddress,
  parseCidr,
  parseInterfaceAddress,
} from '../../shared/net/ip.ts';
import { Bitmap } from './bitmap.ts';

export const GROUPS = ['danm.k8s.io', 'danm.io'] as const;

export type NetworkType = 'DanmNet' | 'TenantNetwork' | 'ClusterNetwork';

export function danmResources(group: string) {
  const ref = (plural: string, kind: string, namespaced: boolean): ResourceRef => ({
    group,
    version: 'v1',
    plural,
    kind,
    namespaced,
  });
  return {
    danmeps: ref('danmeps', 'DanmEp', true),
    DanmNet: ref('danmnets', 'DanmNet', true),
    TenantNetwork: ref('tenantnetworks', 'TenantNetwork', true),
    ClusterNetwork: ref('clusternetworks', 'ClusterNetwork', false),
  };
}

export type Endpoint = ObjectIdentity &
  Readonly<{
    createdAt?: number;
    pod: string;
    podUID: string;
    networkType: NetworkType;
    network: string;
    iface: string;
    v4?: Address;
    v6?: Address;
  }>;

export type ParsedEndpoint =
  | { ok: true; ep: Endpoint }
  | { ok: false; uid: string; name: string; namespace: string; reason: string };

export function networkId(type: NetworkType, namespace: string | undefined, name: string): string {
  return type === 'ClusterNetwork' ? `ClusterNetwork/${name}` : `${type}/${namespace}/${name}`;
}

function created(o: KubeObject): number | undefined {
  const t = o.metadata.creationTimestamp ? Date.parse(o.metadata.creationTimestamp) : Number.NaN;
  return Number.isFinite(t) ? t : undefined;
}

export function parseEndpoint(o: KubeObject): ParsedEndpoint {
  const md = o.metadata ?? ({} as KubeObject['metadata']);
  const bad = (reason: string): ParsedEndpoint => ({
    ok: false,
    uid: String(md.uid ?? ''),
    name: String(md.name ?? ''),
    namespace: String(md.namespace ?? ''),
    reason,
  });
  if (
    typeof md.uid !== 'string' ||
    md.uid === '' ||
    typeof md.name !== 'string' ||
    typeof md.namespace !== 'string'
  )
    return bad('metadata lacks uid, name or namespace');
  const spec = o.spec as Record<string, unknown> | undefined;
  if (!spec || typeof spec !== 'object') return bad('DanmEp has no spec');
  const podUID = spec.PodUID;
  if (typeof podUID !== 'string' || podUID.trim() === '') return bad('empty PodUID');
  const pod = typeof spec.Pod === 'string' ? spec.Pod : '';
  if (pod === '') return bad('empty Pod name');
  const apiType = spec.apiType ?? '';
  let networkType: NetworkType;
  if (apiType === '' || apiType === 'DanmNet') networkType = 'DanmNet';
  else if (apiType === 'TenantNetwork' || apiType === 'ClusterNetwork') networkType = apiType;
  else return bad(`unknown apiType ${JSON.stringify(apiType)}`);
  const network = spec.NetworkName;
  if (typeof network !== 'string' || network === '') return bad('empty NetworkName');
  const iface = (spec.Interface ?? {}) as Record<string, unknown>;
  if (typeof iface !== 'object' || iface === null) return bad('Interface is not an object');
  const v4 = parseInterfaceAddress(iface.Address);
  if (v4 === undefined) return bad(`unparsable Interface.Address ${JSON.stringify(iface.Address)}`);
  const v6 = parseInterfaceAddress(iface.AddressIPv6);
  if (v6 === undefined) return bad(`unparsable Interface.AddressIPv6 ${JSON.stringify(iface.AddressIPv6)}`);
  if (v4 !== 'none' && v4.family !== 4) return bad(`Interface.Address ${String(iface.Address)} is not IPv4`);
  if (v6 !== 'none' && v6.family !== 6)
    return bad(`Interface.AddressIPv6 ${String(iface.AddressIPv6)} is not IPv6`);
  const c = created(o);
  return {
    ok: true,
    ep: {
      uid: md.uid,
      name: md.name,
      namespace: md.namespace,
      resourceVersion: md.resourceVersion,
      annotations: o.metadata.annotations,
      ...(c !== undefined ? { createdAt: c } : {}),
      pod,
      podUID,
      networkType,
      network,
      iface: typeof iface.Name === 'string' ? iface.Name : '',
      ...(v4 !== 'none' ? { v4 } : {}),
      ...(v6 !== 'none' ? { v6 } : {}),
    },
  };
}

/**
 * Whether a DanmEp that does not parse may hold bits of network `net`: the one it names
 * when its network kind and name can be read, else any network of its namespace with
 * that name (or any at all), and every ClusterNetwork. A DanmEp of no readable
 * namespace may hold bits anywhere.
 */
export function unparsableMayHold(
  o: KubeObject,
  net: Readonly<{ type: NetworkType; namespace?: string | undefined; name: string }>,
): boolean {
  const ns = o.metadata?.namespace;
  if (typeof ns !== 'string' || ns === '') return true;
  if (net.type !== 'ClusterNetwork' && net.namespace !== ns) return false;
  const spec = (o.spec && typeof o.spec === 'object' ? o.spec : {}) as Record<string, unknown>;
  const name = typeof spec.NetworkName === 'string' && spec.NetworkName !== '' ? spec.NetworkName : undefined;
  if (name === undefined) return true;
  if (name !== net.name) return false;
  const apiType = spec.apiType ?? '';
  const type = apiType === '' ? 'DanmNet' : apiType;
  return type === 'DanmNet' || type === 'TenantNetwork' || type === 'ClusterNetwork'
    ? type === net.type
    : true;
}

export type Pool = Readonly<{
  cidr: Cidr;
  bitmap: Bitmap;
  start?: bigint;
  end?: bigint;
  reserved: ReadonlySet<number>;
}>;

export type Network = Readonly<{
  id: string;
  type: NetworkType;
  uid: string;
  name: string;
  namespace?: string;
  resourceVersion: string;
  annotations?: Readonly<Record<string, string>> | undefined;
  v4?: Pool;
  v6?: Pool;
  /** Why the network's bitmaps cannot be used (then it has no pools). */
  problem?: string;
  raw: KubeObject;
}>;

function gateways(routes: unknown, cidr: Cidr): number[] {
  const out: number[] = [];
  if (!routes || typeof routes !== 'object') return out;
  for (const gw of Object.values(routes as Record<string, unknown>)) {
    const a = typeof gw === 'string' ? parseAddress(gw) : undefined;
    if (a && contains(cidr, a)) out.push(Number(a.value - cidr.network));
  }
  return out;
}

function pool(
  cidrText: unknown,
  alloc: unknown,
  routes: unknown,
  range: { start?: unknown; end?: unknown } | undefined,
  family: 4 | 6,
  label: string,
): Pool | string | undefined {
  if (cidrText === undefined || cidrText === '' || cidrText === null) return undefined;
  const cidr = typeof cidrText === 'string' ? parseCidr(cidrText) : undefined;
  if (!cidr || cidr.family !== family)
    return `${label} CIDR ${JSON.stringify(cidrText)} is not a valid IPv${family} CIDR`;
  const bitmap = Bitmap.decode(alloc, cidr);
  if (typeof bitmap === 'string') return `${label}: ${bitmap}`;
  const last = Number(cidr.size) - 1;
  const reserved = new Set<number>([0, last, ...gateways(routes, cidr)]);
  let start: bigint | undefined;
  let end: bigint | undefined;
  if (range && typeof range === 'object') {
    const s = typeof range.start === 'string' ? parseAddress(range.start) : undefined;
    const e = typeof range.end === 'string' ? parseAddress(range.end) : undefined;
    if (
      (range.start !== undefined && range.start !== '' && (!s || !contains(cidr, s))) ||
      (range.end !== undefined && range.end !== '' && (!e || !contains(cidr, e)))
    ) {
      return `${label}: allocation_pool ${JSON.stringify(range)} is not inside ${cidr.text}`;
    }
    if (s) start = s.value - cidr.network;
    if (e) end = e.value - cidr.network;
  }
  return {
    cidr,
    bitmap,
    reserved,
    ...(start !== undefined ? { start } : {}),
    ...(end !== undefined ? { end } : {}),
  };
}

export function parseNetwork(o: KubeObject, type: NetworkType): Network {
  const md = o.metadata;
  const id = networkId(type, md.namespace, md.name);
  const base = {
    id,
    type,
    uid: md.uid,
    name: md.name,
    resourceVersion: md.resourceVersion,
    annotations: o.metadata.annotations,
    raw: o,
    ...(md.namespace !== undefined ? { namespace: md.namespace } : {}),
  };
  const opts = ((o.spec as Record<string, unknown> | undefined)?.Options ?? undefined) as
    | Record<string, unknown>
    | undefined;
  if (!opts || typeof opts !== 'object') return { ...base, problem: 'spec.Options is missing' };
  const v4 = pool(
    opts.cidr,
    opts.alloc,
    opts.routes,
    opts.allocation_pool as { start?: unknown; end?: unknown } | undefined,
    4,
    'IPv4',
  );
  const p6 = (opts.allocation_pool_v6 ?? {}) as Record<string, unknown>;
  const v6 = pool(
    p6.cidr ?? opts.net6,
    opts.alloc6,
    opts.routes6,
    p6 as { start?: unknown; end?: unknown },
    6,
    'IPv6',
  );
  const problems = [v4, v6].filter((p): p is string => typeof p === 'string');
  if (problems.length > 0) return { ...base, problem: problems.join('; ') };
  return { ...base, ...(v4 ? { v4: v4 as Pool } : {}), ...(v6 ? { v6: v6 as Pool } : {}) };
}

/** Whether bit i of a pool may ever be cleared by twopass: in range, not reserved, inside the allocation pool. */
export function clearable(p: Pool, i: number): boolean {
  if (i < 0 || i >= p.bitmap.bits || p.reserved.has(i)) return false;
  if (p.start !== undefined && BigInt(i) < p.start) return false;
  if (p.end !== undefined && BigInt(i) > p.end) return false;
  return true;
}

export function bitIndex(p: Pool, a: Address): number | undefined {
  return contains(p.cidr, a) ? Number(a.value - p.cidr.network) : undefined;
}

export const INTERFACES_ANNOTATION = 'danm.k8s.io/interfaces';
export const DEFAULT_NETWORK = 'default';

/** The ids of the three networks a pod may be attached to by default, in DANM's order of preference. */
export function defaultCandidates(namespace: string | undefined): string[] {
  return [
    networkId('DanmNet', namespace, DEFAULT_NETWORK),
    networkId('TenantNetwork', namespace, DEFAULT_NETWORK),
    networkId('ClusterNetwork', namespace, DEFAULT_NETWORK),
  ];
}

/**
 * The default network of a namespace, resolved as DANM's netcontrol does: DanmNet
 * `default` in the namespace, else TenantNetwork `default` there, else ClusterNetwork
 * `default`; none when no such network exists (DANM's CNI ADD then fails). `existing`
 * is the set of network ids of one complete snapshot; without it the resolution is not
 * certain and every candidate is returned.
 */
export function defaultNetwork(namespace: string | undefined, existing?: ReadonlySet<string>): string[] {
  const all = defaultCandidates(namespace);
  if (!existing) return all;
  const first = all.find((id) => existing.has(id));
  return first ? [first] : [];
}

/** What a pod asks for in `danm.k8s.io/interfaces`. */
export type NetworkRequest =
  | Readonly<{ kind: 'explicit'; ids: readonly string[] }>
  /** No annotation, or an empty list: DANM attaches the pod to its namespace's default network. */
  | Readonly<{ kind: 'default'; ids: readonly string[] }>
  /** The annotation cannot be read: the pod may be set up on any network it can reach. */
  | Readonly<{ kind: 'unreadable'; reason: string }>;

/**
 * The networks a pod asks for (`network` = DanmNet, `tenantNetwork`, `clusterNetwork`).
 * No annotation or `[]` means the default network, resolved against `existing` when the
 * caller has a complete list of networks, else every candidate default.
 */
export function requestedNetworks(pod: KubeObject, existing?: ReadonlySet<string>): NetworkRequest {
  const ns = pod.metadata.namespace;
  const raw = pod.metadata.annotations?.[INTERFACES_ANNOTATION];
  if (raw === undefined) return { kind: 'default', ids: defaultNetwork(ns, existing) };
  let v: unknown;
  try {
    v = JSON.parse(raw);
  } catch {
    return { kind: 'unreadable', reason: `${INTERFACES_ANNOTATION} is not JSON` };
  }
  if (!Array.isArray(v)) return { kind: 'unreadable', reason: `${INTERFACES_ANNOTATION} is not a list` };
  if (v.length === 0) return { kind: 'default', ids: defaultNetwork(ns, existing) };
  const out: string[] = [];
  for (const e of v as unknown[]) {
    if (!e || typeof e !== 'object' || Array.isArray(e))
      return { kind: 'unreadable', reason: `${INTERFACES_ANNOTATION} has an entry that is not an object` };
    const x = e as Record<string, unknown>;
    const name = (k: string) => (typeof x[k] === 'string' && x[k] !== '' ? (x[k] as string) : undefined);
    const net = name('network');
    const tenant = name('tenantNetwork');
    const cluster = name('clusterNetwork');
    if (net !== undefined) out.push(networkId('DanmNet', ns, net));
    else if (tenant !== undefined) out.push(networkId('TenantNetwork', ns, tenant));
    else if (cluster !== undefined) out.push(networkId('ClusterNetwork', ns, cluster));
    else
      return {
        kind: 'unreadable',
        reason: `${INTERFACES_ANNOTATION} has an entry that names no network`,
      };
  }
  return { kind: 'explicit', ids: out };
}

/** The namespace of a network id (undefined for a ClusterNetwork). */
function namespaceOfId(id: string): string | undefined {
  const parts = id.split('/');
  return parts[0] === 'ClusterNetwork' ? undefined : parts[1];
}

/** For a network id: why a pod may be in CNI ADD on it (so its unheld bits must stay), or undefined. */
export type SetUpCheck = (netId: string) => string | undefined;

/**
 * Networks on which a live pod is being set up: it asks for the network but has no DanmEp
 * there yet, so its CNI ADD may have set a bit that no DanmEp holds. A pod on its default
 * network counts as set up once it has a DanmEp on any candidate default (DANM gives it
 * exactly one). A pod whose request cannot be read may be set up on every network it can
 * reach: the networks of its namespace and every ClusterNetwork. Bits of these networks
 * are never cleared. `existing`: the network ids of the same complete snapshot (exact
 * default resolution); without it every candidate default counts.
 */
export function networksBeingSetUp(
  pods: readonly KubeObject[],
  endpoints: readonly Endpoint[],
  existing?: ReadonlySet<string>,
): SetUpCheck {
  // DanmEps per pod and network: a pod may ask for several interfaces on one network, and
  // each is set up by its own CNI ADD (its bit set before its DanmEp is written).
  const has = new Map<string, number>();
  for (const e of endpoints) {
    const k = `${e.podUID}|${networkId(e.networkType, e.namespace, e.network)}`;
    has.set(k, (has.get(k) ?? 0) + 1);
  }
  const ids = new Map<string, string>();
  const namespaces = new Map<string, string>();
  let cluster: string | undefined;
  // Terminating pods count too: a pod deleted right after it was scheduled may still be in CNI ADD.
  for (const p of pods) {
    const req = requestedNetworks(p, existing);
    const ns = p.metadata.namespace ?? '';
    const who = () => `pod ${ns}/${p.metadata.name}`;
    if (req.kind === 'unreadable') {
      const why = `${who()} may be set up on any network it can reach (${req.reason})`;
      if (!namespaces.has(ns)) namespaces.set(ns, why);
      cluster ??= why;
      continue;
    }
    if (req.kind === 'default') {
      if (defaultCandidates(ns).some((id) => has.has(`${p.metadata.uid}|${id}`))) continue;
      for (const n of req.ids)
        if (!ids.has(n)) ids.set(n, `${who()} is being set up on its default network (no DanmEp yet)`);
      continue;
    }
    const asked = new Map<string, number>();
    for (const n of req.ids) asked.set(n, (asked.get(n) ?? 0) + 1);
    for (const [n, want] of asked) {
      const got = has.get(`${p.metadata.uid}|${n}`) ?? 0;
      if (got >= want || ids.has(n)) continue;
      ids.set(
        n,
        want === 1
          ? `${who()} is being set up on it (no DanmEp yet)`
          : `${who()} is being set up on it (${got} of its ${want} DanmEps there so far)`,
      );
    }
  }
  has.clear(); // the check below closes over this scope: drop what it does not read
  return (netId) => {
    const direct = ids.get(netId);
    if (direct !== undefined) return direct;
    const ns = namespaceOfId(netId);
    return ns === undefined ? cluster : namespaces.get(ns);
  };
}
