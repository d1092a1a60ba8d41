/**
 * Neutron: full listing of ports and floating IPs (filters, pagination by
 * limit/marker and *_links, or none when a deployment disables it), GET one,
 * and DELETE with `If-Match: revision_number=N` when `revision-if-match` exists.
 */

import { OpenStackApiError } from './errors.ts';
import { describeBody, type Http } from './http.ts';
import type { KeystoneAuth } from './keystone.ts';

export type Port = {
  id: string;
  name?: string;
  description?: string;
  project_id?: string;
  tenant_id?: string;
  device_id?: string;
  device_owner?: string;
  fixed_ips?: { ip_address: string; subnet_id?: string }[];
  tags?: string[];
  revision_number?: number;
  status?: string;
  created_at?: string;
};

export type FloatingIp = {
  id: string;
  floating_ip_address?: string;
  port_id?: string | null;
  fixed_ip_address?: string | null;
  project_id?: string;
  tags?: string[];
  revision_number?: number;
  description?: string;
  created_at?: string;
};

export type Filters = Readonly<{
  tags?: readonly string[];
  project_id?: string;
  fields?: readonly string[];
  device_id?: string;
}>;

export type NeutronDelete = 'deleted' | 'gone' | 'conflict';

export interface NeutronReader {
  listPorts(f: Filters, signal?: AbortSignal): Promise<{ items: Port[]; pages: number }>;
  listFloatingIps(f: Filters, signal?: AbortSignal): Promise<{ items: FloatingIp[]; pages: number }>;
  getPort(id: string, signal?: AbortSignal): Promise<Port | undefined>;
  getFloatingIp(id: string, signal?: AbortSignal): Promise<FloatingIp | undefined>;
}

export interface NeutronWriter {
  deletePort(id: string, revision: number | undefined, signal?: AbortSignal): Promise<NeutronDelete>;
  deleteFloatingIp(id: string, revision: number | undefined, signal?: AbortSignal): Promise<NeutronDelete>;
}

export class NeutronClient implements NeutronReader, NeutronWriter {
  private readonly auth: KeystoneAuth;
  private readonly http: Http;
  private readonly pageSize: number;
  private extensions: Promise<Set<string>> | undefined;

  constructor(auth: KeystoneAuth, http: Http, pageSize = 500) {
    this.auth = auth;
    this.http = http;
    this.pageSize = pageSize;
  }

  private async base(signal?: AbortSignal): Promise<string> {
    const url = await this.auth.endpoint('network', signal);
    return url.endsWith('/v2.0') ? url : `${url}/v2.0`;
  }

  /** A call with the token; a 401 re-authenticates once. */
  private async call(
    what: string,
    method: string,
    url: string,
    headers: Record<string, string> = {},
    signal?: AbortSignal,
  ) {
    for (let attempt = 0; ; attempt++) {
      const token = await this.auth.get(signal);
      const r = await this.http.send(
        what,
        method,
        url,
        { 'x-auth-token': token, ...headers },
        undefined,
        signal,
      );
      if (r.status === 401 && attempt === 0) {
        this.auth.invalidate();
        continue;
      }
      return r;
    }
  }

  async supports(alias: string, signal?: AbortSignal): Promise<boolean> {
    this.extensions ??= (async () => {
      const r = await this.call(
        'neutron list extensions',
        'GET',
        `${await this.base(signal)}/extensions`,
        {},
        signal,
      );
      if (r.status !== 200)
        throw new OpenStackApiError('neutron list extensions', r.status, describeBody(r.body));
      return new Set(((r.body as { extensions?: { alias: string }[] }).extensions ?? []).map((e) => e.alias));
    })().catch((err) => {
      this.extensions = undefined;
      throw err;
    });
    return (await this.extensions).has(alias);
  }

