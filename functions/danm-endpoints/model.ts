/**
 * DANM objects as twopass reads them: DanmEps and the three network kinds.
 * Parsing never throws; a malformed object comes back with the reason.
 */
import {
  type KubeObject,
  lastWriteMs,
  type ObjectIdentity,
  type ResourceRef,
} from '../../shared/kube/resources.ts';
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
    /**
     * The interface's addresses, without their prefix, as `formatAddress` writes them (IPv6
     * canonical): text, not a parsed Address, and a string of its own (not a slice of the
     * listed one, which would keep the whole `ip/prefix` alive). At 150,000 DanmEps a parsed
     * address (an object, a bigint, the slice and its parent) was 18 MiB of the heap;
     * `endpointAddress` parses one again where a bit index is needed.
     */
    v4?: string;
    v6?: string;
  }> & {
    /**
     * The namespace of this DanmEp's pod, set by the pod list (`setUpTracker`) when it
     * lists a pod of the DanmEp's PodUID; undefined while no such pod was listed. A field of
     * the endpoint, not a map by PodUID: at 150,000 DanmEps that map was 7 MiB.
     */
    podNamespace?: string | undefined;
  };

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
      ...(v4 !== 'none' ? { v4: ownText(v4) } : {}),
      ...(v6 !== 'none' ? { v6: ownText(v6) } : {}),
      // a slot of its own from the start: set later on 150,000 objects, it would grow each one
      podNamespace: undefined,
    },
  };
}

/**
 * An address's text as a string of its own. An IPv4 address's text is the regex's slice of
 * `ip/prefix`, and V8 keeps a slice of 13 characters or more as a view of its parent;
 * `toLowerCase` copies it (digits and dots are unchanged). An IPv6 address's text is
 * already built by `formatAddress`.
 */
function ownText(a: Address): string {
  return a.family === 4 ? a.text.toLowerCase() : a.text;
}

/** An endpoint's address of `family`, parsed again (for its bit index). */
export function endpointAddress(ep: Endpoint, family: 4 | 6): Address | undefined {
  const text = family === 4 ? ep.v4 : ep.v6;
  return text === undefined ? undefined : parseAddress(text);
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
  /**
   * When the server last wrote a change to it (its managedFields' newest time, whole seconds,
   * the server's clock); undefined when the server keeps none.
   */
  lastWriteMs?: number;
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
  const lastWrite = lastWriteMs(md.managedFields);
  const base = {
    id,
    type,
    uid: md.uid,
    name: md.name,
    resourceVersion: md.resourceVersion,
    annotations: o.metadata.annotations,
    ...(lastWrite !== undefined ? { lastWriteMs: lastWrite } : {}),
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
