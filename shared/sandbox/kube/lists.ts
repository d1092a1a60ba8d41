/**
 * The fake API server's lists, as the real one pages them: consistent pages from one
 * snapshot of the store per list, continue tokens that stay usable until they expire (410
 * after), resourceVersion and resourceVersionMatch checked as the real server checks them,
 * metadata-only lists, and equality-based label and field selectors.
 */
import { randomUUID } from 'node:crypto';
import type { KubeObject, ResourceRef } from '../../kube/resources.ts';
import type { Fault } from './faults.ts';
import { FakeApiError, type FakeStore, type StoredObject } from './store.ts';

type Continuation = { items: StoredObject[]; rv: string; createdAt: number };

export class FakeLists {
  private readonly continuations = new Map<string, Continuation>();
  private readonly store: FakeStore;
  private readonly now: () => number;
  private readonly ttlMs: number;

  constructor(store: FakeStore, now: () => number, ttlMs = 300_000) {
    this.store = store;
    this.now = now;
    this.ttlMs = ttlMs;
  }

  /** One page of a list (GET of a collection). */
  list(
    ref: ResourceRef,
    ns: string | undefined,
    q: URLSearchParams,
    accept: string,
    fault: Fault | undefined,
  ): unknown {
    const limit = Number(q.get('limit') ?? '0');
    const cont = q.get('continue');
    this.checkVersion(q, Boolean(cont));
    let entry: Continuation;
    let offset = 0;
    let token: string | undefined;
    if (cont) {
      const decoded = decodeToken(cont);
      const c = decoded ? this.continuations.get(decoded.id) : undefined;
      if (!decoded || !c) throw new FakeApiError(400, 'BadRequest', 'continue key is not valid');
      const ttl = this.ttlMs;
      if (fault?.expireContinue || this.now() - c.createdAt > ttl) {
        throw new FakeApiError(
          410,
          'Expired',
          'The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.',
        );
      }
      entry = c;
      offset = decoded.offset;
      token = decoded.id;
    } else {
      const items = this.store.list(ref, ns).filter(selector(q.get('labelSelector'), q.get('fieldSelector')));
      entry = { items, rv: this.store.resourceVersion, createdAt: this.now() };
    }
    const end = limit > 0 ? Math.min(offset + limit, entry.items.length) : entry.items.length;
    let pageItems = entry.items.slice(offset, end);
    let next: string | undefined;
    if (end < entry.items.length) {
      if (!token) {
        token = randomUUID();
        this.continuations.set(token, entry);
      }
      next = encodeToken(token, end);
    }
    // Like the real server's, tokens stay usable (a retried page works) until they expire.
    this.dropExpired();
    if (fault?.emptyPage && next !== undefined) {
      pageItems = [];
      next = encodeToken(token!, offset);
    }
    return render(ref, accept, entry, end, pageItems, next);
  }

  /**
   * resourceVersion on a list, as the real server checks it: a match needs a version, a
   * continue token carries its own, and NotOlderThan a version this store has not reached
   * times out (the real server waits up to 3 s for its cache, then answers 504). As the
   * real server answers misuse: a match without a version is 422 Invalid (its ListOptions
   * validation), a version with a continue token 400 BadRequest.
   */
  private checkVersion(q: URLSearchParams, cont: boolean): void {
    const rv = q.get('resourceVersion') ?? '';
    const match = q.get('resourceVersionMatch');
    if (match && !rv)
      throw new FakeApiError(
        422,
        'Invalid',
        'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided',
      );
    if (cont && rv && rv !== '0')
      throw new FakeApiError(
        400,
        'BadRequest',
        'specifying resource version is not allowed when using continue',
      );
    if (
      match === 'NotOlderThan' &&
      /^[1-9][0-9]*$/.test(rv) &&
      BigInt(rv) > BigInt(this.store.resourceVersion)
    )
      throw new FakeApiError(
        504,
        'Timeout',
        `Too large resource version: ${rv}, current: ${this.store.resourceVersion}`,
      );
  }

  private dropExpired(): void {
    const ttl = this.ttlMs;
    const now = this.now();
    for (const [id, c] of this.continuations) if (now - c.createdAt > ttl) this.continuations.delete(id);
  }
}

/** The list's body: its kind, apiVersion, resourceVersion, continue token and items (metadata only when asked). */
function render(
  ref: ResourceRef,
  accept: string,
  entry: Continuation,
  end: number,
  pageItems: StoredObject[],
  next: string | undefined,
): unknown {
  const metadataOnly = accept.includes('as=PartialObjectMetadataList');
  const listKind = metadataOnly ? 'PartialObjectMetadataList' : `${ref.kind}List`;
  const apiVersion = metadataOnly
    ? 'meta.k8s.io/v1'
    : ref.group === ''
      ? ref.version
      : `${ref.group}/${ref.version}`;
  const metadata: Record<string, unknown> = { resourceVersion: entry.rv };
  if (next !== undefined) {
    metadata.continue = next;
    metadata.remainingItemCount = entry.items.length - end;
  }
  return {
    kind: listKind,
    apiVersion,
    metadata,
    // Like the real server: an empty metadata-only list has `items: null`.
    items: metadataOnly
      ? pageItems.length === 0
        ? null
        : pageItems.map((o) => ({
            kind: 'PartialObjectMetadata',
            apiVersion: 'meta.k8s.io/v1',
            metadata: o.metadata,
          }))
      : pageItems.map((o) => {
          const { apiVersion: _a, kind: _k, ...rest } = o as KubeObject;
          return rest;
        }),
  };
}

function encodeToken(id: string, offset: number): string {
  return Buffer.from(JSON.stringify({ id, offset })).toString('base64url');
}

function decodeToken(t: string): { id: string; offset: number } | undefined {
  try {
    const v = JSON.parse(Buffer.from(t, 'base64url').toString()) as { id?: unknown; offset?: unknown };
    return typeof v.id === 'string' && typeof v.offset === 'number'
      ? { id: v.id, offset: v.offset }
      : undefined;
  } catch {
    return undefined;
  }
}

/** Equality-based label selectors (`a=b`, `a!=b`, `a`, `!a`) and metadata field selectors. */
export function selector(labels: string | null, fields: string | null): (o: StoredObject) => boolean {
  const tests: ((o: StoredObject) => boolean)[] = [];
  for (const term of (labels ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)) {
    const m = /^(!?)([^=!]+?)(?:\s*(==|=|!=)\s*(.*))?$/.exec(term);
    if (!m) throw new FakeApiError(400, 'BadRequest', `unable to parse requirement: ${term}`);
    const [, not, key, op, value] = m;
    tests.push((o) => {
      const v = o.metadata.labels?.[key!];
      if (op === undefined) return not ? v === undefined : v !== undefined;
      return op === '!=' ? v !== value : v === value;
    });
  }
  for (const term of (fields ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)) {
    const m = /^([^=!]+?)\s*(==|=|!=)\s*(.*)$/.exec(term);
    if (!m) throw new FakeApiError(400, 'BadRequest', `invalid field selector: ${term}`);
    const [, path, op, value] = m;
    tests.push((o) => {
      let v: unknown = o;
      for (const part of path!.split('.'))
        v = v && typeof v === 'object' ? (v as Record<string, unknown>)[part] : undefined;
      const s = v === undefined ? '' : String(v);
      return op === '!=' ? s !== value : s === value;
    });
  }
  return (o) => tests.every((t) => t(o));
}
