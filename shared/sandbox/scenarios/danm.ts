/**
 * DANM worlds for the sandbox and the tests, written over HTTP through the
 * KubeClient, so the same seeding runs on the fake and on a real API server.
 */
import { randomUUID } from 'node:crypto';
import { Bitmap } from '../../../functions/danm-endpoints/bitmap.ts';
import { danmResources, type NetworkType } from '../../../functions/danm-endpoints/model.ts';
import { ConflictError } from '../../kube/errors.ts';
import type { KubeClient } from '../../kube/ports.ts';
import { type KubeObject, PODS } from '../../kube/resources.ts';
import { type Cidr, contains, formatAddress, parseAddress, parseCidr } from '../../net/ip.ts';

export const R = danmResources('danm.k8s.io');

export function bitmapWith(cidrText: string, addresses: readonly string[], reserveEnds = true): string {
  const cidr = parseCidr(cidrText)!;
  let b = Bitmap.empty(cidr);
  if (reserveEnds) b = b.with(0, true).with(Number(cidr.size) - 1, true);
  for (const a of addresses) {
    const addr = parseAddress(a)!;
    if (!contains(cidr, addr)) throw new Error(`${a} is outside ${cidrText}`);
    b = b.with(Number(addr.value - cidr.network), true);
  }
  return b.encode();
}

/** The addresses whose bits are set in a network's IPv4 bitmap. */
export function allocated(net: KubeObject): string[] {
  const opts = (net.spec as { Options: { cidr: string; alloc: string } }).Options;
  const cidr = parseCidr(opts.cidr)!;
  const b = Bitmap.decode(opts.alloc, cidr);
  if (typeof b === 'string') throw new Error(b);
  return [...b.setBits()].map((i) => formatAddress(4, cidr.network + BigInt(i)));
}

/** The machine's hostname that real DANM writes as a DanmEp's `spec.Host`: never the node's name. */
export const DANM_HOST = 'danm-worker-host';

/** A prefix length's text for an address in this CIDR (`10.10.10.14/24`): DANM writes `lastIp` so. */
const withPrefix = (cidrText: string, address: string) => `${address}/${cidrText.split('/')[1]}`;

/**
 * A DANM network as real DANM v4.3.0 leaves it: the admission webhook fills
 * `allocation_pool {start, end}` (the CIDR's first and last usable address unless given),
 * every allocation writes `lastIp` with the prefix, and `allocation_pool_v6` is always there
 * (empty strings on an IPv4-only network). `alloc` reserves the network and broadcast bits.
 */
export async function createNetwork(
  kube: KubeClient,
  ns: string,
  name: string,
  cidr: string,
  addresses: readonly string[],
  extra: Record<string, unknown> = {},
  kind: NetworkType = 'DanmNet',
): Promise<KubeObject> {
  const c = parseCidr(cidr)!;
  const last = addresses.at(-1);
  return kube.create(R[kind], {
    apiVersion: 'danm.k8s.io/v1',
    kind,
    metadata: kind === 'ClusterNetwork' ? { name } : { name, namespace: ns },
    spec: {
      NetworkID: name,
      NetworkType: 'ipvlan',
      Options: {
        cidr,
        alloc: bitmapWith(cidr, addresses),
        allocation_pool: {
          start: formatAddress(4, c.network + 1n),
          end: formatAddress(4, c.network + c.size - 2n),
          lastIp: last === undefined ? '' : withPrefix(cidr, last),
        },
        allocation_pool_v6: { cidr: '', start: '', end: '', lastIp: '' },
        ...extra,
      },
    },
  });
}

export async function createPod(
  kube: KubeClient,
  ns: string,
  name: string,
  nodeName?: string,
  network = 'test-net1',
  /** The `danm.k8s.io/interfaces` value; `null` leaves the annotation out (the default network). */
  interfaces: string | null = JSON.stringify([{ network, ip: 'dynamic' }]),
): Promise<KubeObject> {
  return createPodObject(kube, ns, name, {
    labels: { app: name.replace(/-\d+$/, '') },
    ...(interfaces !== null ? { annotations: { 'danm.k8s.io/interfaces': interfaces } } : {}),
    ...(nodeName ? { nodeName } : {}),
  });
}

