import { ConfigError, ListIncompleteError } from '../errors.ts';
import { ConnectionError, HttpTransport } from '../http/transport.ts';
import { answerOf, answerShowsGone, written } from './answer.ts';
import { ConflictError, KubeApiError } from './errors.ts';
import { type HistoryResult, historyQuery, reached, replayed } from './history.ts';
import type { KubeCall as Call, KubeClientOptions } from './options.ts';
import type {
  DeleteOutcome,
  JsonPatchOp,
  KubeClient,
  ListOptions,
  ListResult,
  NewObject,
  Preconditions,
} from './ports.ts';
import {
  checkDiscovery,
  checkObject,
  compareResourceVersions,
  ListProof,
  notKubernetesLike,
  ProofError,
} from './proof.ts';
import {
  collectionPath,
  describe,
  type KubeObject,
  lastWriteMs,
  objectPath,
  type ResourceRef,
} from './resources.ts';

const METADATA_ACCEPT = 'application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json';

export { kubeOptionsFromConfig, whereNoKubeconfig } from './kubeconfig.ts';
export type { KubeClientOptions } from './options.ts';

/** Lists read again with a larger page when their last page is exactly full (decision 0007). */
const AMBIGUOUS_RELISTS = 2;

export { compareResourceVersions } from './proof.ts';

export class KubeHttpClient implements KubeClient {
  readonly server: string;
  private readonly http: HttpTransport;
  private readonly opts: KubeClientOptions;
  private readonly discovery = new Map<string, Promise<Set<string> | undefined>>();
  private core: Promise<void> | undefined;

  /**
   * Proof that the server is a Kubernetes API server: it serves the core API (`/api/v1`) as
   * Kubernetes discovery. Asked when a group answers 404 or with something that is not
   * discovery, so that a server that is not Kubernetes is said to be so, not "is DANM installed?".
   */
  private kubernetes(signal?: AbortSignal): Promise<void> {
    this.core ??= this.serves('', 'v1', 'pods', signal).then(
      (pods) => {
        if (!pods)
          throw new ConfigError(
            `${this.server} answers 404 to the core API (/api/v1): it is not a Kubernetes API server (check the kubeconfig's server)`,
          );
      },
      (err) => {
        this.core = undefined;
        if (err instanceof KubeApiError && err.reason === 'BadBody')
          throw new ConfigError(
            /not a Kubernetes API server/.test(err.message)
              ? `${this.server}: ${err.message}`
              : `${this.server} answers the core API (/api/v1) with something that is not Kubernetes discovery (${err.message}): it is not a Kubernetes API server (check the kubeconfig's server)`,
            { cause: err },
          );
        throw err;
      },
    );
    return this.core;
  }
  /**
   * The newest resourceVersion of a list this client has read. A run reads its lists in
   * order (targets, then evidence, then the act phase's re-check lists), each a consistent
   * read (no resourceVersion: the newest the server has); an answer older than this is
   * stale and refused (decision 0007).
   */
  private floor: { rv: string; what: string } | undefined;

  constructor(opts: KubeClientOptions) {
    this.opts = opts;
    this.server = opts.server.replace(/\/+$/, '');
    this.http = new HttpTransport({
      api: 'kubernetes',
      time: opts.time,
      timeoutMs: opts.callTimeoutMs ?? 30_000,
      ...(opts.readAttempts !== undefined ? { readAttempts: opts.readAttempts } : {}),
      connections: opts.connections ?? 8,
      ...(opts.tls ? { tls: opts.tls } : {}),
      ...(opts.onResponse ? { onResponse: opts.onResponse } : {}),
      gzip: opts.gzip ?? true,
    });
  }

  async close(): Promise<void> {
    await this.http.close();
  }

  // ---- reads ----

