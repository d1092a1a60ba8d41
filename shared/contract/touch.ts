/**
 * What a target's removal writes, declared by its kind (`KindSpec.touches`): the act phase
 * lets a write through to a server only when it names an object a target of the run
 * declared, that target's tombstone is durable, and the write carries its server-side
 * precondition (shared/runtime/guard.ts). Objects are named the same way here and there.
 */
import type { ResourceRef } from '../kube/resources.ts';

/**
 * One object a removal may write. `unconditional`: why its writes may go without a
 * precondition (the server offers none, or the operator accepted the risk); absent, every
 * write of it must carry one.
 */
export type Touch = Readonly<{ object: string; unconditional?: string }>;

/** A Kubernetes object: `kube:GROUP/PLURAL/NAMESPACE/NAME` (no namespace for cluster-scoped ones). */
export function kubeObject(
  ref: Pick<ResourceRef, 'group' | 'plural' | 'namespaced'>,
  namespace: string | undefined,
  name: string,
): string {
  return `kube:${ref.group}/${ref.plural}/${ref.namespaced ? (namespace ?? '') : ''}/${name}`;
}

/** An OpenStack resource: `SERVICE:COLLECTION/ID`; ID `*`: any of the collection (each write still preconditioned). */
export function openStackObject(
  service: 'neutron' | 'octavia' | 'cinder',
  collection: string,
  id: string,
): string {
  return `${service}:${collection}/${id}`;
}
