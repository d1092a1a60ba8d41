/**
 * KubeHttpClient: the Kubernetes adapter. Configuration and credentials come from
 * @kubernetes/client-node's KubeConfig; requests go over one shared keep-alive
 * undici Agent (client-node's generated APIs open a connection per request).
 */
import { KubeConfig } from '@kubernetes/client-node';
import { Agent, type Dispatcher, request } from 'undici';
import { ConflictError, KubeApiError, ListIncompleteError } from './errors.ts';
import type {
  DeleteOutcome,
  JsonPatchOp,
  KubeClient,
  ListOptions,
  ListResult,
  NewObject,
  Preconditions,
} from './ports.ts';
import { checkDiscovery, checkKind, checkObject, isNotFoundStatus, ListProof, ProofError } from './proof.ts';
import { collectionPath, describe, type KubeObject, objectPath, type ResourceRef } from './resources.ts';

const METADATA_ACCEPT = 'application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json';

export type KubeClientOptions = Readonly<{
  server: string;
  headers?: Readonly<Record<string, string>>;
  tls?: Readonly<{
    ca?: Buffer;
    cert?: Buffer;
    key?: Buffer;
    rejectUnauthorized?: boolean;
    servername?: string;
  }>;
  /** Per-call timeout. */
  callTimeoutMs?: number;
  /** Attempts for idempotent reads on 429/5xx/connection errors. */
  readAttempts?: number;
  /** Sleep used for backoff (injected so tests do not wait). */
  sleep?: (ms: number) => Promise<void>;
  pageSize?: number;
  /** Restarts of a list after 410 Expired. */
  maxListRestarts?: number;
  connections?: number;
  /** Counts requests and bytes, for benchmarks and tests. */
  onResponse?: (info: { method: string; path: string; status: number; bytes: number }) => void;
}>;

type Call = {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  path: string;
  query?: Record<string, string | undefined>;
  body?: unknown;
  contentType?: string;
  accept?: string;
  signal?: AbortSignal | undefined;
  what: string;
};

const defaultSleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Builds client options from a kubeconfig file, $KUBECONFIG, ~/.kube/config or the in-cluster account. */
export async function kubeOptionsFromConfig(
  kubeconfig?: string,
  context?: string,
): Promise<KubeClientOptions> {
  const kc = new KubeConfig();
  if (kubeconfig !== undefined) kc.loadFromFile(kubeconfig);
  else kc.loadFromDefault();
  if (context !== undefined) kc.setCurrentContext(context);
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error('kubeconfig has no current cluster');
  const opts: {
    headers?: Record<string, string>;
    ca?: Buffer;
    cert?: Buffer;
    key?: Buffer;
    rejectUnauthorized?: boolean;
    servername?: string;
  } = {};
  await kc.applyToHTTPSOptions(opts as never);
  const tls: { ca?: Buffer; cert?: Buffer; key?: Buffer; rejectUnauthorized?: boolean; servername?: string } =
    {};
  if (opts.ca) tls.ca = opts.ca;
  if (opts.cert) tls.cert = opts.cert;
  if (opts.key) tls.key = opts.key;
  if (opts.rejectUnauthorized !== undefined) tls.rejectUnauthorized = opts.rejectUnauthorized;
  if (opts.servername) tls.servername = opts.servername;
  return { server: cluster.server, headers: { ...(opts.headers ?? {}) }, tls };
}

export class KubeHttpClient implements KubeClient {
  readonly server: string;
  private readonly agent: Agent;
  private readonly opts: KubeClientOptions;
  private readonly sleep: (ms: number) => Promise<void>;
  private readonly discovery = new Map<string, Promise<Set<string> | undefined>>();

  constructor(opts: KubeClientOptions) {
    this.opts = opts;
    this.server = opts.server.replace(/\/+$/, '');
    this.sleep = opts.sleep ?? defaultSleep;
    const connect: Record<string, unknown> = {};
    if (opts.tls) Object.assign(connect, opts.tls);
    this.agent = new Agent({
      connect,
      connections: opts.connections ?? 8,
      keepAliveTimeout: 30_000,
      headersTimeout: opts.callTimeoutMs ?? 30_000,
      bodyTimeout: opts.callTimeoutMs ?? 30_000,
    });
  }

  async close(): Promise<void> {
    await this.agent.close();
  }

  // ---- reads ----