/** A pod with one container, its labels, annotations and node as given. */
export function createPodObject(
  kube: KubeClient,
  ns: string,
  name: string,
  o: { labels?: Record<string, string>; annotations?: Record<string, string>; nodeName?: string } = {},
): Promise<KubeObject> {
  return kube.create(PODS, {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name,
      namespace: ns,
      ...(o.labels ? { labels: o.labels } : {}),
      ...(o.annotations ? { annotations: o.annotations } : {}),
    },
    spec: {
      containers: [{ name: 'app', image: 'registry.local/app:1.0' }],
      ...(o.nodeName ? { nodeName: o.nodeName } : {}),
    },
  });
}

/** The 64 hex characters of a container (sandbox) id, as containerd writes them. */
const containerId = () => (randomUUID() + randomUUID()).replace(/-/g, '');

/**
 * A DanmEp as real DANM v4.3.0 writes it: its name a random UUID equal to `spec.EndpointID`,
 * the pod's labels copied (the same on the old and the new DanmEp of a re-created pod: never an
 * identity), `Host` the machine's hostname (not the node's name), a 64-hex `CID`, `netns`,
 * `MacAddress: ""` and `proutes`/`proutes6: null`.
 */
export async function createEndpoint(
  kube: KubeClient,
  pod: KubeObject,
  network: string,
  address: string,
  iface = 'eth0',
  apiType: NetworkType = 'DanmNet',
): Promise<KubeObject> {
  const id = randomUUID();
  const labels = pod.metadata.labels as Record<string, string> | undefined;
  return kube.create(R.danmeps, {
    apiVersion: 'danm.k8s.io/v1',
    kind: 'DanmEp',
    metadata: { name: id, namespace: pod.metadata.namespace, ...(labels ? { labels: { ...labels } } : {}) },
    spec: {
      EndpointID: id,
      NetworkName: network,
      NetworkType: 'ipvlan',
      apiType,
      Pod: pod.metadata.name,
      PodUID: pod.metadata.uid,
      Host: DANM_HOST,
      CID: containerId(),
      netns: `/var/run/netns/cni-${randomUUID()}`,
      Interface: {
        Name: iface,
        Address: address,
        AddressIPv6: '',
        MacAddress: '',
        proutes: null,
        proutes6: null,
      },
    },
  });
}

type NetOptions = {
  cidr: string;
  alloc: string;
  allocation_pool?: { start?: string; end?: string; lastIp?: string };
} & Record<string, unknown>;

/**
 * One read-modify-write of a network as DANM makes it: GET, change, a full PUT on the
 * resourceVersion read; a conflict reads again and retries.
 */
async function writeNetwork<T>(
  kube: KubeClient,
  ns: string,
  name: string,
  kind: NetworkType,
  change: (opts: NetOptions, cidr: Cidr, bits: Bitmap) => { opts: NetOptions; out: T },
): Promise<T> {
  for (let attempt = 0; attempt < 10; attempt++) {
    const net = await kube.get(R[kind], kind === 'ClusterNetwork' ? undefined : ns, name);
    if (!net) throw new Error(`${kind} ${ns}/${name} is not there`);
    const opts = (net.spec as { Options: NetOptions }).Options;
    const cidr = parseCidr(opts.cidr)!;
    const bits = Bitmap.decode(opts.alloc, cidr);
    if (typeof bits === 'string') throw new Error(bits);
    const { opts: next, out } = change(opts, cidr, bits);
    try {
      await kube.replace(R[kind], { ...net, spec: { ...(net.spec as object), Options: next } } as KubeObject);
      return out;
    } catch (err) {
      if (!(err instanceof ConflictError)) throw err;
    }
  }
  throw new Error(`${kind} ${ns}/${name}: too many conflicts`);
}

/** Sets (or clears) address bits as DANM does: a full PUT on the resourceVersion read; `lastIp` on a set. */
export async function setBits(
  kube: KubeClient,
  ns: string,
  name: string,
  addresses: readonly string[],
  value = true,
  kind: NetworkType = 'DanmNet',
): Promise<void> {
  await writeNetwork(kube, ns, name, kind, (opts, cidr, bits) => {
    let b = bits;
    for (const a of addresses) b = b.with(Number(parseAddress(a)!.value - cidr.network), value);
    const last = addresses.at(-1);
    const pool = opts.allocation_pool;
    return {
      opts: {
        ...opts,
        alloc: b.encode(),
        ...(value && last !== undefined && pool
          ? { allocation_pool: { ...pool, lastIp: withPrefix(opts.cidr, last) } }
          : {}),
      },
      out: undefined,
    };
  });
}

