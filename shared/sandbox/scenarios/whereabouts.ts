/**
 * whereabouts worlds for the sandbox and the tests, written over HTTP as whereabouts v0.9.4
 * and Multus v3.9.3 write them (read from the real plugins on the test node):
 * - the IPPool is the plugin's own, in the namespace of its kubeconfig's context
 *   (kube-system by default), named after its range (`10.89.0.0/24` is `10.89.0.0-24`);
 *   allocations are keyed by offset: `{id: <sandbox id>, podref: ns/name, ifname}`;
 * - an ADD takes the Lease `whereabouts`, patches the pool (a JSON Patch that tests the
 *   resourceVersion and that each added path is empty), then creates the reservation
 *   (named by the address, `{podref, ifname}`: no container id); Multus writes the pod's
 *   network-status after the whole ADD;
 * - an ADD whose podref and interface already have an allocation takes it over: the same
 *   address, the new sandbox id (a StatefulSet pod re-created under its name keeps its address);
 * - a DEL frees by sandbox id and interface, and deletes the reservation.
 */
import { randomUUID } from 'node:crypto';
import { IPPOOLS, NETWORK_STATUS, RESERVATIONS } from '../../../functions/whereabouts-ips/model.ts';
import type { JsonPatchOp, KubeClient } from '../../kube/ports.ts';
import { type KubeObject, PODS } from '../../kube/resources.ts';
import { parseAddress, parseCidr } from '../../net/ip.ts';
import { createPodObject } from './danm.ts';

export type Alloc = { id: string; podref: string; ifname?: string };

export function containerId(): string {
  return randomUUID().replace(/-/g, '') + randomUUID().replace(/-/g, '');
}

export function offsetOf(range: string, ip: string): string {
  const c = parseCidr(range)!;
  return String(parseAddress(ip)!.value - c.network);
}

export async function createPool(
  kube: KubeClient,
  ns: string,
  name: string,
  range: string,
  allocations: Record<string, Alloc> = {},
): Promise<KubeObject> {
  const allocs: Record<string, Alloc> = {};
  for (const [ip, a] of Object.entries(allocations)) allocs[offsetOf(range, ip)] = { ifname: 'net1', ...a };
  return kube.create(IPPOOLS, {
    apiVersion: 'whereabouts.cni.cncf.io/v1alpha1',
    kind: 'IPPool',
    metadata: { name, namespace: ns },
    spec: { range, allocations: allocs },
  });
}

/** A JSON Patch on the pool whose first operation tests the resourceVersion just read, as whereabouts writes. */
async function patchPool(
  kube: KubeClient,
  ns: string,
  pool: string,
  ops: (p: KubeObject) => JsonPatchOp[],
): Promise<void> {
  const p = (await kube.get(IPPOOLS, ns, pool))!;
  await kube.jsonPatch(IPPOOLS, ns, pool, [
    { op: 'test', path: '/metadata/resourceVersion', value: p.metadata.resourceVersion },
    ...ops(p),
  ]);
}

/** The allocation at `ip`, written as whereabouts does: a JSON Patch on the resourceVersion read. */
export async function allocate(
  kube: KubeClient,
  ns: string,
  pool: string,
  range: string,
  ip: string,
  a: Alloc,
): Promise<void> {
  const path = `/spec/allocations/${offsetOf(range, ip)}`;
  await patchPool(kube, ns, pool, () => [
    { op: 'test', path, value: null },
    { op: 'add', path, value: { ifname: 'net1', ...a } },
  ]);
}

/** A DEL of whatever holds `ip`, then an ADD that gets `ip` again for `a` (two patches, as whereabouts writes them). */
export async function reallocate(
  kube: KubeClient,
  ns: string,
  pool: string,
  range: string,
  ip: string,
  a: Alloc,
): Promise<void> {
  await patchPool(kube, ns, pool, () => [{ op: 'remove', path: `/spec/allocations/${offsetOf(range, ip)}` }]);
  await allocate(kube, ns, pool, range, ip, a);
}

/**
 * whereabouts' ADD for a pod of `podref` whose allocation on `ifname` exists already: it
 * takes it over (its address, the new sandbox id). Undefined when there is none.
 */
export async function takeOver(
  kube: KubeClient,
  ns: string,
  pool: string,
  a: Required<Alloc>,
): Promise<string | undefined> {
  let offset: string | undefined;
  await patchPool(kube, ns, pool, (p) => {
    const allocs = (p.spec as { allocations?: Record<string, Alloc> }).allocations ?? {};
    offset = Object.keys(allocs).find(
      (o) => allocs[o]!.podref === a.podref && (allocs[o]!.ifname ?? '') === a.ifname,
    );
    return offset === undefined
      ? []
      : [{ op: 'replace', path: `/spec/allocations/${offset}/id`, value: a.id }];
  });
  return offset;
}

/**
 * Multus' network-status: the cluster network (named as its delegate's configuration) first,
 * `default: true`; then each attachment named `namespace/NetworkAttachmentDefinition`; each
 * entry indented by four spaces, joined by commas (as Multus v3.9 prints it).
 */
export function networkStatus(ips: readonly string[], attachment = 'default/macvlan'): string {
  const entries = [
    {
      name: 'cbr0',
      interface: 'eth0',
      ips: ['10.244.0.9'],
      mac: '0a:58:0a:f4:00:09',
      default: true,
      dns: {},
    },
    { name: attachment, interface: 'net1', ips, mac: '02:00:00:00:00:02', dns: {} },
  ];
  return `[${entries.map((e) => JSON.stringify(e, null, 4)).join(',')}]`;
}

/** Multus writes the deprecated `networks-status` beside `network-status`, the same text. */
const statusAnnotations = (value: string) => ({
  [NETWORK_STATUS]: value,
  'k8s.v1.cni.cncf.io/networks-status': value,
});

/** A pod; `ips` undefined leaves the network-status annotation off (CNI ADD not reported yet). */
export async function createPodWithStatus(
  kube: KubeClient,
  ns: string,
  name: string,
  ips?: readonly string[],
): Promise<KubeObject> {
  return createPodObject(kube, ns, name, ips ? { annotations: statusAnnotations(networkStatus(ips)) } : {});
}

export async function setNetworkStatus(
  kube: KubeClient,
  ns: string,
  name: string,
  value: string,
): Promise<void> {
  await kube.mergePatch(PODS, ns, name, { metadata: { annotations: statusAnnotations(value) } });
}

/**
 * The reservation whereabouts (v0.9) writes after the pool: podref and ifname, no container
 * id (a re-created pod of the same name takes the allocation over and keeps it).
 */
export async function createReservation(
  kube: KubeClient,
  ns: string,
  ip: string,
  a: Pick<Alloc, 'podref' | 'ifname'>,
): Promise<KubeObject> {
  return kube.create(RESERVATIONS, {
    apiVersion: 'whereabouts.cni.cncf.io/v1alpha1',
    kind: 'OverlappingRangeIPReservation',
    metadata: { name: ip.replace(/:/g, '-'), namespace: ns },
    spec: { podref: a.podref, ifname: a.ifname ?? 'net1' },
  });
}

export async function allocations(
  kube: KubeClient,
  ns: string,
  pool: string,
): Promise<Record<string, Alloc>> {
  return (
    ((await kube.get(IPPOOLS, ns, pool))!.spec as { allocations: Record<string, Alloc> }).allocations ?? {}
  );
}
