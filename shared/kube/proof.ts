/**
 * What proves an answer of the API server (law 1): a list is complete only when every
 * page is a well-formed list of the kind asked for, all pages share one
 * resourceVersion, no object comes twice, the continue tokens move on, and the
 * `remainingItemCount` the server sent on each page agrees with what finally arrived.
 * A GET is the object asked for, or an error; only a 404 NotFound means absent.
 * Every check throws a message that says what was wrong; callers wrap it.
 */
import { KubeApiError } from './errors.ts';
import type { KubeObject, ResourceRef } from './resources.ts';
import { SeenUids } from './seen.ts';

export const METADATA_LIST = { kind: 'PartialObjectMetadataList', apiVersion: 'meta.k8s.io/v1' } as const;

export function groupVersion(ref: ResourceRef): string {
  return ref.group === '' ? ref.version : `${ref.group}/${ref.version}`;
}

export class ProofError extends Error {
  override name = 'ProofError';
}

type Page = {
  kind?: unknown;
  apiVersion?: unknown;
  metadata?: { continue?: unknown; resourceVersion?: unknown; remainingItemCount?: unknown };
  items?: unknown;
};

/** Accumulates the pages of one list and proves it complete. */
export class ListProof {
  private readonly kind: string;
  private readonly apiVersion: string;
  private rv: string | undefined;
  private readonly uids = new SeenUids();
  private readonly claims: { page: number; received: number; remaining: number }[] = [];
  private received = 0;
  private lastItems = 0;
  pages = 0;

  constructor(ref: ResourceRef, metadataOnly: boolean) {
    this.kind = metadataOnly ? METADATA_LIST.kind : `${ref.kind}List`;
    this.apiVersion = metadataOnly ? METADATA_LIST.apiVersion : groupVersion(ref);
  }

  /** Checks one page; returns its items and the continue token to send next (undefined: the last page). */
  page(body: unknown, sentContinue: string | undefined): { items: KubeObject[]; next: string | undefined } {
    const n = ++this.pages;
    const fail = (why: string): never => {
      throw new ProofError(`page ${n} ${why}`);
    };
    if (body === undefined || body === null) fail('is empty');
    if (typeof body !== 'object' || Array.isArray(body)) fail('is not a list');
    const p = body as Page;
    if (p.kind !== this.kind || p.apiVersion !== this.apiVersion)
      fail(
        `is a ${String(p.apiVersion ?? '?')} ${String(p.kind ?? '?')}, not the ${this.apiVersion} ${this.kind} asked for`,
      );
    if (!p.metadata || typeof p.metadata !== 'object') fail('has no list metadata');
    // An empty PartialObjectMetadataList comes back with `items: null` from the real server.
    if (!(Array.isArray(p.items) || p.items === null)) fail('has no items array');
    const md = p.metadata!;
    const rv = md.resourceVersion;
    if (typeof rv !== 'string' || rv === '') fail('has no resourceVersion');
    if (this.rv !== undefined && rv !== this.rv)
      fail(`has resourceVersion ${String(rv)}, the list began at ${this.rv}`);
    this.rv = rv as string;
    const items = (p.items ?? []) as unknown[];
    for (const [i, it] of items.entries()) {
      const m = (it as KubeObject | null)?.metadata;
      if (!it || typeof it !== 'object' || !m || typeof m !== 'object')
        fail(`item ${i + 1} is not an object with metadata`);
      const uid = m!.uid;
      if (typeof uid !== 'string' || uid === '') continue; // a malformed object: the function reports it
      if (!this.uids.add(uid)) fail(`repeats ${String(m!.name)} (UID ${uid}): the pages overlap`);
    }
    this.received += items.length;
    this.lastItems = items.length;
    const next = typeof md.continue === 'string' && md.continue !== '' ? md.continue : undefined;
    if (md.continue !== undefined && md.continue !== null && typeof md.continue !== 'string')
      fail('has a continue token that is not a string');
    if (next !== undefined && next === sentContinue) fail('hands back the continue token it was sent');
    if (next !== undefined && items.length === 0) fail('is empty but says more follows');
    const remaining = md.remainingItemCount;
    if (remaining !== undefined && remaining !== null) {
      if (typeof remaining !== 'number' || !Number.isInteger(remaining) || remaining < 0)
        fail(`has a remainingItemCount that is not a count: ${JSON.stringify(remaining)}`);
      if (next === undefined && remaining !== 0)
        fail(`is the last page, but ${remaining} more items were announced`);
      this.claims.push({ page: n, received: this.received, remaining: remaining as number });
    }
    return { items: items as KubeObject[], next };
  }

  /**
   * True when nothing but the missing continue token says the list ended: its last page
   * held exactly `limit` items and no page announced how many remained. A page whose
   * token was lost looks the same.
   */
  lastPageFull(limit: number): boolean {
    return this.lastItems === limit && this.claims.length === 0;
  }