  async listAll<T = KubeObject>(ref: ResourceRef, options: ListOptions<T> = {}): Promise<ListResult<T>> {
    const what = `list ${describe(ref, options.namespace)}`;
    const size = options.pageSize ?? this.opts.pageSize ?? 500;
    // A last page of exactly `limit` items, with no count announced before it, looks the
    // same as a page whose continue token was lost: such a list is read again with a
    // larger page, whose last page then tells (decision 0007).
    for (let widen = 0; widen <= AMBIGUOUS_RELISTS; widen++) {
      const r = await this.listOnce(ref, options, what, size + widen);
      if (!r.ambiguous) {
        this.raiseFloor(r.list.resourceVersion, what);
        return r.list;
      }
    }
    throw new ListIncompleteError(
      what,
      `its last page held exactly the page size and no count was announced, ${AMBIGUOUS_RELISTS + 1} times (page sizes ${size} to ${size + AMBIGUOUS_RELISTS}): it cannot be told from a list cut short`,
    );
  }

  private raiseFloor(rv: string, what: string): void {
    if (!this.opts.freshLists) return;
    if (!this.floor || (compareResourceVersions(rv, this.floor.rv) ?? 0) > 0) this.floor = { rv, what };
  }

  private async listOnce<T>(
    ref: ResourceRef,
    options: ListOptions<T>,
    what: string,
    size: number,
  ): Promise<{ list: ListResult<T>; ambiguous: boolean }> {
    const view = options.view ?? ((o: KubeObject) => o as unknown as T);
    const limit = String(size);
    const maxRestarts = this.opts.maxListRestarts ?? 3;
    const floor = this.opts.freshLists ? this.floor : undefined;
    for (let restarts = 0; ; restarts++) {
      const items: T[] = [];
      const proof = new ListProof(ref, options.metadataOnly === true);
      let cont: string | undefined;
      try {
        do {
          const body = await this.call<unknown>({
            method: 'GET',
            path: collectionPath(ref, options.namespace),
            query: {
              limit,
              continue: cont,
              labelSelector: options.labelSelector,
              fieldSelector: options.fieldSelector,
            },
            accept: options.metadataOnly ? METADATA_ACCEPT : 'application/json',
            signal: options.signal,
            what: `${what} page ${proof.pages + 1}`,
          });
          const page = proof.page(body, cont);
          for (const item of page.items) {
            // Often the largest part of an object's metadata; read only for the last write's time.
            const md = item.metadata as { managedFields?: unknown };
            const last = options.lastWriteTime ? lastWriteMs(md.managedFields) : undefined;
            if (last !== undefined) md.managedFields = [{ time: new Date(last).toISOString() }];
            else delete md.managedFields;
            items.push(view(item));
          }
          this.opts.onPage?.({ what, pages: proof.pages, items: items.length });
          cont = page.next;
        } while (cont !== undefined);
        const resourceVersion = proof.finish();
        if (floor && (compareResourceVersions(resourceVersion, floor.rv) ?? 0) < 0)
          throw new ListIncompleteError(
            what,
            `stale: its resourceVersion ${resourceVersion} is older than ${floor.rv}, which this run read before it (${floor.what}): a consistent list never answers older than one read before it`,
          );
        return {
          list: { items, resourceVersion, pages: proof.pages, restarts },
          ambiguous: proof.lastPageFull(size),
        };
      } catch (err) {
        // 410 Expired on a continue token: restart the whole list, never splice.
        if (err instanceof KubeApiError && err.status === 410 && cont !== undefined && restarts < maxRestarts)
          continue;
        if (err instanceof ListIncompleteError) throw err;
        // a first page that is not a list (a 404, an HTML page, another kind): is the server
        // Kubernetes at all? That is the error the operator needs, and it never heals.
        if (cont === undefined && notKubernetesLike(err)) await this.kubernetes(options.signal);
        throw new ListIncompleteError(what, (err as Error).message, { cause: err });
      }
    }
  }

  /**
   * The object, or undefined when the server says NotFound (a 404 with a Status body of
   * reason NotFound). Any other answer that is not the object asked for is an error.
   */
  async get(
    ref: ResourceRef,
    namespace: string | undefined,
    name: string,
    signal?: AbortSignal,
  ): Promise<KubeObject | undefined> {
    const what = `get ${describe(ref, namespace, name)}`;
    let body: unknown;
    try {
      body = await this.call<unknown>({
        method: 'GET',
        path: objectPath(ref, namespace, name),
        signal,
        what,
      });
    } catch (err) {
      if (err instanceof KubeApiError && err.notFound) return undefined;
      throw err;
    }
    try {
      return checkObject(body, ref, namespace, name);
    } catch (err) {
      if (!(err instanceof ProofError)) throw err;
      throw new KubeApiError(what, 0, 'BadBody', err.message, { cause: err });
    }
  }

