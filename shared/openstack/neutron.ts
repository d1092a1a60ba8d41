/**
 * Neutron: full listing of ports, floating IPs and security groups (filters, pagination by
 * limit/marker and *_links, or none when a deployment disables it), GET one,
 * and DELETE with `If-Match: revision_number=N` when `revision-if-match` exists.
 */

import { OpenStackApiError } from './errors.ts';
import { describeBody, type Http } from './http.ts';
import type { KeystoneAuth } from './keystone.ts';
import { listProven } from './pages.ts';

export type Port = {
  id: string;
  name?: string;
  description?: string;
  project_id?: string;
  tenant_id?: string;
  device_id?: string;
  device_owner?: string;
  network_id?: string;
  fixed_ips?: { ip_address: string; subnet_id?: string }[];
  tags?: string[];
  revision_number?: number;
  status?: string;
  created_at?: string;
  port_security_enabled?: boolean;
  security_groups?: string[];
};

export type FloatingIp = {
  id: string;
  floating_ip_address?: string;
  port_id?: string | null;
  fixed_ip_address?: string | null;
  floating_network_id?: string;
  project_id?: string;
  tags?: string[];
  revision_number?: number;
  description?: string;
  created_at?: string;
};

export type SecurityGroup = {
  id: string;
  name?: string;
  description?: string;
  project_id?: string;
  tags?: string[];
  revision_number?: number;
  created_at?: string;
};

/** Each collection's path, JSON keys, Neutron's not-found type and its name in messages. */
const COLLECTIONS = {
  ports: { list: 'ports', one: 'port', notFound: 'PortNotFound', noun: 'port' },
  floatingips: {
    list: 'floatingips',
    one: 'floatingip',
    notFound: 'FloatingIPNotFound',
    noun: 'floating IP',
  },
  'security-groups': {
    list: 'security_groups',
    one: 'security_group',
    notFound: 'SecurityGroupNotFound',
    noun: 'security group',
  },
} as const;
export type Collection = keyof typeof COLLECTIONS;

export type Filters = Readonly<{
  tags?: readonly string[];
  project_id?: string;
  fields?: readonly string[];
  device_id?: string;
}>;

export type NeutronDelete = 'deleted' | 'gone' | 'conflict';

export interface NeutronReader {
  /** Throws a configuration error when the project is not the credentials' or visible to them. */
  checkProject?(projectId: string, signal?: AbortSignal): Promise<void>;
  listPorts(f: Filters, signal?: AbortSignal): Promise<{ items: Port[]; pages: number }>;
  listFloatingIps(f: Filters, signal?: AbortSignal): Promise<{ items: FloatingIp[]; pages: number }>;
  getPort(id: string, signal?: AbortSignal): Promise<Port | undefined>;
  getFloatingIp(id: string, signal?: AbortSignal): Promise<FloatingIp | undefined>;
}

/** Deletes; a revision makes the delete conditional (If-Match), `undefined` makes it unconditional. */
export interface NeutronWriter {
  deletePort(id: string, revision: number | undefined, signal?: AbortSignal): Promise<NeutronDelete>;
  deleteFloatingIp(id: string, revision: number | undefined, signal?: AbortSignal): Promise<NeutronDelete>;
}

