/**
 * Who may hold an address bit of a DANM network: one rule, used by the snapshot and by
 * every re-check. In order: a DanmEp that holds it (in use); a pod being set up on the
 * network (its CNI ADD may have set the bit); a DanmEp that cannot be parsed but may be
 * on the network. Built from complete lists of DanmEps and pods (and, for the default
 * network of a pod, the complete lists of networks).
 */
import {
  checkFreshCount,
  type FreshRead,
  freshEvidence,
  NotInstalledError,
  type RunContext,
} from '../../shared/contract/index.ts';
import type { KubeReader } from '../../shared/kube/ports.ts';
import { type KubeObject, PODS } from '../../shared/kube/resources.ts';
import type { Settings } from './data.ts';
import { BitHolders, firstHolder } from './holders.ts';
import {
  bitIndex,
  danmResources,
  type Endpoint,
  endpointAddress,
  GROUPS,
  type Network,
  type NetworkType,
  networkId,
  type Pool,
  parseEndpoint,
  parseNetwork,
  unparsableMayHold,
} from './model.ts';
import { type SetUpCheck, setUpTracker } from './pods.ts';

export const NETWORK_TYPES: readonly NetworkType[] = ['DanmNet', 'TenantNetwork', 'ClusterNetwork'];

export type BitVerdict = { used: string } | { indeterminate: string } | undefined;

export class BitEvidence {
  /** DanmEps that parse, and those that do not (which may hold bits: `unparsableMayHold`). */
  readonly parsed: Endpoint[] = [];
  readonly unparsable: KubeObject[] = [];
  /** Why each unparsable DanmEp does not parse, with what of its metadata could be read. */
  readonly failures: {
    uid: string;
    name: string;
    namespace: string;
    resourceVersion: string;
    reason: string;
  }[] = [];
  /** Per network and family, the DanmEps that hold each bit (by index: no string per bit). */
  private readonly holders = new Map<string, BitHolders>();
  private readonly tracker: ReturnType<typeof setUpTracker>;
  /** Until every pod was read (`podsRead`), any network may have a pod being set up. */
  private settingUp: SetUpCheck = () => 'a pod not read yet may be being set up on it';
  /** The namespace of the live pod of this UID, when it has a DanmEp (known once `podsRead`). */
  readonly podNamespace: (podUID: string) => string | undefined;

  /**
   * `networks`: the networks to index holders for (bitIndex needs their pools);
   * `existing`: ids of the networks that exist, for resolving a pod's default network.
   * The pods come after, one at a time (`pod`, a list's view), then `podsRead`.
   */
  constructor(
    eps: readonly EndpointView[],
    networks: ReadonlyMap<string, Network>,
    existing?: ReadonlySet<string>,
    skewMs?: number,
  ) {
    for (const v of eps) {
      if ('failure' in v) {
        this.unparsable.push(v.raw);
        this.failures.push(v.failure);
        continue;
      }
      const ep = v;
      this.parsed.push(ep);
      const net = networks.get(networkId(ep.networkType, ep.namespace, ep.network));
      if (!net) continue;
      for (const family of FAMILIES) {
        const pool = family === 4 ? net.v4 : net.v6;
        if (!pool) continue;
        const addr = endpointAddress(ep, family);
        const idx = addr ? bitIndex(pool, addr) : undefined;
        if (idx === undefined) continue;
        const k = `${net.id}|${family}`;
        let bits = this.holders.get(k);
        if (!bits) {
          bits = new BitHolders(pool.bitmap.bits);
          this.holders.set(k, bits);
        }
        bits.add(idx, ep);
      }
    }
    for (const bits of this.holders.values()) bits.seal();
    this.tracker = setUpTracker(this.parsed, existing, skewMs);
    this.podNamespace = this.tracker.podNamespace;
  }

  /**
   * The view of the pod list: each pod is judged as its page arrives and nothing of it is
   * kept (but its namespace, for a pod with a DanmEp). A list restarted after a 410 hands
   * some pods twice, and pods of the abandoned pages: more in use, never less.
   */
  readonly pod = (p: KubeObject): 1 => {
    this.tracker.add(p);
    return 1;
  };

