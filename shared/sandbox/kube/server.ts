/**
 * FakeKubeServer: a loopback HTTP server that @kubernetes/client-node and the
 * twopass adapter talk to unchanged. It models what twopass relies on:
 * consistent paginated lists with expiring continue tokens, preconditions,
 * optimistic concurrency, patches, metadata-only lists, CRDs, discovery and
 * Status error bodies. It is a fake: no RBAC, no admission, no garbage collection.
 */

import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gzipSync } from 'node:zlib';
import { tokenKubeconfig } from '../../kube/kubeconfig.ts';
import type { KubeObject, ResourceRef } from '../../kube/resources.ts';
import { groupList, resourceList } from './discovery.ts';
import { describeFault, type Fault, FaultPlan, RequestLog, type RequestRecord } from './faults.ts';
import { FakeLists } from './lists.ts';
import { FakeApiError, FakeStore, refKey } from './store.ts';
import { EventStream, isWatch, watchAnswer } from './watch.ts';

export { selector } from './lists.ts';

/** The API server's threshold for compressing a response (k8s.io/apiserver, 128 KiB). */
const GZIP_ABOVE = 128 * 1024;

export type FakeKubeOptions = Readonly<{
  /** Continue tokens older than this answer 410 Expired (default 5 min). */
  continueTtlMs?: number;
  now?: () => Date;
  port?: number;
}>;

export type ParsedPath =
  | { ref: ResourceRef; namespace?: string; name?: string; status?: boolean }
  | undefined;

export class FakeKubeServer {
  readonly store: FakeStore;
  readonly faults = new FaultPlan();
  private readonly log = new RequestLog();
  /** Every request so far, oldest first. */
  get requests(): RequestRecord[] {
    return this.log.entries;
  }
  /** Called when a request arrives, before anything is done with it (tests kill clients here). */
  onRequest: ((method: string, path: string) => void) | undefined;
  private readonly lists: FakeLists;
  private readonly server: Server;
  private readonly opts: FakeKubeOptions;
  /** The server's clock: creation timestamps and continue-token age. */
  private readonly now: () => number;
  /** TCP connections accepted so far (benchmarks compare HTTP clients with it). */
  connections = 0;
  url = '';

  constructor(opts: FakeKubeOptions = {}) {
    this.opts = opts;
    const now = opts.now ?? (() => new Date());
    this.now = () => now().getTime();
    this.store = new FakeStore(now);
    this.lists = new FakeLists(this.store, this.now, opts.continueTtlMs);
    this.server = createServer((req, res) => {
      this.handle(req, res).catch((err) => {
        if (!res.headersSent) this.status(res, new FakeApiError(500, 'InternalError', String(err)));
      });
    });
    this.server.keepAliveTimeout = 30_000;
    this.server.on('connection', () => this.connections++);
  }

