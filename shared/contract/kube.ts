/** Removal helpers every Kubernetes-backed kind shares. */

import { issuesText } from '../errors.ts';
import { ConflictError } from '../kube/errors.ts';
import type { KubeReadWriter, NewObject } from '../kube/ports.ts';
import type { KubeObject, ResourceRef } from '../kube/resources.ts';
import type { RemoveResult, RestoreResult } from './run.ts';
import { kubeObjectPayload } from './tombstone.ts';

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
    // the answer named its UID: no read-back ('accepted': the caller reads it back)
    ...(out === 'deleted' ? { shownGone: true } : {}),
  };
}

/** What the API server gives an object: dropped from a tombstone's object before it is created again. */
const SERVER_FIELDS = [
  'uid',
  'resourceVersion',
  'creationTimestamp',
  'deletionTimestamp',
  'deletionGracePeriodSeconds',
  'generation',
  'managedFields',
  'selfLink',
] as const;

/** A tombstone's object as it can be created again: no identity the server gave it, no status. */
export function asNew(o: KubeObject): NewObject {
  const metadata: Record<string, unknown> = { ...o.metadata };
  for (const k of SERVER_FIELDS) delete metadata[k];
  const { status: _status, ...rest } = o as KubeObject & { status?: unknown };
  return { ...rest, metadata };
}

/**
 * Creates a tombstone's Kubernetes object again, as it was (without uid, resourceVersion
 * and status), unless an object of its name exists now: then it is refused and says which.
 * `apply: false` checks only.
 */
export async function recreateAsWas(
  kube: KubeReadWriter,
  ref: ResourceRef,
  object: unknown,
  ctx: Readonly<{ apply: boolean; signal: AbortSignal }>,
): Promise<RestoreResult> {
  const parsed = kubeObjectPayload.safeParse(object);
  if (!parsed.success)
    return {
      outcome: 'refused',
      reason: `the tombstone holds no ${ref.kind} to create: ${issuesText(parsed.error, { first: true })}`,
    };
  const o = parsed.data as KubeObject;
  const where = `${o.metadata.namespace ? `${o.metadata.namespace}/` : ''}${o.metadata.name}`;
  const now = await kube.get(ref, o.metadata.namespace, o.metadata.name, ctx.signal);
  if (now)
    return {
      outcome: 'refused',
      reason: `${ref.kind} ${where} exists now (uid ${now.metadata.uid}${now.metadata.uid === o.metadata.uid ? ', the same object' : ''})`,
    };
  if (!ctx.apply) return { outcome: 'ready', detail: `${ref.kind} ${where} would be created as it was` };
  try {
    const made = await kube.create(ref, asNew(o), ctx.signal);
    return {
      outcome: 'restored',
      detail: `${ref.kind} ${where} created as it was (new uid ${made.metadata.uid})`,
      ids: { uid: made.metadata.uid },
    };
  } catch (err) {
    if (err instanceof ConflictError)
      return { outcome: 'refused', reason: `${ref.kind} ${where} was created by someone else meanwhile` };
    throw err;
  }
}
