/**
 * A fault-injecting HTTP proxy on loopback, in front of any Kubernetes API server (the
 * real kube-apiserver over TLS, or the fake): it forwards each request as it is, then
 * may rewrite the answer the way a broken network, proxy or server could: a page
 * whose continue token is dropped, an empty page that keeps its token, a page
 * replaced by the previous page, a page of another resource's list, an empty or
 * truncated body, a 404 without a Status, a write answered "success" that never
 * reached the server. Every fault is armed for the Nth matching request, so each one
 * provably happens (`fired`).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { Agent, request } from 'undici';

export type ProxyFaultKind =
  /** A list page without its continue token (its remainingItemCount kept). */
  | 'drop-continue'
  /** A list page with no items that keeps its continue token. */
  | 'empty-items'
  /** A list page whose items are those of the previous page of the same list. */
  | 'previous-page'
  /** A list page of another resource's list (ConfigMaps of all namespaces). */
  | 'other-resource'
  /** A list page whose resourceVersion differs from the list's. */
  | 'other-rv'
  /** A list page without an `items` array. */
  | 'no-items'
  /** 200 with an empty body. */
  | 'empty-body'
  /** 200 with half the body, then the connection closes. */
  | 'truncated'
  /** 200 with an HTML page. */
  | 'html'
  /** 404 with no Status body (a proxy's own 404, not the server's NotFound). */
  | 'bare-404'
  /** A write answered 200 with the object as it is now, never forwarded. */
  | 'fake-success'
  /** A list page without its continue token and its remainingItemCount: it looks like the last. */
  | 'drop-continue-and-count'
  /**
   * A list answered with the first answer this proxy saw for the same list (its path and
   * query, resourceVersion parameters aside): self-consistent, complete, and stale.
   */
  | 'replay'
  /** An object answered with another UID (another object of the same name). */
  | 'other-uid'
  /** A write forwarded (it happens), then answered 200 with a Status Failure body. */
  | 'status-failure-200';

export type ProxyFault = Readonly<{
  kind: ProxyFaultKind;
  method?: string;
  /** Matched against `path?query`. */
  path: RegExp;
  /** Fire on the Nth matching request (1-based; default 1). */
  nth?: number;
  /** Fire on this many matching requests from the Nth on (default 1): reads are retried. */
  times?: number;
  /** Runs when the fault fires, before the proxy answers (the world moves at that moment). */
  onFire?: () => Promise<void>;
}>;

type Armed = { f: ProxyFault; seen: number; fired: number };

export class FaultProxy {
  private server: Server | undefined;
  private armed: Armed[] = [];
  private readonly agent = new Agent({ connect: { rejectUnauthorized: false } });
  private readonly lastPage = new Map<string, unknown[]>();
  /** The first answer to each list (by path and query, resourceVersion parameters aside). */
  private readonly firstAnswer = new Map<string, string>();
  readonly log: { method: string; path: string; fault?: ProxyFaultKind }[] = [];
  url = '';

