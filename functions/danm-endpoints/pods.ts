/**
 * The networks a pod asks for (its interfaces annotation, or the default network DANM
 * resolves) and whether a pod is being set up on a network: a pod with fewer DanmEps on a
 * network than interfaces asked for there may hold an address there already.
 */
import type { KubeObject } from '../../shared/kube/resources.ts';
import { type Endpoint, networkId } from './model.ts';

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

/**
 * For a network id (and when the server last wrote a change to it): why a pod may be in CNI
 * ADD on it (so its unheld bits must stay), or undefined.
 */
export type SetUpCheck = (netId: string, lastWriteMs?: number) => string | undefined;

/**
 * How far apart the API servers' clocks may be (a network written through one, a pod created
 * through another): a pod counts as created after a network's last write only when its
 * creationTimestamp is later by more than this (the default of `serverSkewSeconds`).
 */
export const SERVER_SKEW_MS = 60_000;

/** Why a pod protects a network's unheld bits, and when the earliest such pod was created. */
type Protection = { why: string; createdMs: number };

/**
 * Networks on which a live pod is being set up: it asks for the network but has no DanmEp
 * there yet, so its CNI ADD may have set a bit that no DanmEp holds. A pod on its default
 * network counts as set up once it has a DanmEp on any candidate default (DANM gives it
 * exactly one). A pod whose request cannot be read may be set up on every network it can
 * reach: the networks of its namespace and every ClusterNetwork. Bits of these networks
 * are never cleared. `existing`: the network ids of the same complete snapshot (exact
 * default resolution); without it every candidate default counts.
 *
 * But DANM sets a bit only by writing the network: a pod created after the network's last
 * write (by more than `skew`, both on the server's clock) has set no bit there, whatever it
 * waits for (an ADD refused on a pool with no free address writes nothing). Such pods do not
 * protect the network, so that leaked bits that exhausted a pool can go while the pods that
 * wait for an address stay pending; a pod whose time cannot be read, or a network whose last
 * write is unknown, protects as before.
 */
export function networksBeingSetUp(
  pods: readonly KubeObject[],
  endpoints: readonly Endpoint[],
  existing?: ReadonlySet<string>,
  skew: number = SERVER_SKEW_MS,
): SetUpCheck {
  const t = setUpTracker(endpoints, existing, skew);
  for (const p of pods) t.add(p);
  return t.done(false);
}

/**
 * `networksBeingSetUp` a pod at a time, as the pages of the pod list arrive (nothing kept of
 * a pod but what protects a network and, for a pod with DanmEps, its namespace: `live`).
 * Every pod of one complete list is added, then `done()` gives the check.
 */