  /** Every pod of one complete list was handed to `pod`; `keepPods` false: `podNamespace` is not asked after (it throws). */
  podsRead(keepPods: boolean): void {
    this.settingUp = this.tracker.done(keepPods);
  }

  /** Whether address `index` of `net` is held (other than by DanmEp `except`), may be, or is free. */
  verdict(net: Network, family: 4 | 6, index: number, except?: string | ReadonlySet<string>): BitVerdict {
    const excluded = (uid: string) =>
      typeof except === 'string' ? uid === except : except?.has(uid) === true;
    const holder = firstHolder(this.holders.get(`${net.id}|${family}`)?.at(index), (h) => !excluded(h.uid));
    if (holder) return { used: `held by DanmEp ${holder.namespace}/${holder.name}` };
    const inflight = this.settingUp(net.id, net.lastWriteMs);
    if (inflight !== undefined) return { indeterminate: `${inflight}: its CNI ADD may hold this address` };
    const odd = this.unparsable.find((o) => unparsableMayHold(o, net));
    if (odd)
      return {
        indeterminate: `a DanmEp that could not be parsed (${odd.metadata?.namespace ?? '?'}/${odd.metadata?.name ?? '?'}) may hold this address`,
      };
    return undefined;
  }
}

/**
 * What a DanmEp list keeps of each item, page by page: the parsed endpoint itself (no
 * wrapper: 150,000 of them were 4.6 MiB), or, for one that does not parse, why and the raw
 * object (it may hold bits: `unparsableMayHold`).
 */
export type EndpointView = Endpoint | Readonly<{ failure: BitEvidence['failures'][number]; raw: KubeObject }>;

const FAMILIES = [4, 6] as const;

/** The DanmEp view of one list (its repeated strings shared). */
export function endpointViewer(): (o: KubeObject) => EndpointView {
  const same = interner();
  return (o) => {
    const ep = endpointView(o);
    if ('failure' in ep) return ep;
    return { ...ep, namespace: same(ep.namespace), network: same(ep.network), iface: same(ep.iface) };
  };
}

export function endpointView(o: KubeObject): EndpointView {
  const p = parseEndpoint(o);
  if (p.ok) return p.ep;
  const { ok: _, ...why } = p;
  return { failure: { ...why, resourceVersion: String(o.metadata?.resourceVersion ?? '') }, raw: o };
}

export async function detectGroup(
  kube: KubeReader,
  preferred?: string,
  signal?: AbortSignal,
): Promise<string> {
  const groups = preferred ? [preferred] : GROUPS;
  for (const g of groups) if (await kube.serves(g, 'v1', 'danmeps', signal)) return g;
  throw new NotInstalledError(
    `neither ${groups.map((g) => `${g}/v1`).join(' nor ')} serves danmeps: is DANM installed, and may this identity discover it?`,
    { call: 'discover danm' },
  );
}

export async function readNetwork(
  kube: KubeReader,
  group: string,
  type: NetworkType,
  namespace: string | undefined,
  name: string,
  signal: AbortSignal,
): Promise<Network | undefined> {
  const o = await kube.get(
    danmResources(group)[type],
    type === 'ClusterNetwork' ? undefined : namespace,
    name,
    signal,
  );
  return o ? parseNetwork(o, type) : undefined;
}

/** One copy of each repeated string (namespaces, network names, annotation values) of one list. */
function interner(): (s: string) => string {
  const seen = new Map<string, string>();
  return (s) => {
    const had = seen.get(s);
    if (had !== undefined) return had;
    seen.set(s, s);
    return s;
  };
}

/** The network with one family's bitmap replaced (the object written back, resourceVersion included). */
export function withBitmaps(net: Network, v4: string | undefined, v6: string | undefined): KubeObject {
  const raw = structuredClone(net.raw) as KubeObject & { spec: { Options: Record<string, unknown> } };
  // the server keeps its managedFields when a write sends none (only their time was kept)
  delete (raw.metadata as { managedFields?: unknown }).managedFields;
  if (v4 !== undefined) raw.spec.Options.alloc = v4;
  if (v6 !== undefined) raw.spec.Options.alloc6 = v6;
  return raw;
}