  async start(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(this.opts.port ?? 0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this.url;
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  /** A kubeconfig (YAML) for this server, as client-node and the CLI read it. */
  kubeconfig(token = 'fake-admin-token'): string {
    return tokenKubeconfig(this.url, token, 'fake');
  }

  /** Expire every continue token handed out so far (410 on next use). */
  requestCount(filter?: { method?: string; path?: string }): number {
    return this.requests.filter(
      (r) =>
        (!filter?.method || r.method === filter.method) && (!filter?.path || r.path.includes(filter.path)),
    ).length;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://x');
    const method = req.method ?? 'GET';
    const body = await readBody(req);
    this.onRequest?.(method, url.pathname);
    const fault = this.faults.match(method, url.pathname + url.search);
    const record = (status: number, bytes: number, f?: string) =>
      this.log.record(method, url, status, bytes, f);
    if (fault?.delayMs) await new Promise((r) => setTimeout(r, fault.delayMs));
    if (fault?.until) await fault.until.catch(() => undefined);
    if (req.socket.destroyed) {
      // the client is gone (killed, timed out) before the server got to its request: nothing is applied
      record(0, 0, 'client gone');
      return;
    }
    if (fault?.reset) {
      record(0, 0, 'reset');
      req.socket.destroy();
      return;
    }
    if (fault?.status !== undefined) {
      const headers: Record<string, string> = {};
      if (fault.retryAfterSeconds !== undefined) headers['retry-after'] = String(fault.retryAfterSeconds);
      const reason = fault.reason ?? reasonFor(fault.status);
      const n = this.status(
        res,
        new FakeApiError(fault.status, reason, `injected fault: ${fault.status} ${reason}`),
        headers,
      );
      record(fault.status, n, describeFault(fault));
      return;
    }
    let status = 200;
    let payload: unknown;
    try {
      [status, payload] = this.route(
        method,
        url,
        req.headers.accept ?? '',
        req.headers['content-type'] ?? '',
        body,
        fault,
      );
    } catch (err) {
      const e = err instanceof FakeApiError ? err : new FakeApiError(500, 'InternalError', String(err));
      record(e.code, this.status(res, e), fault ? describeFault(fault) : undefined);
      return;
    }
    const text = payload instanceof EventStream ? payload.text : JSON.stringify(payload);
    if (fault?.truncate) {
      res.writeHead(status, {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(text),
      });
      res.write(text.slice(0, Math.floor(text.length / 2)));
      record(status, text.length / 2, 'truncated');
      res.socket?.destroy();
      return;
    }
    // As the API server does (APIResponseCompression): gzip when asked and the body is
    // larger than 128 KiB.
    const gzipped =
      /\bgzip\b/.test(String(req.headers['accept-encoding'] ?? '')) && Buffer.byteLength(text) > GZIP_ABOVE
        ? gzipSync(text, { level: 1 })
        : undefined;
    const out = gzipped ?? Buffer.from(text);
    res.writeHead(status, {
      'content-type': 'application/json',
      'content-length': out.length,
      ...(gzipped ? { 'content-encoding': 'gzip' } : {}),
    });
    res.end(out);
    record(status, out.length, fault ? describeFault(fault) : undefined);
  }

  private status(res: ServerResponse, e: FakeApiError, headers: Record<string, string> = {}): number {
    const text = JSON.stringify({
      kind: 'Status',
      apiVersion: 'v1',
      metadata: {},
      status: 'Failure',
      message: e.message,
      reason: e.reason,
      ...(Object.keys(e.details).length ? { details: e.details } : {}),
      code: e.code,
    });
    res.writeHead(e.code, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(text),
      ...headers,
    });
    res.end(text);
    return Buffer.byteLength(text);
  }

  private route(
    method: string,
    url: URL,
    accept: string,
    contentType: string,
    raw: string,
    fault: Fault | undefined,
  ): [number, unknown] {
    const p = url.pathname;
    if (p === '/readyz' || p === '/healthz' || p === '/livez') return [200, 'ok'];
    if (p === '/version')
      return [200, { major: '1', minor: '36', gitVersion: 'v1.36.0-twopass-fake', platform: 'fake' }];
    if (p === '/api') return [200, { kind: 'APIVersions', versions: ['v1'] }];
    if (p === '/apis') return [200, groupList(this.store)];
    const disc = /^\/(?:api\/(v1)|apis\/([^/]+)\/([^/]+))\/?$/.exec(p);
    if (disc && method === 'GET') return [200, resourceList(this.store, disc[2] ?? '', disc[1] ?? disc[3]!)];
    const parsed = this.parse(p);
    if (!parsed) throw new FakeApiError(404, 'NotFound', 'the server could not find the requested resource');
    const { ref, namespace, name } = parsed;
    const body = raw === '' ? undefined : parseJson(raw);
    if (name === undefined) {
      if (method === 'GET' && isWatch(url.searchParams))
        return [
          200,
          watchAnswer(
            this.store.history,
            refKey(ref.group, ref.version, ref.plural),
            namespace,
            url.searchParams,
          ),
        ];
      if (method === 'GET') return [200, this.lists.list(ref, namespace, url.searchParams, accept, fault)];
      if (method === 'POST') return [201, this.store.create(ref, namespace, body)];
      throw new FakeApiError(405, 'MethodNotAllowed', `${method} is not supported on a collection`);
    }
    switch (method) {
      case 'GET':
        return [200, this.store.get(ref, namespace, name)];
      case 'PUT':
        if (parsed.status) {
          // the status subresource: only .status changes
          const cur = this.store.get(ref, namespace, name) as KubeObject;
          const next = {
            ...structuredClone(cur),
            status: (body as { status?: unknown } | undefined)?.status,
          } as KubeObject;
          next.metadata.resourceVersion =
            (body as KubeObject | undefined)?.metadata?.resourceVersion ?? cur.metadata.resourceVersion;
          return [200, this.store.update(ref, namespace, name, next)];
        }
        return [200, this.store.update(ref, namespace, name, body)];
      case 'PATCH': {
        if (contentType.includes('json-patch'))
          return [200, this.store.jsonPatch(ref, namespace, name, body)];
        return [200, this.store.mergePatch(ref, namespace, name, body)];
      }
      case 'DELETE': {
        const gone = this.store.delete(ref, namespace, name, body);
        // Pods answer with the Pod (as it was, or Terminating); other kinds with a Status
        // naming the object (the API reference: DELETE pod is 200/202 Pod, configmap 200/202 Status)
        if (ref.group === '' && ref.plural === 'pods') return [200, gone];
        return [
          200,
          {
            kind: 'Status',
            apiVersion: 'v1',
            metadata: {},
            status: 'Success',
            details: { name, group: ref.group, kind: ref.plural, uid: gone.metadata.uid },
          },
        ];
      }
      default:
        throw new FakeApiError(405, 'MethodNotAllowed', `${method} is not supported`);
    }
  }

  private parse(p: string): ParsedPath {
    const m =
      /^\/(?:api\/(v1)|apis\/([^/]+)\/([^/]+))(?:\/namespaces\/([^/]+))?\/([^/]+)(?:\/([^/]+))?(\/status)?\/?$/.exec(
        p,
      );
    if (!m) return undefined;
    const group = m[2] ?? '';
    const version = m[1] ?? m[3]!;
    let namespace = m[4] !== undefined ? decodeURIComponent(m[4]) : undefined;
    const plural = m[5]!;
    let name = m[6] !== undefined ? decodeURIComponent(m[6]) : undefined;
    // /api/v1/namespaces/{name} is the namespaces resource itself.
    if (group === '' && namespace === undefined && plural === 'namespaces') {
      return { ref: this.store.find('', 'v1', 'namespaces')!, ...(name !== undefined ? { name } : {}) };
    }
    if (
      group === '' &&
      m[4] !== undefined &&
      m[5] !== undefined &&
      m[6] === undefined &&
      this.store.find('', 'v1', m[5]) === undefined
    ) {
      // /api/v1/namespaces/{ns}/{unknown}
      return undefined;
    }
    const ref = this.store.find(group, version, plural);
    if (!ref) return undefined;
    if (!ref.namespaced && namespace !== undefined) return undefined;
    name = name === '' ? undefined : name;
    namespace = ref.namespaced ? namespace : undefined;
    return {
      ref,
      ...(namespace !== undefined ? { namespace } : {}),
      ...(name !== undefined ? { name } : {}),
      ...(m[7] ? { status: true } : {}),
    };
  }
}

function reasonFor(status: number): string {
  return (
    (
      {
        400: 'BadRequest',
        401: 'Unauthorized',
        403: 'Forbidden',
        404: 'NotFound',
        409: 'Conflict',
        410: 'Expired',
        429: 'TooManyRequests',
        500: 'InternalError',
        503: 'ServiceUnavailable',
        504: 'Timeout',
      } as Record<number, string>
    )[status] ?? 'Unknown'
  );
}

function parseJson(raw: string): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    throw new FakeApiError(400, 'BadRequest', 'request body is not valid JSON');
  }
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString()));
    req.on('error', reject);
  });
}
