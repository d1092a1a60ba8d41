/**
 * What the API server answered, as a value or an error: a success is JSON (an HTML page
 * means the server is not Kubernetes), an error is its Status's reason and message (409 a
 * ConflictError, a NotFound Status marked as such), and a write's answer is the object written.
 */
import { ConflictError, KubeApiError } from './errors.ts';
import { checkKind, checkObject, isNotFoundStatus } from './proof.ts';
import type { KubeObject, ResourceRef } from './resources.ts';

/** The body of an answer with this status, or the error it stands for. */
export function answerOf<T>(what: string, status: number, text: string): T {
  if (status >= 200 && status < 300) {
    if (text === '') return undefined as T;
    try {
      return JSON.parse(text) as T;
    } catch (err) {
      throw new KubeApiError(
        what,
        0,
        'BadBody',
        /^\s*</.test(text)
          ? `the answer is HTML, not JSON (${text.length} bytes): the kubeconfig's server is not a Kubernetes API server (a web page, a login portal, a proxy?)`
          : `response body is not JSON (${text.length} bytes; truncated?)`,
        {
          cause: err,
        },
      );
    }
  }
  let reason = 'Unknown';
  let message = text.slice(0, 300);
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
    const st = parsed as { reason?: string; message?: string };
    reason = st.reason ?? reason;
    message = st.message ?? message;
  } catch {
    /* not a Status body */
  }
  const Cls = status === 409 ? ConflictError : KubeApiError;
  const err = new Cls(what, status, reason, message);
  err.notFound = isNotFoundStatus(status, parsed);
  throw err;
}

/** A write's answer must be the object written; anything else is an error (the write may not have happened). */
export function written(
  what: string,
  body: unknown,
  ref: ResourceRef,
  namespace: string | undefined,
  name: string | undefined,
): KubeObject {
  try {
    if (name !== undefined) return checkObject(body, ref, namespace, name);
    // An unnamed create (generateName, or a review that is never stored): the kind asked for.
    return checkKind(body, ref);
  } catch (err) {
    throw new KubeApiError(what, 0, 'BadBody', `the server answered success, but ${(err as Error).message}`, {
      cause: err,
    });
  }
}

/**
 * True when a DELETE's answer shows the object of `uid` gone: the server's Status of Success
 * naming that UID (as it answers for most kinds), or the object of that UID as it was when
 * deleted (custom resources), with no deletionTimestamp (a deletion still waiting on
 * finalizers or a grace period) and no finalizer left.
 */
export function answerShowsGone(answer: unknown, uid: string): boolean {
  if (!answer || typeof answer !== 'object') return false;
  const a = answer as {
    kind?: unknown;
    status?: unknown;
    details?: { uid?: unknown };
    metadata?: { uid?: unknown; deletionTimestamp?: unknown; finalizers?: unknown };
  };
  if (a.kind === 'Status') return a.status === 'Success' && a.details?.uid === uid;
  const md = a.metadata;
  if (!md || md.uid !== uid) return false;
  const finalizers = Array.isArray(md.finalizers) ? md.finalizers.length : 0;
  return md.deletionTimestamp == null && finalizers === 0;
}