  private async listAll<T extends { id: string }>(
    collection: 'ports' | 'floatingips',
    f: Filters,
    signal?: AbortSignal,
  ): Promise<{ items: T[]; pages: number }> {
    const what = `neutron list ${collection}`;
    const q = new URLSearchParams();
    if (f.tags?.length) q.set('tags', f.tags.join(','));
    if (f.project_id) q.set('project_id', f.project_id);
    if (f.device_id !== undefined) q.set('device_id', f.device_id);
    for (const field of f.fields ?? []) q.append('fields', field);
    q.set('limit', String(this.pageSize));
    let url: string | undefined = `${await this.base(signal)}/${collection}?${q}`;
    const items: T[] = [];
    const seen = new Set<string>();
    let pages = 0;
    let emptyInARow = 0;
    while (url) {
      const r = await this.call(`${what} page ${pages + 1}`, 'GET', url, {}, signal);
      if (r.status !== 200)
        throw new OpenStackApiError(`${what} page ${pages + 1}`, r.status, describeBody(r.body));
      const body = r.body as Record<string, unknown>;
      const page = body?.[collection];
      if (!Array.isArray(page))
        throw new OpenStackApiError(`${what} page ${pages + 1}`, r.status, 'the answer has no list');
      pages++;
      for (const it of page as T[]) {
        if (seen.has(it.id))
          throw new OpenStackApiError(what, r.status, `item ${it.id} came twice: the pages are inconsistent`);
        seen.add(it.id);
        items.push(it);
      }
      const links = (body[`${collection}_links`] ?? []) as { rel: string; href: string }[];
      const next = Array.isArray(links) ? links.find((l) => l.rel === 'next')?.href : undefined;
      // Without pagination (disabled in the deployment) there are no links: the one answer is everything.
      // An empty page with a next link is followed (a few times at most).
      emptyInARow = page.length === 0 ? emptyInARow + 1 : 0;
      if (next && emptyInARow > 10)
        throw new OpenStackApiError(
          what,
          r.status,
          'more than 10 empty pages in a row: the listing cannot be proven complete',
        );
      url = next;
      if (pages > 100_000) throw new OpenStackApiError(what, 0, 'more than 100000 pages: giving up');
    }
    return { items, pages };
  }

  listPorts(f: Filters, signal?: AbortSignal) {
    return this.listAll<Port>('ports', f, signal);
  }

  listFloatingIps(f: Filters, signal?: AbortSignal) {
    return this.listAll<FloatingIp>('floatingips', f, signal);
  }

  private async getOne<T>(
    collection: 'ports' | 'floatingips',
    key: 'port' | 'floatingip',
    id: string,
    signal?: AbortSignal,
  ): Promise<T | undefined> {
    const r = await this.call(
      `neutron get ${key} ${id}`,
      'GET',
      `${await this.base(signal)}/${collection}/${encodeURIComponent(id)}`,
      {},
      signal,
    );
    if (r.status === 404) return undefined;
    if (r.status !== 200)
      throw new OpenStackApiError(`neutron get ${key} ${id}`, r.status, describeBody(r.body));
    return (r.body as Record<string, T>)[key];
  }

  getPort(id: string, signal?: AbortSignal) {
    return this.getOne<Port>('ports', 'port', id, signal);
  }

  getFloatingIp(id: string, signal?: AbortSignal) {
    return this.getOne<FloatingIp>('floatingips', 'floatingip', id, signal);
  }

  private async del(
    collection: 'ports' | 'floatingips',
    id: string,
    revision: number | undefined,
    signal?: AbortSignal,
  ): Promise<NeutronDelete> {
    const what = `neutron delete ${collection === 'ports' ? 'port' : 'floating IP'} ${id}`;
    const conditional = revision !== undefined && (await this.supports('revision-if-match', signal));
    const r = await this.call(
      what,
      'DELETE',
      `${await this.base(signal)}/${collection}/${encodeURIComponent(id)}`,
      conditional ? { 'if-match': `revision_number=${revision}` } : {},
      signal,
    );
    if (r.status === 204 || r.status === 200) return 'deleted';
    if (r.status === 404) return 'gone';
    if (r.status === 412) return 'conflict';
    throw new OpenStackApiError(what, r.status, describeBody(r.body));
  }

  deletePort(id: string, revision: number | undefined, signal?: AbortSignal) {
    return this.del('ports', id, revision, signal);
  }

  deleteFloatingIp(id: string, revision: number | undefined, signal?: AbortSignal) {
    return this.del('floatingips', id, revision, signal);
  }
}