  async history<T>(
    ref: ResourceRef,
    namespace: string | undefined,
    name: string,
    span: Readonly<{ from: string; until: string }>,
    view: (o: KubeObject) => T,
    signal?: AbortSignal,
  ): Promise<HistoryResult<T>> {
    if (span.from === span.until) return { states: [] };
    const what = `history of ${describe(ref, namespace, name)}`;
    const [path, query, enough] = [
      collectionPath(ref, namespace),
      historyQuery(name, span.from),
      reached(span.until),
    ];
    const res = await this.send({ method: 'GET', path, query, signal, what, enough });
    if (res.status === 410) return { broken: 'the server no longer has that history (410)' };
    if (res.status < 200 || res.status >= 300) answerOf(what, res.status, res.text);
    return replayed(res.text, span.until, view);
  }

  serves(group: string, version: string, plural: string, signal?: AbortSignal): Promise<boolean> {
    const gv = group === '' ? version : `${group}/${version}`;
    let p = this.discovery.get(gv);
    if (!p) {
      const what = `discover ${gv}`;
      p = this.call<unknown>({
        method: 'GET',
        path: group === '' ? `/api/${version}` : `/apis/${group}/${version}`,
        signal,
        what,
      }).then(
        async (doc) => {
          try {
            return checkDiscovery(doc, gv);
          } catch (err) {
            this.discovery.delete(gv);
            // A group answered with something that is not discovery: first ask whether the
            // server is Kubernetes at all (that is the error the operator needs).
            if (group !== '') await this.kubernetes(signal);
            throw new KubeApiError(what, 0, 'BadBody', (err as Error).message, { cause: err });
          }
        },
        (err) => {
          // The real server answers a group/version it does not serve with a plain-text 404;
          // a server that answers 404 to its core API too is not a Kubernetes API server.
          if (err instanceof KubeApiError && err.status === 404)
            return (group === '' ? Promise.resolve() : this.kubernetes(signal)).then(() => undefined);
          this.discovery.delete(gv);
          // an answer that is not JSON (an HTML page): is the server Kubernetes at all?
          if (err instanceof KubeApiError && err.reason === 'BadBody' && group !== '')
            return this.kubernetes(signal).then(() => {
              throw err;
            });
          throw err;
        },
      );
      this.discovery.set(gv, p);
    }
    return p.then((set) => set?.has(plural) ?? false);
  }

  // ---- writes (never retried here: the run loop re-checks before trying again) ----

  async create(ref: ResourceRef, obj: NewObject, signal?: AbortSignal): Promise<KubeObject> {
    const ns = obj.metadata.namespace as string | undefined;
    const name = typeof obj.metadata.name === 'string' ? obj.metadata.name : undefined;
    const what = `create ${describe(ref, ns, String(obj.metadata.name ?? obj.metadata.generateName ?? ''))}`;
    const body = await this.call<unknown>({
      method: 'POST',
      path: collectionPath(ref, ns),
      body: obj,
      signal,
      what,
    });
    return written(what, body, ref, ns, name);
  }

  async replace(ref: ResourceRef, obj: KubeObject, signal?: AbortSignal): Promise<KubeObject> {
    const { name, namespace } = obj.metadata;
    const what = `update ${describe(ref, namespace, name)}`;
    const body = await this.call<unknown>({
      method: 'PUT',
      path: objectPath(ref, namespace, name),
      body: obj,
      signal,
      what,
    });
    return written(what, body, ref, namespace, name);
  }

  jsonPatch(
    ref: ResourceRef,
    namespace: string | undefined,
    name: string,
    ops: readonly JsonPatchOp[],
    signal?: AbortSignal,
  ): Promise<KubeObject> {
    return this.patch('json-patch', ref, namespace, name, ops, signal);
  }

