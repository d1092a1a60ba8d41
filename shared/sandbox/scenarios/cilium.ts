/** Cilium objects for the rule packs' scenarios and the sandbox: endpoints, identities, slices. */
import { randomInt } from 'node:crypto';
import type { KubeClient } from '../../kube/ports.ts';
import type { KubeObject, ResourceRef } from '../../kube/resources.ts';

export const CILIUM = {
  endpoints: {
    group: 'cilium.io',
    version: 'v2',
    plural: 'ciliumendpoints',
    kind: 'CiliumEndpoint',
    namespaced: true,
  },
  identities: {
    group: 'cilium.io',
    version: 'v2',
    plural: 'ciliumidentities',
    kind: 'CiliumIdentity',
    namespaced: false,
  },
  slices: {
    group: 'cilium.io',
    version: 'v2alpha1',
    plural: 'ciliumendpointslices',
    kind: 'CiliumEndpointSlice',
    namespaced: false,
  },
} as const satisfies Record<string, ResourceRef>;

/** A numeric identity id no other test of this process picks (Cilium's cluster-local range). */
export function identityId(): number {
  return randomInt(256, 65_535) * 1000 + randomInt(0, 1000);
}

/** The CiliumEndpoint the agent writes for a pod: named as the pod, owned by it (by UID). */
export function createEndpoint(
  kube: KubeClient,
  pod: KubeObject,
  identity: number,
  owner: 'pod' | 'none' = 'pod',
): Promise<KubeObject> {
  return kube.create(CILIUM.endpoints, {
    apiVersion: 'cilium.io/v2',
    kind: 'CiliumEndpoint',
    metadata: {
      name: pod.metadata.name,
      namespace: pod.metadata.namespace,
      ...(owner === 'pod'
        ? {
            ownerReferences: [
              { apiVersion: 'v1', kind: 'Pod', name: pod.metadata.name, uid: pod.metadata.uid },
            ],
          }
        : {}),
    },
    status: { identity: { id: identity, labels: [`k8s:app=${pod.metadata.name}`] } },
  });
}

/** The agent catching up with a re-created pod: the endpoint's owner becomes the new Pod. */
export function adoptEndpoint(kube: KubeClient, ep: KubeObject, pod: KubeObject): Promise<KubeObject> {
  return kube.replace(CILIUM.endpoints, {
    ...ep,
    metadata: {
      ...ep.metadata,
      ownerReferences: [{ apiVersion: 'v1', kind: 'Pod', name: pod.metadata.name, uid: pod.metadata.uid }],
    },
  });
}

export function createIdentity(kube: KubeClient, id: number, namespace: string): Promise<KubeObject> {
  return kube.create(CILIUM.identities, {
    apiVersion: 'cilium.io/v2',
    kind: 'CiliumIdentity',
    metadata: { name: String(id), labels: { 'io.kubernetes.pod.namespace': namespace } },
    'security-labels': { 'k8s:io.kubernetes.pod.namespace': namespace },
  });
}

export function createSlice(kube: KubeClient, name: string, namespace: string, ids: readonly number[]) {
  return kube.create(CILIUM.slices, {
    apiVersion: 'cilium.io/v2alpha1',
    kind: 'CiliumEndpointSlice',
    metadata: { name },
    namespace,
    endpoints: ids.map((id, i) => ({ id, name: `ep-${i}` })),
  });
}