  private readonly upstream: string;
  constructor(upstream: string) {
    this.upstream = upstream.replace(/\/+$/, '');
  }

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      this.handle(req, res).catch((err) => {
        if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' });
        res.end(`fault proxy: ${(err as Error).message}`);
      });
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server!.address() as { port: number }).port}`;
    return this;
  }

  async stop(): Promise<void> {
    await new Promise<void>((resolve) => this.server?.close(() => resolve()));
    this.server?.closeAllConnections();
    await this.agent.close();
  }

  add(f: ProxyFault): this {
    this.armed.push({ f, seen: 0, fired: 0 });
    return this;
  }

  clear(): void {
    this.armed = [];
  }

  /** How many armed faults fired (at least once). */
  fired(): number {
    return this.armed.filter((a) => a.fired > 0).length;
  }

  private match(method: string, target: string): ProxyFault | undefined {
    for (const a of this.armed) {
      if (a.fired >= (a.f.times ?? 1)) continue;
      if ((a.f.method !== undefined && a.f.method !== method) || !a.f.path.test(target)) continue;
      a.seen++;
      if (a.seen >= (a.f.nth ?? 1)) {
        a.fired++;
        return a.f;
      }
    }
    return undefined;
  }

  private async forward(method: string, target: string, headers: Record<string, string>, body?: Buffer) {
    const res = await request(`${this.upstream}${target}`, {
      method: method as 'GET',
      headers,
      body: body && body.length > 0 ? body : null,
      dispatcher: this.agent,
    });
    const text = await res.body.text();
    return { status: res.statusCode, contentType: String(res.headers['content-type'] ?? ''), text };
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const method = req.method ?? 'GET';
    const target = req.url ?? '/';
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = Buffer.concat(chunks);
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(req.headers))
      if (typeof v === 'string' && !['host', 'connection', 'content-length', 'accept-encoding'].includes(k))
        headers[k] = v;
    const fault = this.match(method, target);
    this.log.push({ method, path: target, ...(fault ? { fault: fault.kind } : {}) });
    const send = (status: number, text: string, type = 'application/json') => {
      res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(text) });
      res.end(text);
    };
    if (fault?.onFire) await fault.onFire();
    if (fault?.kind === 'fake-success') {
      // Answer as if the write happened, with the object as the server has it now.
      const path = method === 'POST' ? target : target.split('?')[0]!;
      const now = method === 'POST' ? undefined : await this.forward('GET', path, headers);
      if (method === 'DELETE' || !now)
        return send(200, JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Success' }));
      return send(200, now.text);
    }
    const up = await this.forward(method, target, headers, body);
    const pathname = target.split('?')[0]!;
    const isList =
      method === 'GET' && up.status === 200 && up.text.startsWith('{') && /"items":/.test(up.text);
    let page: Record<string, unknown> | undefined;
    if (isList) {
      try {
        page = JSON.parse(up.text) as Record<string, unknown>;
      } catch {
        page = undefined;
      }
    }
    const listKey = (() => {
      const [path, query] = target.split('?') as [string, string | undefined];
      const q = new URLSearchParams(query ?? '');
      q.delete('resourceVersion');
      q.delete('resourceVersionMatch');
      return `${path}?${q}`;
    })();
    if (page && !this.firstAnswer.has(listKey)) this.firstAnswer.set(listKey, up.text);
    const prev = this.lastPage.get(pathname);
    if (page && Array.isArray(page.items)) this.lastPage.set(pathname, page.items as unknown[]);
    if (!fault) return send(up.status, up.text, up.contentType || 'application/json');
    const md = (page?.metadata ?? {}) as Record<string, unknown>;
    switch (fault.kind) {
      case 'drop-continue':
        delete md.continue;
        return send(200, JSON.stringify(page));
      case 'drop-continue-and-count':
        delete md.continue;
        delete md.remainingItemCount;
        return send(200, JSON.stringify(page));
      case 'replay':
        return send(200, this.firstAnswer.get(listKey) ?? up.text);
      case 'other-uid': {
        const o = JSON.parse(up.text) as { metadata?: Record<string, unknown> };
        if (o.metadata) o.metadata.uid = '00000000-0000-4000-8000-00000000beef';
        return send(up.status, JSON.stringify(o));
      }
      case 'status-failure-200':
        return send(
          200,
          JSON.stringify({
            kind: 'Status',
            apiVersion: 'v1',
            status: 'Failure',
            message: 'an error the gateway made up',
            reason: 'InternalError',
            code: 500,
          }),
        );
      case 'empty-items':
        return send(200, JSON.stringify({ ...page, items: [] }));
      case 'previous-page':
        return send(200, JSON.stringify({ ...page, items: prev ?? page?.items }));
      case 'other-rv':
        return send(200, JSON.stringify({ ...page, metadata: { ...md, resourceVersion: '1' } }));
      case 'no-items': {
        const { items: _i, ...rest } = page ?? {};
        return send(200, JSON.stringify(rest));
      }
      case 'other-resource': {
        const q = new URLSearchParams(target.split('?')[1] ?? '');
        q.delete('continue');
        q.delete('labelSelector');
        q.delete('fieldSelector');
        const other = await this.forward('GET', `/api/v1/configmaps?${q}`, headers);
        return send(other.status, other.text);
      }
      case 'empty-body':
        return send(200, '');
      case 'html':
        return send(200, '<!doctype html><title>gateway</title>', 'text/html');
      case 'bare-404':
        return send(404, '', 'text/plain');
      case 'truncated':
        res.writeHead(200, {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(up.text),
        });
        res.write(up.text.slice(0, Math.floor(up.text.length / 2)));
        res.socket?.destroy();
        return;
    }
  }
}
