/**
 * DANM worlds for the sandbox and the tests, written over HTTP through the
 * KubeClient, so the same seeding runs on the fake and on a real API server.
 */
import { randomUUID } from 'node:crypto';
import { Bitmap } from '../../../functions/danm-endpoints/bitmap.ts';
import { danmResources, type NetworkType } from '../../../functions/danm-endpoints/model.ts';
import type { KubeClient } from '../../kube/ports.ts';
import { type KubeObject, PODS } from '../../kube/resources.ts';
import { contains, formatAddress, parseAddress, parseCidr } from '../../net/ip.ts';

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

export async function createNetwork(
  kube: KubeClient,
  ns: string,
  name: string,
  cidr: string,
  addresses: readonly string[],
  extra: Record<string, unknown> = {},
  kind: NetworkType = 'DanmNet',
): Promise<KubeObject> {
  return kube.create(R[kind], {
    apiVersion: 'danm.k8s.io/v1',
    kind,
    metadata: kind === 'ClusterNetwork' ? { name } : { name, namespace: ns },
    spec: {
      NetworkID: name,
      NetworkType: 'ipvlan',
      Options: { cidr, alloc: bitmapWith(cidr, addresses), ...extra },
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

export async function createEndpoint(
  kube: KubeClient,
  pod: KubeObject,
  network: string,
  address: string,
  iface = 'eth0',
  apiType: NetworkType = 'DanmNet',
): Promise<KubeObject> {
  return kube.create(R.danmeps, {
    apiVersion: 'danm.k8s.io/v1',
    kind: 'DanmEp',
    metadata: { name: randomUUID(), namespace: pod.metadata.namespace },
    spec: {
      NetworkName: network,
      NetworkType: 'ipvlan',
      apiType,
      Pod: pod.metadata.name,
      PodUID: pod.metadata.uid,
      Host: 'worker',
      CID: randomUUID().replace(/-/g, ''),
      Interface: { Name: iface, Address: address, AddressIPv6: '', MacAddress: '02:00:00:00:00:01' },
    },
  });
}

/** Sets (or clears) address bits the way the CNI plugin does: read, flip, write with resourceVersion. */
export async function setBits(
  kube: KubeClient,
  ns: string,
  name: string,
  addresses: readonly string[],
  value = true,
  kind: NetworkType = 'DanmNet',
): Promise<void> {
  for (let attempt = 0; attempt < 5; attempt++) {
    const net = (await kube.get(R[kind], kind === 'ClusterNetwork' ? undefined : ns, name))!;
    const opts = (net.spec as { Options: { cidr: string; alloc: string } }).Options;
    const cidr = parseCidr(opts.cidr)!;
    let b = Bitmap.decode(opts.alloc, cidr) as Bitmap;
    for (const a of addresses) b = b.with(Number(parseAddress(a)!.value - cidr.network), value);
    try {
      await kube.replace(R[kind], {
        ...net,
        spec: { ...(net.spec as object), Options: { ...opts, alloc: b.encode() } },
      } as KubeObject);
      return;
    } catch (err) {
      if ((err as { status?: number }).status !== 409) throw err;
    }
  }
  throw new Error(`setBits ${ns}/${name}: too many conflicts`);
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
};

/**
 * The founding incident (seeds/danm-statefulset-ip-released.txt), step by step:
 * five ss-cinfo pods on test-net1, a node lost, two pods force-deleted, the
 * StatefulSet re-creating them under the same names with new UIDs.
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
    await createNetwork(kube, ns, w.net, w.cidr, [
      '10.10.10.10',
      '10.10.10.11',
      '10.10.10.12',
      '10.10.10.13',
      '10.10.10.14',
    ]);
    for (let i = 0; i < 5; i++) {
      const pod = await createPod(
        kube,
        ns,
        `ss-cinfo-${i}`,
        i === 0 || i === 4 ? 'clive-alp-worker-03' : `clive-alp-worker-0${i % 2 ? 2 : 1}`,
      );
      w.oldPods[pod.metadata.name] = pod;
      w.oldEps[pod.metadata.name] = await createEndpoint(kube, pod, w.net, `10.10.10.${10 + i}/24`);
    }
    return w;
  },
  /** Node lost: ss-cinfo-0 and ss-cinfo-4 force-deleted; the new ss-cinfo-0 is in CNI ADD (bit set, no DanmEp yet). */
  async nodeLost(kube: KubeClient, w: SeedWorld): Promise<void> {
    await forceDeletePod(kube, w.ns, 'ss-cinfo-0');
    await forceDeletePod(kube, w.ns, 'ss-cinfo-4');
    w.newPods['ss-cinfo-0'] = await createPod(kube, w.ns, 'ss-cinfo-0', 'clive-alp-worker-02');
    await setBits(kube, w.ns, w.net, ['10.10.10.15']);
  },
  /** CNI ADD finishes for the new ss-cinfo-0; the new ss-cinfo-4 comes up on .16. */
  async cniDone(kube: KubeClient, w: SeedWorld): Promise<void> {
    w.newEps['ss-cinfo-0'] = await createEndpoint(kube, w.newPods['ss-cinfo-0']!, w.net, '10.10.10.15/24');
    w.newPods['ss-cinfo-4'] = await createPod(kube, w.ns, 'ss-cinfo-4', 'clive-alp-worker-01');
    await setBits(kube, w.ns, w.net, ['10.10.10.16']);
    w.newEps['ss-cinfo-4'] = await createEndpoint(kube, w.newPods['ss-cinfo-4']!, w.net, '10.10.10.16/24');
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