/**
 * Real DANM's CNI plugin, for the sandbox and the tests: the order it writes in and its
 * allocation policy (producers.md, "DANM v4.3.0 as it really writes").
 * - ADD: the bit first (first-fit from the pool's start: DANM cannot parse the `lastIp` it
 *   wrote, so an address freed is handed out again at once), then the DanmEp.
 * - An ADD that times out between the two leaves the bit set and no DanmEp (`allocate` alone).
 * - DEL: the bit first, then the DanmEp.
 * - re-ADD under the same pod UID (a node back without containerd's state): DANM deletes the
 *   pod's old DanmEps itself (bit first) and gives it new addresses.
 */
export const danmPlugin = {
  /** The first free address of the pool, its bit set (the first half of an ADD). */
  async allocate(
    kube: KubeClient,
    ns: string,
    network: string,
    kind: NetworkType = 'DanmNet',
  ): Promise<string> {
    return (await allocateOne(kube, ns, network, kind)).address;
  },
  /** A whole ADD: the bit, then the DanmEp. */
  async add(
    kube: KubeClient,
    pod: KubeObject,
    network: string,
    kind: NetworkType = 'DanmNet',
    iface = 'eth0',
  ): Promise<KubeObject> {
    const { prefixed } = await allocateOne(kube, pod.metadata.namespace!, network, kind);
    return createEndpoint(kube, pod, network, prefixed, iface, kind);
  },
  /** A DEL: the bit first, then the DanmEp (already gone is fine: a DEL is retried). */
  async del(kube: KubeClient, ep: KubeObject, kind: NetworkType = 'DanmNet'): Promise<void> {
    const spec = ep.spec as { NetworkName: string; Interface: { Address: string } };
    await setBits(
      kube,
      ep.metadata.namespace!,
      spec.NetworkName,
      [spec.Interface.Address.split('/')[0]!],
      false,
      kind,
    );
    await kube
      .delete(R.danmeps, ep.metadata.namespace!, ep.metadata.name)
      .catch((err: { status?: number }) => {
        if (err.status !== 404) throw err;
      });
  },
  /** An ADD again under the same pod UID: its old DanmEps go first (each bit first), then a new address. */
  async reAdd(
    kube: KubeClient,
    pod: KubeObject,
    network: string,
    kind: NetworkType = 'DanmNet',
  ): Promise<KubeObject> {
    const eps = await kube.listAll(R.danmeps, { namespace: pod.metadata.namespace! });
    for (const ep of eps.items)
      if ((ep.spec as { PodUID?: string }).PodUID === pod.metadata.uid) await danmPlugin.del(kube, ep, kind);
    return danmPlugin.add(kube, pod, network, kind);
  },
};

/** The first free address of the pool, its bit set, with and without its prefix. */
function allocateOne(
  kube: KubeClient,
  ns: string,
  network: string,
  kind: NetworkType,
): Promise<{ address: string; prefixed: string }> {
  return writeNetwork(kube, ns, network, kind, (opts, cidr, bits) => {
    const start = opts.allocation_pool?.start
      ? parseAddress(opts.allocation_pool.start)!.value
      : cidr.network + 1n;
    const end = opts.allocation_pool?.end
      ? parseAddress(opts.allocation_pool.end)!.value
      : cidr.network + cidr.size - 2n;
    for (let a = start; a <= end; a++) {
      const i = Number(a - cidr.network);
      if (bits.isSet(i)) continue;
      const address = formatAddress(4, a);
      return {
        opts: {
          ...opts,
          alloc: bits.with(i, true).encode(),
          allocation_pool: { ...(opts.allocation_pool ?? {}), lastIp: withPrefix(opts.cidr, address) },
        },
        out: { address, prefixed: withPrefix(opts.cidr, address) },
      };
    }
    throw new Error(`${kind} ${network}: the pool is exhausted`);
  });
}