export const poolOf = (net: Network, family: 4 | 6): Pool | undefined => (family === 4 ? net.v4 : net.v6);

/** Fresh, complete evidence of who may hold any bit of any network (read after the decision). */
export type DanmEvidence = Readonly<{
  /** Every network, as listed before the DanmEps and pods. */
  networks: ReadonlyMap<string, Network>;
  /** DanmEp UID -> resourceVersion (those that parse and those that do not). */
  eps: ReadonlyMap<string, string>;
  /** The DanmEps asked to be kept (by UID), as listed: the tombstones of those the act phase deletes. */
  kept: ReadonlyMap<string, KubeObject>;
  /** Pod UID -> namespace, of the live pods that have a DanmEp in `eps` (a DanmEp's pod lives when it is here, in its namespace). */
  podNamespace: (podUID: string) => string | undefined;
  /** Items of the pods list, as the snapshot counts them. */
  podCount: number;
  holders: BitEvidence;
}>;

/** The UIDs of the DanmEps among targets (the act phase's): its evidence list keeps them whole, as their tombstones. */
export function endpointUids(targets: RunContext['confirmed']): Set<string> {
  const uids = new Set<string>();
  for (const t of targets ?? []) {
    const d = t.data;
    const uid = t.kind === 'DanmEp' && typeof d === 'object' && d !== null && 'uid' in d ? d.uid : undefined;
    if (typeof uid === 'string') uids.add(uid);
  }
  return uids;
}

export async function readDanmEvidence(
  kube: KubeReader,
  group: string,
  pageSize: number,
  signal: AbortSignal,
  skewMs?: number,
  keep: ReadonlySet<string> = new Set(),
): Promise<DanmEvidence> {
  const R = danmResources(group);
  const networks = new Map<string, Network>();
  for (const type of NETWORK_TYPES) {
    const ref = R[type];
    if (!(await kube.serves(group, 'v1', ref.plural, signal))) continue;
    for (const o of (await kube.listAll(ref, { pageSize, signal, lastWriteTime: true })).items) {
      const n = parseNetwork(o, type);
      networks.set(n.id, n);
    }
  }
  const kept = new Map<string, KubeObject>();
  const viewer = endpointViewer();
  const view = (o: KubeObject) => {
    const uid = o.metadata?.uid;
    if (uid && keep.has(uid)) kept.set(uid, { apiVersion: `${group}/v1`, kind: R.danmeps.kind, ...o });
    return viewer(o);
  };
  const list = await kube.listAll(R.danmeps, { pageSize, signal, view });
  const eps = new Map<string, string>();
  for (const v of list.items)
    if (!('failure' in v)) eps.set(v.uid, v.resourceVersion);
    else if (v.failure.uid) eps.set(v.failure.uid, v.failure.resourceVersion);
  const holders = new BitEvidence(list.items, networks, new Set(networks.keys()), skewMs);
  const pods = await kube.listAll(PODS, { metadataOnly: true, pageSize, signal, view: holders.pod });
  holders.podsRead(true);
  return { networks, eps, kept, podNamespace: holders.podNamespace, podCount: pods.items.length, holders };
}

/** The evidence of the run's act phase (shared by every batch, re-read when older than the bound). */
export function danmEvidence(
  kube: KubeReader,
  group: string,
  ctx: RunContext<Settings>,
  newerThan?: FreshRead<DanmEvidence>,
): Promise<FreshRead<DanmEvidence>> {
  return freshEvidence(
    ctx,
    `danm-endpoints:${group}`,
    async () => {
      const ev = await readDanmEvidence(
        kube,
        group,
        ctx.settings.pageSize,
        ctx.signal,
        ctx.settings.serverSkewSeconds * 1000,
        endpointUids(ctx.confirmed),
      );
      // held to the snapshot that decided, as the snapshot was to the run before it
      checkFreshCount(ctx, 'pods', ev.podCount);
      return ev;
    },
    newerThan ? { newerThan } : {},
  );
}