  mergePatch(
    ref: ResourceRef,
    namespace: string | undefined,
    name: string,
    patch: unknown,
    signal?: AbortSignal,
  ): Promise<KubeObject> {
    return this.patch('merge-patch', ref, namespace, name, patch, signal);
  }

  private async patch(
    type: 'json-patch' | 'merge-patch',
    ref: ResourceRef,
    namespace: string | undefined,
    name: string,
    body: unknown,
    signal: AbortSignal | undefined,
  ): Promise<KubeObject> {
    const what = `${type} ${describe(ref, namespace, name)}`;
    const answer = await this.call<unknown>({
      method: 'PATCH',
      path: objectPath(ref, namespace, name),
      body,
      contentType: `application/${type}+json`,
      signal,
      what,
    });
    return written(what, answer, ref, namespace, name);
  }

  async deleteWithPreconditions(
    ref: ResourceRef,
    namespace: string | undefined,
    name: string,
    pre: Preconditions,
    signal?: AbortSignal,
  ): Promise<DeleteOutcome> {
    return this.doDelete(
      ref,
      namespace,
      name,
      {
        kind: 'DeleteOptions',
        apiVersion: 'v1',
        preconditions: { uid: pre.uid, resourceVersion: pre.resourceVersion },
      },
      signal,
      pre.uid,
    );
  }

  delete(
    ref: ResourceRef,
    namespace: string | undefined,
    name: string,
    signal?: AbortSignal,
    options?: Readonly<{ gracePeriodSeconds?: number }>,
  ): Promise<DeleteOutcome> {
    const body =
      options?.gracePeriodSeconds !== undefined
        ? { kind: 'DeleteOptions', apiVersion: 'v1', gracePeriodSeconds: options.gracePeriodSeconds }
        : undefined;
    return this.doDelete(ref, namespace, name, body, signal);
  }

  async replaceStatus(ref: ResourceRef, obj: KubeObject, signal?: AbortSignal): Promise<KubeObject> {
    const { name, namespace } = obj.metadata;
    const what = `update status of ${describe(ref, namespace, name)}`;
    const body = await this.call<unknown>({
      method: 'PUT',
      path: `${objectPath(ref, namespace, name)}/status`,
      body: obj,
      signal,
      what,
    });
    return written(what, body, ref, namespace, name);
  }

  private async doDelete(
    ref: ResourceRef,
    namespace: string | undefined,
    name: string,
    body: unknown,
    signal?: AbortSignal,
    uid?: string,
  ): Promise<DeleteOutcome> {
    try {
      const answer = await this.call<unknown>({
        method: 'DELETE',
        path: objectPath(ref, namespace, name),
        body,
        signal,
        what: `delete ${describe(ref, namespace, name)}`,
      });
      return uid === undefined || answerShowsGone(answer, uid) ? 'deleted' : 'accepted';
    } catch (err) {
      if (err instanceof KubeApiError && err.notFound) return 'gone';
      if (err instanceof ConflictError) return 'conflict';
      throw err;
    }
  }

  // ---- transport ----

  private async call<T>(c: Call): Promise<T> {
    const res = await this.send(c);
    return answerOf<T>(c.what, res.status, res.text);
  }

  private async send(c: Call): Promise<{ status: number; text: string }> {
    const url = new URL(this.server + c.path);
    if (c.query)
      for (const [k, v] of Object.entries(c.query))
        if (v !== undefined && v !== '') url.searchParams.set(k, v);
    const headers: Record<string, string> = {
      // As client-go does: the apiserver's audit log and metrics can tell twopass's requests apart.
      'user-agent': this.opts.userAgent ?? 'twopass',
      ...(this.opts.headers ?? {}),
      accept: c.accept ?? 'application/json',
    };
    const body = c.body === undefined ? undefined : JSON.stringify(c.body);
    if (body !== undefined) headers['content-type'] = c.contentType ?? 'application/json';
    try {
      const { what: call, method, signal, enough } = c;
      return await this.http.send({ call, method, url, headers, body, signal, enough });
    } catch (err) {
      if (!(err instanceof ConnectionError)) throw err;
      throw new KubeApiError(c.what, 0, 'ConnectionError', err.detail, {
        cause: err,
      });
    }
  }
}