/** The smallest leak: DanmNet test-net1 (10.10.10.0/24) with `ip` set, held by a DanmEp whose pod was force-deleted. */
export async function leakedEndpoint(
  kube: KubeClient,
  ns: string,
  ip: string,
  pod = 'gone-0',
): Promise<KubeObject> {
  await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', [ip]);
  const ep = await createEndpoint(kube, await createPod(kube, ns, pod), 'test-net1', `${ip}/24`);
  await forceDeletePod(kube, ns, pod);
  return ep;
}

/** Force-deletes a pod (grace 0), as an operator does after a node is lost. */
export async function forceDeletePod(kube: KubeClient, ns: string, name: string): Promise<void> {
  await kube.delete(PODS, ns, name, undefined, { gracePeriodSeconds: 0 });
}

export type SeedWorld = {
  ns: string;
  net: string;
  cidr: string;
  oldPods: Record<string, KubeObject>;
  oldEps: Record<string, KubeObject>;
  newPods: Record<string, KubeObject>;
  newEps: Record<string, KubeObject>;
  /** The address of the new ss-cinfo-0's ADD in flight (its bit set, its DanmEp not yet written). */
  inFlight?: string;
};

/**
 * The founding incident (seeds/danm-statefulset-ip-released.txt), as the real DANM plugin
 * makes it: test-net1's allocation pool starts at .10 (the seed's first address), every
 * address is handed out first-fit; five ss-cinfo pods, a node lost, two pods force-deleted
 * (no DEL ever comes), the StatefulSet re-creating them under the same names with new UIDs.
 */
export const seedIncident = {
  async before(kube: KubeClient, ns = 'default'): Promise<SeedWorld> {
    const w: SeedWorld = {
      ns,
      net: 'test-net1',
      cidr: '10.10.10.0/24',
      oldPods: {},
      oldEps: {},
      newPods: {},
      newEps: {},
    };
    await createNetwork(kube, ns, w.net, w.cidr, [], {
      allocation_pool: { start: '10.10.10.10', end: '10.10.10.254', lastIp: '' },
    });
    for (let i = 0; i < 5; i++) {
      const pod = await createPod(
        kube,
        ns,
        `ss-cinfo-${i}`,
        i === 0 || i === 4 ? 'clive-alp-worker-03' : `clive-alp-worker-0${i % 2 ? 2 : 1}`,
      );
      w.oldPods[pod.metadata.name] = pod;
      w.oldEps[pod.metadata.name] = await danmPlugin.add(kube, pod, w.net);
    }
    return w;
  },
  /** Node lost: ss-cinfo-0 and ss-cinfo-4 force-deleted; the new ss-cinfo-0 is in CNI ADD (its bit set first-fit, .15; no DanmEp yet). */
  async nodeLost(kube: KubeClient, w: SeedWorld): Promise<void> {
    await forceDeletePod(kube, w.ns, 'ss-cinfo-0');
    await forceDeletePod(kube, w.ns, 'ss-cinfo-4');
    w.newPods['ss-cinfo-0'] = await createPod(kube, w.ns, 'ss-cinfo-0', 'clive-alp-worker-02');
    w.inFlight = await danmPlugin.allocate(kube, w.ns, w.net);
  },
  /** CNI ADD finishes for the new ss-cinfo-0; the new ss-cinfo-4 comes up on the next free address, .16. */
  async cniDone(kube: KubeClient, w: SeedWorld): Promise<void> {
    w.newEps['ss-cinfo-0'] = await createEndpoint(kube, w.newPods['ss-cinfo-0']!, w.net, `${w.inFlight}/24`);
    w.newPods['ss-cinfo-4'] = await createPod(kube, w.ns, 'ss-cinfo-4', 'clive-alp-worker-01');
    w.newEps['ss-cinfo-4'] = await danmPlugin.add(kube, w.newPods['ss-cinfo-4']!, w.net);
  },
  /** The bits set once the old ss-cinfo-0 and ss-cinfo-4 are reclaimed: the network ends, the three untouched pods and the two new ones. */
  reclaimedBits: [
    '10.10.10.0',
    '10.10.10.11',
    '10.10.10.12',
    '10.10.10.13',
    '10.10.10.15',
    '10.10.10.16',
    '10.10.10.255',
  ],
};