export function setUpTracker(
  endpoints: readonly Endpoint[],
  existing?: ReadonlySet<string>,
  skew: number = SERVER_SKEW_MS,
): {
  add: (p: KubeObject) => void;
  /** Every pod was added: the check. `keepPods` false drops the index of DanmEps by pod (`podNamespace` then throws). */
  done: (keepPods: boolean) => SetUpCheck;
  /** The namespace of the live pod of this UID, when it has a DanmEp (else undefined). */
  podNamespace: (podUID: string) => string | undefined;
} {
  // a skew that is not a number (settings not validated) must never switch the guard off
  const skewMs = Number.isFinite(skew) && skew >= 0 ? skew : SERVER_SKEW_MS;
  // DanmEps per pod (keyed by the DanmEp's own podUID string: no string built per DanmEp),
  // then per network when a pod is looked at: a pod may ask for several interfaces on one
  // network, and each is set up by its own CNI ADD (its bit set before its DanmEp is written).
  const byPod = new Map<string, Endpoint | Endpoint[]>();
  for (const e of endpoints) {
    const had = byPod.get(e.podUID);
    if (had === undefined) byPod.set(e.podUID, e);
    else if (Array.isArray(had)) had.push(e);
    else byPod.set(e.podUID, [had, e]);
  }
  /** How many of a pod's DanmEps (`had`, looked up once a pod) are on network `id`. */
  const on = (had: Endpoint | Endpoint[] | undefined, id: string): number => {
    if (had === undefined) return 0;
    let n = 0;
    for (const e of Array.isArray(had) ? had : [had])
      if (networkId(e.networkType, e.namespace, e.network) === id) n++;
    return n;
  };
  const ids = new Map<string, Protection>();
  const namespaces = new Map<string, Protection>();
  let cluster: Protection | undefined;
  // the earliest-created pod of each scope says why: it is the last to stop protecting
  const keep = (m: Map<string, Protection>, k: string, p: Protection) => {
    const cur = m.get(k);
    if (!cur || p.createdMs < cur.createdMs) m.set(k, p);
  };
  // Terminating pods count too: a pod deleted right after it was scheduled may still be in CNI ADD.
  const add = (p: KubeObject): void => {
    const req = requestedNetworks(p, existing);
    const ns = p.metadata.namespace ?? '';
    const mine = p.metadata.uid === undefined ? undefined : byPod.get(p.metadata.uid);
    // on each of its DanmEps, valued by the DanmEp's own string where they agree: nothing of
    // the pod's page is kept
    if (mine !== undefined) {
      const n = p.metadata.namespace;
      for (const e of Array.isArray(mine) ? mine : [mine])
        e.podNamespace = n === e.namespace ? e.namespace : n;
    }
    const who = () => `pod ${ns}/${p.metadata.name}`;
    // read only for a pod that protects a network (most pods have their DanmEps already)
    const createdMs = () => {
      const created = Date.parse(String(p.metadata.creationTimestamp ?? ''));
      // no readable time: it protects, whatever the network's last write
      return Number.isFinite(created) ? created : Number.NEGATIVE_INFINITY;
    };
    if (req.kind === 'unreadable') {
      const why = {
        why: `${who()} may be set up on any network it can reach (${req.reason})`,
        createdMs: createdMs(),
      };
      keep(namespaces, ns, why);
      if (!cluster || why.createdMs < cluster.createdMs) cluster = why;
      return;
    }
    if (req.kind === 'default') {
      if (defaultCandidates(ns).some((id) => on(mine, id) > 0)) return;
      for (const n of req.ids)
        keep(ids, n, {
          why: `${who()} is being set up on its default network (no DanmEp yet)`,
          createdMs: createdMs(),
        });
      return;
    }
    // the common request, one interface: no count of networks to build
    if (req.ids.length === 1) {
      const n = req.ids[0]!;
      if (on(mine, n) === 0)
        keep(ids, n, { why: `${who()} is being set up on it (no DanmEp yet)`, createdMs: createdMs() });
      return;
    }
    const asked = new Map<string, number>();
    for (const n of req.ids) asked.set(n, (asked.get(n) ?? 0) + 1);
    for (const [n, want] of asked) {
      const got = on(mine, n);
      if (got >= want) continue;
      keep(ids, n, {
        why:
          want === 1
            ? `${who()} is being set up on it (no DanmEp yet)`
            : `${who()} is being set up on it (${got} of its ${want} DanmEps there so far)`,
        createdMs: createdMs(),
      });
    }
  };
  const protects = (p: Protection | undefined, lastWriteMs: number | undefined) =>
    p !== undefined && (lastWriteMs === undefined || p.createdMs <= lastWriteMs + skewMs) ? p.why : undefined;
  const check: SetUpCheck = (netId, lastWriteMs) => {
    const direct = protects(ids.get(netId), lastWriteMs);
    if (direct !== undefined) return direct;
    const ns = namespaceOfId(netId);
    return protects(ns === undefined ? cluster : namespaces.get(ns), lastWriteMs);
  };
  let dropped = false;
  const done = (keepPods: boolean) => {
    // the check closes over this scope: a caller that asks no pod by UID drops the index (7 MiB at 150,000)
    if (!keepPods) {
      byPod.clear();
      dropped = true;
    }
    return check;
  };
  const podNamespace = (podUID: string) => {
    // an index dropped answers nothing, never "no such pod"
    if (dropped) throw new Error('setUpTracker: podNamespace asked after its index was dropped');
    const had = byPod.get(podUID);
    return (Array.isArray(had) ? had[0] : had)?.podNamespace;
  };
  return { add, done, podNamespace };
}
