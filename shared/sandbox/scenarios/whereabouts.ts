/** whereabouts worlds for the sandbox and the tests, written over HTTP. */
import { randomUUID } from 'node:crypto';
import { IPPOOLS, NETWORK_STATUS, RESERVATIONS } from '../../../functions/whereabouts-ips/model.ts';
import type { KubeClient } from '../../kube/ports.ts';
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

export async function allocate(
  kube: KubeClient,
  ns: string,
  pool: string,
  range: string,
  ip: string,
  a: Alloc,
): Promise<void> {
  const p = (await kube.get(IPPOOLS, ns, pool))!;
  const spec = p.spec as { allocations: Record<string, Alloc> };
  await kube.replace(IPPOOLS, {
    ...p,
    spec: { ...spec, allocations: { ...spec.allocations, [offsetOf(range, ip)]: { ifname: 'net1', ...a } } },
  } as KubeObject);
}

export function networkStatus(ips: readonly string[]): string {
  return JSON.stringify([
    { name: 'cbr0', interface: 'eth0', ips: ['10.244.0.9'], default: true },
    { name: 'default/macvlan', interface: 'net1', ips, mac: '02:00:00:00:00:02' },
  ]);
}

/** A pod; `ips` undefined leaves the network-status annotation off (CNI ADD not reported yet). */
export async function createPodWithStatus(
  kube: KubeClient,
  ns: string,
  name: string,
  ips?: readonly string[],
): Promise<KubeObject> {
  return createPodObject(
    kube,
    ns,
    name,
    ips ? { annotations: { [NETWORK_STATUS]: networkStatus(ips) } } : {},
  );
}

export async function setNetworkStatus(
  kube: KubeClient,
  ns: string,
  name: string,
  value: string,
): Promise<void> {
  await kube.mergePatch(PODS, ns, name, { metadata: { annotations: { [NETWORK_STATUS]: value } } });
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
