/**
 * KubeHttpClient: the Kubernetes adapter. Configuration and credentials come from
 * @kubernetes/client-node's KubeConfig; requests go over one shared keep-alive
 * undici Agent (client-node's generated APIs open a connection per request). client-node
 * is imported only when a kubeconfig is read: its generated API models cost a run about
 * 80 MiB of memory that nothing else uses.
 */
import { existsSync } from 'node:fs';
import { homedir } from 'node:os';
import { delimiter, join } from 'node:path';
import { fsWhy, ListIncompleteError, yamlMessage } from '../errors.ts';
import { ConnectionError, HttpTransport, type TlsOptions, type TransportOptions } from '../http/transport.ts';
import type { Time } from '../time.ts';
import { ConflictError, KubeApiError } from './errors.ts';
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
  tls?: TlsOptions;
  /** Per-call timeout. */
  callTimeoutMs?: number;
  /** Attempts for idempotent reads on 429/5xx/connection errors. */
  readAttempts?: number;
  /** The clock, sleeps and timeouts (injected: tests never wait on a real clock). */
  time: Time;
  pageSize?: number;
  /** Restarts of a list after 410 Expired. */
  maxListRestarts?: number;
  connections?: number;
  /** Each list page as it arrives (what, pages and items so far): progress on a terminal. */
  onPage?: (progress: { what: string; pages: number; items: number }) => void;
  /** Ask for gzip, as client-go does (default true): large lists cost a fraction of the bytes. */
  gzip?: boolean;
  /** The User-Agent header (default `twopass`; the runtime adds its version). */
  userAgent?: string;
  /** Counts requests and bytes (on the wire, and decoded), for benchmarks and tests. */
  onResponse?: TransportOptions['onResponse'];
  /**
   * A run's client: a list that answers older than the newest list this client read
   * before it is refused as stale (decision 0007).
   */
  freshLists?: boolean;
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

/** Builds client options from a kubeconfig file, $KUBECONFIG, ~/.kube/config or the in-cluster account. */
export async function kubeOptionsFromConfig(
  kubeconfig?: string,
  context?: string,
): Promise<Omit<KubeClientOptions, 'time'>> {
  const { KubeConfig } = await import('@kubernetes/client-node');
  const kc = new KubeConfig();
  // The caller names an explicit file; the files of $KUBECONFIG are named here.
  const load = (file: string, into: InstanceType<typeof KubeConfig>, named = false) => {
    try {
      into.loadFromFile(file);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      const why = code ? fsWhy(err) : yamlMessage(err);
      throw new Error(named ? `${file}: ${why}` : why, { cause: err });
    }
  };
  if (kubeconfig !== undefined) load(kubeconfig, kc);
  else {
    const missing = whereNoKubeconfig(process.env);
    if (missing) throw new Error(missing);
    // As kubectl: every file of $KUBECONFIG that exists, merged in order (missing ones skipped).
    const files = (process.env.KUBECONFIG ?? '').split(delimiter).filter((p) => p !== '' && existsSync(p));
    if (files.length === 0) kc.loadFromDefault();
    else {
      load(files[0]!, kc, true);
      for (const f of files.slice(1)) {
        const more = new KubeConfig();
        load(f, more, true);
        kc.mergeConfig(more, true);
      }
    }
  }
  const names = kc.getContexts().map((c) => c.name);
  if (context !== undefined) {
    if (!names.includes(context))
      throw new Error(`context \`${context}\` is not in it (contexts: ${names.join(', ') || 'none'})`);
    kc.setCurrentContext(context);
  }
  const cluster = kc.getCurrentCluster();
  if (!cluster) {
    const current = kc.getCurrentContext();
    throw new Error(
      !current
        ? `it names no current context (contexts: ${names.join(', ') || 'none'}); pass --context NAME`
        : !names.includes(current)
          ? `its current context \`${current}\` is not one of its contexts (${names.join(', ') || 'none'}); pass --context NAME`
          : `the cluster of context \`${current}\` is not in it`,
    );
  }
  let server = cluster.server;
  // As client-go: a server without a scheme is https when TLS is configured, else http.
  if (server && !/^[a-z][a-z0-9+.-]*:\/\//i.test(server))
    server = `${cluster.caData || cluster.caFile || cluster.skipTLSVerify ? 'https' : 'http'}://${server}`;
  try {
    new URL(server);
  } catch {
    throw new Error(`the server of cluster \`${cluster.name}\` is not a URL: \`${cluster.server}\``);
  }
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
  return { server, headers: { ...(opts.headers ?? {}) }, tls };
}

/**
 * Where a kubeconfig is looked for when none is named, in order; undefined when one is
 * there, else a message that says where it looked (instead of the client library's
 * fallback to http://localhost:8080 and its confusing TLS error).
 */
export function whereNoKubeconfig(env: Readonly<Record<string, string | undefined>>): string | undefined {
  const looked: string[] = ['--kubeconfig: not given'];
  const paths = (env.KUBECONFIG ?? '').split(delimiter).filter((p) => p !== '');
  if (paths.some((p) => existsSync(p))) return undefined;
  looked.push(paths.length > 0 ? `$KUBECONFIG: ${paths.join(delimiter)} not found` : '$KUBECONFIG: not set');
  const home = join(env.HOME ?? homedir(), '.kube', 'config');
  if (existsSync(home)) return undefined;
  looked.push(`${home}: not found`);
  const token = '/var/run/secrets/kubernetes.io/serviceaccount/token';
  if (env.KUBERNETES_SERVICE_HOST && existsSync(token)) return undefined;
  looked.push(
    env.KUBERNETES_SERVICE_HOST
      ? `in-cluster: ${token} not found`
      : 'in-cluster: KUBERNETES_SERVICE_HOST not set',
  );
  return `no kubeconfig found (${looked.join('; ')}); pass --kubeconfig FILE or set KUBECONFIG`;
}

/** Lists read again with a larger page when their last page is exactly full (decision 0007). */
const AMBIGUOUS_RELISTS = 2;

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

export class KubeHttpClient implements KubeClient {
  readonly server: string;
  private readonly http: HttpTransport;
  private readonly opts: KubeClientOptions;
  private readonly discovery = new Map<string, Promise<Set<string> | undefined>>();
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
            // Never read by twopass, and often the largest part of an object's metadata.
            delete (item.metadata as { managedFields?: unknown }).managedFields;
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
    let res: { status: number; text: string };
    try {
      res = await this.http.send({ call: c.what, method: c.method, url, headers, body, signal: c.signal });
    } catch (err) {
      if (!(err instanceof ConnectionError)) throw err;
      throw new KubeApiError(c.what, 0, 'ConnectionError', err.detail, {
        cause: err,
      });
    }
    const { status, text } = res;
    if (status >= 200 && status < 300) {
      if (text === '') return undefined as T;
      try {
        return JSON.parse(text) as T;
      } catch (err) {
        throw new KubeApiError(
          c.what,
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
    const err = new Cls(c.what, status, reason, message);
    err.notFound = isNotFoundStatus(status, parsed);
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