  /** After the last page: the counts the server announced agree with what arrived. */
  finish(): string {
    for (const c of this.claims)
      if (c.received + c.remaining !== this.received)
        throw new ProofError(
          `page ${c.page} announced ${c.remaining} more items after ${c.received}, but the list ended with ${this.received}`,
        );
    if (this.rv === undefined) throw new ProofError('no page arrived');
    return this.rv;
  }
}

/** What an answer of another kind is, in words: a Status in a success answer says its code and message. */
function otherKind(o: KubeObject, ref: ResourceRef): string {
  const st = o as KubeObject & { code?: unknown; reason?: unknown; message?: unknown };
  if (o.kind === 'Status')
    return `the server answered success with a Status (${String(st.code ?? '?')} ${String(st.reason ?? '')}: ${String(st.message ?? '')}), not a ${groupVersion(ref)} ${ref.kind}: is the kubeconfig's server a Kubernetes API server, or a proxy in front of one?`;
  if (o.kind === undefined && o.apiVersion === undefined)
    return `the answer has no kind and no apiVersion, not a ${groupVersion(ref)} ${ref.kind}: is the kubeconfig's server a Kubernetes API server?`;
  return `the answer is a ${String(o.apiVersion ?? '?')} ${String(o.kind ?? '?')}, not a ${groupVersion(ref)} ${ref.kind}`;
}

/** An answer of the kind asked for (an unnamed create: generateName, or a review that is never stored). */
export function checkKind(body: unknown, ref: ResourceRef): KubeObject {
  if (body === undefined || body === null || typeof body !== 'object' || Array.isArray(body))
    throw new ProofError('the answer is not an object');
  const o = body as KubeObject;
  if (o.kind !== ref.kind || o.apiVersion !== groupVersion(ref)) throw new ProofError(otherKind(o, ref));
  return o;
}

/** A 200 answer to a GET: the object asked for, of the kind asked for. */
export function checkObject(
  body: unknown,
  ref: ResourceRef,
  namespace: string | undefined,
  name: string,
): KubeObject {
  const fail = (why: string): never => {
    throw new ProofError(why);
  };
  if (body === undefined || body === null || typeof body !== 'object' || Array.isArray(body))
    fail('the answer is not an object');
  const o = body as KubeObject;
  if (o.kind !== ref.kind || o.apiVersion !== groupVersion(ref)) fail(otherKind(o, ref));
  const md = o.metadata;
  if (!md || typeof md !== 'object') fail('the answer has no metadata');
  if (md.name !== name) fail(`the answer is ${String(md.name)}, not ${name}`);
  if (ref.namespaced && md.namespace !== namespace)
    fail(`the answer is in namespace ${String(md.namespace)}, not ${String(namespace)}`);
  if (typeof md.uid !== 'string' || md.uid === '') fail('the answer has no UID');
  if (typeof md.resourceVersion !== 'string' || md.resourceVersion === '')
    fail('the answer has no resourceVersion');
  return o;
}

/** A discovery document (APIResourceList) for group/version. */
export function checkDiscovery(body: unknown, gv: string): Set<string> {
  const d = body as { kind?: unknown; groupVersion?: unknown; resources?: unknown } | null | undefined;
  if (!d || typeof d !== 'object' || Array.isArray(d)) throw new ProofError('the answer is not an object');
  if (d.kind !== 'APIResourceList')
    throw new ProofError(
      d.kind === undefined
        ? 'the answer has no kind, not an APIResourceList'
        : `the answer is a ${String(d.kind)}, not an APIResourceList`,
    );
  if (d.groupVersion !== gv) throw new ProofError(`the answer is for ${String(d.groupVersion)}, not ${gv}`);
  if (!Array.isArray(d.resources)) throw new ProofError('the answer has no resources array');
  const out = new Set<string>();
  for (const r of d.resources as { name?: unknown }[]) if (r && typeof r.name === 'string') out.add(r.name);
  return out;
}

/** Whether an error answer is the server's own NotFound Status (the only proof of absence). */
export function isNotFoundStatus(status: number, body: unknown): boolean {
  if (status !== 404) return false;
  const s = body as { kind?: unknown; reason?: unknown } | null | undefined;
  return !!s && typeof s === 'object' && s.kind === 'Status' && s.reason === 'NotFound';
}

/**
 * Orders two resourceVersions as KEP-5504 allows (positive integers without leading zeros:
 * `k8s.io/apimachinery/pkg/util/resourceversion.CompareResourceVersion`); undefined when
 * either is not of that form, and so not comparable by a client.
 */
export function compareResourceVersions(a: string, b: string): number | undefined {
  const ok = (s: string) => /^[1-9][0-9]*$/.test(s);
  if (!ok(a) || !ok(b)) return undefined;
  if (a.length !== b.length) return a.length - b.length;
  return a < b ? -1 : a > b ? 1 : 0;
}

/** An answer that could come from a server that is not Kubernetes: a 404, a body that is not the kind asked for. */
export function notKubernetesLike(err: unknown): boolean {
  if (err instanceof ProofError) return true;
  return err instanceof KubeApiError && (err.status === 404 || err.reason === 'BadBody');
}
