/** Removal helpers every Kubernetes-backed kind shares. */
import type { KubeReadWriter } from '../kube/ports.ts';
import type { ResourceRef } from '../kube/resources.ts';
import type { RemoveResult } from './index.ts';

/** The object as the snapshot saw it: where it is, its UID and its resourceVersion. */
export type Observed = Readonly<{ namespace?: string | undefined; name: string; uid: string; rv: string }>;

/**
 * Deletes the object only if it is still the one observed (preconditions on UID and
 * resourceVersion): `deleted`, `gone` (someone else deleted it), or `skipped` when it
 * changed (409).
 */
export async function deleteAsObserved(
  kube: KubeReadWriter,
  ref: ResourceRef,
  o: Observed,
  what: string,
  signal: AbortSignal,
): Promise<RemoveResult> {
  const out = await kube.deleteWithPreconditions(
    ref,
    o.namespace,
    o.name,
    { uid: o.uid, resourceVersion: o.rv },
    signal,
  );
  if (out === 'conflict') return { outcome: 'skipped', reason: `precondition failed (409): ${what} changed` };
  if (out === 'gone') return { outcome: 'gone' };
  return {
    outcome: 'deleted',
    detail: `${what.replace(/^the /, '')} ${o.namespace ? `${o.namespace}/` : ''}${o.name} deleted`,
  };
}