/** Neutron's own answer that an object does not exist (not a proxy's or a router's 404). */
function isNotFound(body: unknown, collection: Collection): boolean {
  const e = (body as { NeutronError?: { type?: unknown } } | undefined)?.NeutronError;
  return e?.type === COLLECTIONS[collection].notFound;
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

  /** The role names the credentials' token carries (what a restore may ask of Neutron's policy). */
  roles(signal?: AbortSignal): Promise<readonly string[]> {
    return this.auth.roles(signal);
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
    body?: unknown,
  ) {
    for (let attempt = 0; ; attempt++) {
      const token = await this.auth.get(signal);
      const r = await this.http.send(
        what,
        method,
        url,
        {
          'x-auth-token': token,
          ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
          ...headers,
        },
        body,
        signal,
      );
      if (r.status === 401 && attempt === 0) {
        this.auth.invalidate();
        continue;
      }
      return r;
    }
  }

  checkProject(projectId: string, signal?: AbortSignal): Promise<void> {
    return this.auth.checkProject(projectId, signal);
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

  /**
   * A complete listing, proven page by page: each page is a JSON object with the
   * collection array; every item has an id, no id comes twice, a revision_number is a
   * count; a `next` link carries a marker that is the last id of its page (so every
   * page moves on), and only its marker and limit are taken: the next request goes to
   * the catalog's endpoint with this request's own filters, never to a host the link
   * names. A page with a next link and no items cannot be proven and is an error.
   */
  private async listAll<T extends { id: string }>(
    collection: Collection,
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
    return listProven<T>({
      what,
      url: `${await this.base(signal)}/${collection}`,
      query: q,
      key: COLLECTIONS[collection].list,
      get: (call, url) => this.call(call, 'GET', url, {}, signal),
      check: (it) => {
        const rev = (it as { revision_number?: unknown }).revision_number;
        return rev !== undefined && !(typeof rev === 'number' && Number.isInteger(rev) && rev >= 0)
          ? `${it.id} has a revision_number that is not a count: ${JSON.stringify(rev)}`
          : undefined;
      },
    });
  }

  listPorts(f: Filters, signal?: AbortSignal) {
    return this.listAll<Port>('ports', f, signal);
  }

  listFloatingIps(f: Filters, signal?: AbortSignal) {
    return this.listAll<FloatingIp>('floatingips', f, signal);
  }

  listSecurityGroups(f: Filters, signal?: AbortSignal) {
    return this.listAll<SecurityGroup>('security-groups', f, signal);
  }

  /** One object; undefined only when Neutron says it is not found (its own `<Kind>NotFound` error). */
  private async getOne<T extends { id: string }>(
    collection: Collection,
    id: string,
    signal?: AbortSignal,
  ): Promise<T | undefined> {
    const key = COLLECTIONS[collection].one;
    const what = `neutron get ${key} ${id}`;
    const r = await this.call(
      what,
      'GET',
      `${await this.base(signal)}/${collection}/${encodeURIComponent(id)}`,
      {},
      signal,
    );
    if (r.status === 404 && isNotFound(r.body, collection)) return undefined;
    if (r.status !== 200)
      throw new OpenStackApiError(what, r.status, describeBody(r.body) || 'not a Neutron answer');
    const o = (r.body as Record<string, unknown> | undefined)?.[key] as T | undefined;
    if (!o || typeof o !== 'object' || o.id !== id)
      throw new OpenStackApiError(what, 0, `the answer is not ${key} ${id}`);
    const rev = (o as { revision_number?: unknown }).revision_number;
    if (rev !== undefined && !(typeof rev === 'number' && Number.isInteger(rev) && rev >= 0))
      throw new OpenStackApiError(what, 0, `revision_number is not a count: ${JSON.stringify(rev)}`);
    return o;
  }

  getPort(id: string, signal?: AbortSignal) {
    return this.getOne<Port>('ports', id, signal);
  }

  getFloatingIp(id: string, signal?: AbortSignal) {
    return this.getOne<FloatingIp>('floatingips', id, signal);
  }

  getSecurityGroup(id: string, signal?: AbortSignal) {
    return this.getOne<SecurityGroup>('security-groups', id, signal);
  }

  private async del(
    collection: Collection,
    id: string,
    revision: number | undefined,
    signal?: AbortSignal,
  ): Promise<NeutronDelete> {
    const what = `neutron delete ${COLLECTIONS[collection].noun} ${id}`;
    // A revision asks for a conditional delete: where Neutron cannot make it conditional, it is
    // refused here, never sent without its If-Match (an unconditional delete is asked by `undefined`).
    const conditional = revision !== undefined;
    // Only `revision_number=<count>` is ever sent: Neutron ignores an If-Match of another form
    // and deletes unconditionally (and answers 400 to two values or a non-integer).
    if (conditional && !(Number.isSafeInteger(revision) && revision >= 0))
      throw new OpenStackApiError(
        what,
        0,
        `the revision ${JSON.stringify(revision)} is not a count, so no If-Match can carry it: not sent`,
      );
    if (conditional && !(await this.supports('revision-if-match', signal)))
      throw new OpenStackApiError(
        what,
        0,
        'Neutron does not offer the revision-if-match extension, so the delete cannot carry its precondition: not sent',
      );
    const r = await this.call(
      what,
      'DELETE',
      `${await this.base(signal)}/${collection}/${encodeURIComponent(id)}`,
      conditional ? { 'if-match': `revision_number=${revision}` } : {},
      signal,
    );
    if (r.status === 204 || r.status === 200) return 'deleted';
    if (r.status === 404 && isNotFound(r.body, collection)) return 'gone';
    if (r.status === 412) return 'conflict';
    throw new OpenStackApiError(what, r.status, describeBody(r.body));
  }

  /**
   * Whether a fixed IP (on the network's subnets) or a floating IP address is held by any
   * resource the token sees: before a restore asks for it.
   */
  async addressHolder(
    kind: 'fixed' | 'floating',
    address: string,
    signal?: AbortSignal,
  ): Promise<string | undefined> {
    const q =
      kind === 'fixed'
        ? `ports?fixed_ips=${encodeURIComponent(`ip_address=${address}`)}&fields=id`
        : `floatingips?floating_ip_address=${encodeURIComponent(address)}&fields=id`;
    const what = `neutron find ${kind} ${address}`;
    const r = await this.call(what, 'GET', `${await this.base(signal)}/${q}`, {}, signal);
    if (r.status !== 200) throw new OpenStackApiError(what, r.status, describeBody(r.body));
    const list = (r.body as Record<string, { id: string }[]> | undefined)?.[
      kind === 'fixed' ? 'ports' : 'floatingips'
    ];
    return Array.isArray(list) && list.length > 0 ? list[0]!.id : undefined;
  }

  /**
   * Creates a port or floating IP (with its tags set after, as the tag API does): the new
   * object, 'taken' when Neutron says its address is allocated (409), or why its policy
   * refused (403: a floating IP of a chosen address is admin-only by default).
   */
  async create<T extends { id: string }>(
    collection: 'ports' | 'floatingips',
    body: Record<string, unknown>,
    tags: readonly string[],
    signal?: AbortSignal,
  ): Promise<T | 'taken' | { forbidden: string }> {
    const one = COLLECTIONS[collection].one;
    const what = `neutron create ${COLLECTIONS[collection].noun}`;
    const r = await this.call(what, 'POST', `${await this.base(signal)}/${collection}`, {}, signal, {
      [one]: body,
    });
    if (r.status === 409) return 'taken';
    if (r.status === 403) return { forbidden: describeBody(r.body) };
    if (r.status !== 201) throw new OpenStackApiError(what, r.status, describeBody(r.body));
    const o = (r.body as Record<string, T> | undefined)?.[one];
    if (!o?.id) throw new OpenStackApiError(what, 0, `the answer is not a ${COLLECTIONS[collection].noun}`);
    if (tags.length > 0) {
      const t = await this.call(
        `neutron tag ${one} ${o.id}`,
        'PUT',
        `${await this.base(signal)}/${collection}/${encodeURIComponent(o.id)}/tags`,
        {},
        signal,
        { tags },
      );
      if (t.status !== 200)
        throw new OpenStackApiError(`neutron tag ${one} ${o.id}`, t.status, describeBody(t.body));
    }
    return o;
  }

  /**
   * Sets a port's security groups, conditionally (If-Match: revision_number=N, never sent
   * without it): 'updated', 'gone' (Neutron's own 404), or 'conflict' (412: the port changed).
   */
  async setPortSecurityGroups(
    id: string,
    groups: readonly string[],
    revision: number,
    signal?: AbortSignal,
  ): Promise<'updated' | 'gone' | 'conflict'> {
    const what = `neutron update port ${id} (security groups)`;
    if (!Number.isSafeInteger(revision) || revision < 0)
      throw new OpenStackApiError(
        what,
        0,
        `the revision ${JSON.stringify(revision)} is not a count: not sent`,
      );
    if (!(await this.supports('revision-if-match', signal)))
      throw new OpenStackApiError(
        what,
        0,
        'Neutron does not offer the revision-if-match extension, so the update cannot carry its precondition: not sent',
      );
    const r = await this.call(
      what,
      'PUT',
      `${await this.base(signal)}/ports/${encodeURIComponent(id)}`,
      { 'if-match': `revision_number=${revision}` },
      signal,
      { port: { security_groups: groups } },
    );
    if (r.status === 200) return 'updated';
    if (r.status === 404 && isNotFound(r.body, 'ports')) return 'gone';
    // 412: the port changed. A group of the list deleted since the port was read is refused
    // before If-Match is looked at (404 SecurityGroupNotFound): the list is stale, as on a 412.
    if (r.status === 412 || (r.status === 404 && isNotFound(r.body, 'security-groups'))) return 'conflict';
    throw new OpenStackApiError(what, r.status, describeBody(r.body));
  }

  deletePort(id: string, revision: number | undefined, signal?: AbortSignal) {
    return this.del('ports', id, revision, signal);
  }

  deleteFloatingIp(id: string, revision: number | undefined, signal?: AbortSignal) {
    return this.del('floatingips', id, revision, signal);
  }

  deleteSecurityGroup(id: string, revision: number | undefined, signal?: AbortSignal) {
    return this.del('security-groups', id, revision, signal);
  }
}