  async listAll(ref: ResourceRef, options: ListOptions = {}): Promise<ListResult> {
    const what = `list ${describe(ref, options.namespace)}`;
    const limit = String(options.pageSize ?? this.opts.pageSize ?? 500);
    const maxRestarts = this.opts.maxListRestarts ?? 3;
    for (let restarts = 0; ; restarts++) {
      const items: KubeObject[] = [];
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
          for (const item of page.items) items.push(item);
          cont = page.next;
        } while (cont !== undefined);
        const resourceVersion = proof.finish();
        return { items, resourceVersion, pages: proof.pages, restarts };
      } catch (err) {
        // 410 Expired on a continue token: restart the whole list, never splice.
        if (err instanceof KubeApiError && err.status === 410 && cont !== undefined && restarts < maxRestarts)
          continue;
        if (err instanceof ListIncompleteError) throw err;
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
        (doc) => {
          try {
            return checkDiscovery(doc, gv);
          } catch (err) {
            this.discovery.delete(gv);
            throw new KubeApiError(what, 0, 'BadBody', (err as Error).message, { cause: err });
          }
        },
        (err) => {
          // The real server answers a group/version it does not serve with a plain-text 404.
          if (err instanceof KubeApiError && err.status === 404) return undefined;
          this.discovery.delete(gv);
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

  async jsonPatch(
    ref: ResourceRef,
    namespace: string | undefined,
    name: string,
    ops: readonly JsonPatchOp[],
    signal?: AbortSignal,
  ): Promise<KubeObject> {
    const what = `json-patch ${describe(ref, namespace, name)}`;
    const body = await this.call<unknown>({
      method: 'PATCH',
      path: objectPath(ref, namespace, name),
      body: ops,
      contentType: 'application/json-patch+json',
      signal,
      what,
    });
    return written(what, body, ref, namespace, name);
  }

  async mergePatch(
    ref: ResourceRef,
    namespace: string | undefined,
    name: string,
    patch: unknown,
    signal?: AbortSignal,
  ): Promise<KubeObject> {
    const what = `merge-patch ${describe(ref, namespace, name)}`;
    const body = await this.call<unknown>({
      method: 'PATCH',
      path: objectPath(ref, namespace, name),
      body: patch,
      contentType: 'application/merge-patch+json',
      signal,
      what,
    });
    return written(what, body, ref, namespace, name);
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
    );
  }

  delete(
    ref: ResourceRef,
    namespace: string | undefined,
    name: string,
    signal?: AbortSignal,
  ): Promise<DeleteOutcome> {
    return this.doDelete(ref, namespace, name, undefined, signal);
  }

  private async doDelete(
    ref: ResourceRef,
    namespace: string | undefined,
    name: string,
    body: unknown,
    signal?: AbortSignal,
  ): Promise<DeleteOutcome> {
    try {
      await this.call({
        method: 'DELETE',
        path: objectPath(ref, namespace, name),
        body,
        signal,
        what: `delete ${describe(ref, namespace, name)}`,
      });
      return 'deleted';
    } catch (err) {
      if (err instanceof KubeApiError && err.notFound) return 'gone';
      if (err instanceof ConflictError) return 'conflict';
      throw err;
    }
  }

  // ---- transport ----

  private async call<T>(c: Call): Promise<T> {
    const attempts = c.method === 'GET' ? (this.opts.readAttempts ?? 4) : 1;
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.once<T>(c);
      } catch (err) {
        const retryAfter =
          err instanceof KubeApiError && err.retryable ? retryDelay(err, attempt) : undefined;
        if (retryAfter === undefined || attempt >= attempts || c.signal?.aborted) throw err;
        await this.sleep(retryAfter);
      }
    }
  }

  private async once<T>(c: Call): Promise<T> {
    const url = new URL(this.server + c.path);
    if (c.query)
      for (const [k, v] of Object.entries(c.query))
        if (v !== undefined && v !== '') url.searchParams.set(k, v);
    const headers: Record<string, string> = {
      ...(this.opts.headers ?? {}),
      accept: c.accept ?? 'application/json',
    };
    let body: string | undefined;
    if (c.body !== undefined) {
      body = JSON.stringify(c.body);
      headers['content-type'] = c.contentType ?? 'application/json';
    }
    const timeout = AbortSignal.timeout(this.opts.callTimeoutMs ?? 30_000);
    const signal = c.signal ? AbortSignal.any([c.signal, timeout]) : timeout;
    let res: Dispatcher.ResponseData;
    let text: string;
    try {
      res = await request(url, {
        method: c.method,
        headers,
        body: body ?? null,
        signal,
        dispatcher: this.agent,
      });
      text = await res.body.text();
    } catch (err) {
      const message = timeout.aborted
        ? `timed out after ${this.opts.callTimeoutMs ?? 30_000} ms`
        : (err as Error).message;
      throw new KubeApiError(c.what, 0, 'ConnectionError', message, { cause: err });
    }
    this.opts.onResponse?.({
      method: c.method,
      path: c.path,
      status: res.statusCode,
      bytes: Buffer.byteLength(text),
    });
    if (res.statusCode >= 200 && res.statusCode < 300) {
      if (text === '') return undefined as T;
      try {
        return JSON.parse(text) as T;
      } catch (err) {
        throw new KubeApiError(
          c.what,
          0,
          'BadBody',
          `response body is not JSON (${text.length} bytes; truncated?)`,
          { cause: err },
        );
      }
    }
    let reason = 'Unknown';
    let message = text.slice(0, 300);
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
      const status = parsed as { reason?: string; message?: string };
      reason = status.reason ?? reason;
      message = status.message ?? message;
    } catch {
      /* not a Status body */
    }
    const Cls = res.statusCode === 409 ? ConflictError : KubeApiError;
    const err = new Cls(c.what, res.statusCode, reason, message);
    err.notFound = isNotFoundStatus(res.statusCode, parsed);
    const ra = res.headers['retry-after'];
    if (typeof ra === 'string')
      (err as KubeApiError & { retryAfterMs?: number }).retryAfterMs = Number(ra) * 1000;
    throw err;
  }
}

/** A write's answer must be the object written; anything else is an error (the write may not have happened). */
function written(
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

function retryDelay(err: KubeApiError, attempt: number): number {
  const ra = (err as KubeApiError & { retryAfterMs?: number }).retryAfterMs;
  if (ra !== undefined && Number.isFinite(ra) && ra >= 0) return Math.min(ra, 30_000);
  return Math.min(200 * 2 ** (attempt - 1), 5_000);
}
