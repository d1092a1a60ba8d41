/**
 * Octavia (load-balancer v2): the load balancers of a project, listed completely (limit,
 * marker and `loadbalancers_links`, proven page by page), one by id, and a cascading
 * DELETE. Octavia offers no precondition on a delete (no revision, no If-Match): the
 * re-check on a fresh read just before it is the last guard, and a load balancer in a
 * PENDING_* state is immutable (409), so one being changed is never deleted under it.
 *
 * Facts (Octavia 11 / Zed, octavia/api/common/pagination.py, checked on the real API in
 * test/openstack/octavia.real.test.ts): a page with at least `limit` items has a `next`
 * link whose marker is its last id; a deleted load balancer answers 404 with a
 * `faultstring` "Load Balancer <id> not found."
 */
import { OpenStackApiError } from './errors.ts';
import { describeBody, type Http } from './http.ts';
import type { KeystoneAuth } from './keystone.ts';
import { listProven } from './pages.ts';

export type LoadBalancer = {
  id: string;
  name?: string;
  description?: string;
  project_id?: string;
  provisioning_status?: string;
  operating_status?: string;
  vip_address?: string;
  vip_port_id?: string;
  provider?: string;
  tags?: string[];
  created_at?: string;
  updated_at?: string | null;
  /** Octavia lists its children by id only. */
  listeners?: { id: string }[];
  pools?: { id: string }[];
};

/** A listener, pool or member as Octavia shows it: kept whole in a tombstone. */
export type OctaviaChild = { id: string } & Record<string, unknown>;

/**
 * What a cascading DELETE takes with a load balancer: its listeners, its pools and their
 * members, each as Octavia answered (a tombstone holds them: they are the only way back).
 */
export type LoadBalancerTree = {
  listeners: OctaviaChild[];
  pools: (OctaviaChild & { members: OctaviaChild[] })[];
};

export type OctaviaDelete = 'deleted' | 'gone' | 'conflict';

/** A pool's member, with the pool and the load balancer it stands behind. */
export type Member = OctaviaChild & {
  address?: string;
  protocol_port?: number;
  project_id?: string;
  pool_id: string;
  /** The load balancer of its pool ('' for a pool that names none). */
  loadbalancer_id: string;
};

export interface OctaviaReader {
  listLoadBalancers(
    f: { project_id: string },
    signal?: AbortSignal,
  ): Promise<{ items: LoadBalancer[]; pages: number }>;
  getLoadBalancer(id: string, signal?: AbortSignal): Promise<LoadBalancer | undefined>;
  /** Its listeners, pools and members, read whole; a child gone meanwhile is an error (read again later). */
  loadBalancerTree(lb: LoadBalancer, signal?: AbortSignal): Promise<LoadBalancerTree>;
  /**
   * Every member of every pool of the project: the pools over proven pages, then each pool's
   * members over proven pages (one list a pool: Octavia has no project-wide member list).
   */
  listMembers(f: { project_id: string }, signal?: AbortSignal): Promise<{ items: Member[]; pages: number }>;
}

/** Octavia's own answer that the load balancer does not exist (not a proxy's 404). */
const isNotFound = (body: unknown) => {
  const b = body as { faultcode?: unknown; faultstring?: unknown } | undefined;
  return (
    b?.faultcode === 'Client' && typeof b.faultstring === 'string' && / not found\.?$/.test(b.faultstring)
  );
};

export class OctaviaClient implements OctaviaReader {
  private readonly auth: KeystoneAuth;
  private readonly http: Http;
  private readonly pageSize: number;

  constructor(auth: KeystoneAuth, http: Http, pageSize = 500) {
    this.auth = auth;
    this.http = http;
    this.pageSize = pageSize;
  }

  private async base(signal?: AbortSignal): Promise<string> {
    const url = await this.auth.endpoint('load-balancer', signal);
    return `${url.endsWith('/v2') ? url : `${url}/v2`}/lbaas/loadbalancers`;
  }

  private async root(signal?: AbortSignal): Promise<string> {
    const url = await this.auth.endpoint('load-balancer', signal);
    return `${url.endsWith('/v2') ? url : `${url}/v2`}/lbaas`;
  }

  private call(what: string, method: string, url: string, signal?: AbortSignal) {
    return this.auth.send(this.http, what, method, url, signal);
  }

  async listLoadBalancers(f: { project_id: string }, signal?: AbortSignal) {
    return listProven<LoadBalancer>({
      what: 'octavia list loadbalancers',
      url: await this.base(signal),
      query: new URLSearchParams({ project_id: f.project_id, limit: String(this.pageSize) }),
      key: 'loadbalancers',
      get: (what, url) => this.call(what, 'GET', url, signal),
    });
  }

  async getLoadBalancer(id: string, signal?: AbortSignal): Promise<LoadBalancer | undefined> {
    const what = `octavia get loadbalancer ${id}`;
    const r = await this.call(what, 'GET', `${await this.base(signal)}/${encodeURIComponent(id)}`, signal);
    if (r.status === 404 && isNotFound(r.body)) return undefined;
    if (r.status !== 200)
      throw new OpenStackApiError(what, r.status, describeBody(r.body) || 'not an Octavia answer');
    const lb = (r.body as { loadbalancer?: LoadBalancer } | undefined)?.loadbalancer;
    if (!lb || typeof lb !== 'object' || lb.id !== id)
      throw new OpenStackApiError(what, 0, `the answer is not load balancer ${id}`);
    return lb;
  }

  async loadBalancerTree(lb: LoadBalancer, signal?: AbortSignal): Promise<LoadBalancerTree> {
    const root = await this.root(signal);
    const one = async (what: string, path: string, key: string): Promise<OctaviaChild> => {
      const r = await this.call(what, 'GET', `${root}/${path}`, signal);
      if (r.status !== 200)
        throw new OpenStackApiError(what, r.status, describeBody(r.body) || 'not an Octavia answer');
      const o = (r.body as Record<string, unknown> | undefined)?.[key] as OctaviaChild | undefined;
      if (!o || typeof o !== 'object' || typeof o.id !== 'string')
        throw new OpenStackApiError(what, 0, `the answer is not a ${key}`);
      return o;
    };
    const listeners: OctaviaChild[] = [];
    for (const l of lb.listeners ?? [])
      listeners.push(
        await one(`octavia get listener ${l.id}`, `listeners/${encodeURIComponent(l.id)}`, 'listener'),
      );
    const pools: LoadBalancerTree['pools'] = [];
    for (const p of lb.pools ?? []) {
      const pool = await one(`octavia get pool ${p.id}`, `pools/${encodeURIComponent(p.id)}`, 'pool');
      const members = await listProven<OctaviaChild>({
        what: `octavia list members of pool ${p.id}`,
        url: `${root}/pools/${encodeURIComponent(p.id)}/members`,
        query: new URLSearchParams({ limit: String(this.pageSize) }),
        key: 'members',
        get: (what, url) => this.call(what, 'GET', url, signal),
      });
      pools.push({ ...pool, members: members.items });
    }
    return { listeners, pools };
  }

  async listMembers(f: { project_id: string }, signal?: AbortSignal) {
    const root = await this.root(signal);
    const get = (what: string, url: string) => this.call(what, 'GET', url, signal);
    const pools = await listProven<OctaviaChild & { loadbalancers?: { id: string }[] }>({
      what: 'octavia list pools',
      url: `${root}/pools`,
      query: new URLSearchParams({ project_id: f.project_id, limit: String(this.pageSize) }),
      key: 'pools',
      get,
    });
    const items: Member[] = [];
    let pages = pools.pages;
    for (const p of pools.items) {
      const members = await listProven<OctaviaChild>({
        what: `octavia list members of pool ${p.id}`,
        url: `${root}/pools/${encodeURIComponent(p.id)}/members`,
        query: new URLSearchParams({ limit: String(this.pageSize) }),
        key: 'members',
        get,
      });
      pages += members.pages;
      const loadbalancer_id = p.loadbalancers?.[0]?.id ?? '';
      for (const m of members.items) items.push({ ...m, pool_id: p.id, loadbalancer_id });
    }
    return { items, pages };
  }

  /** DELETE with cascade (its listeners, pools and members go with it); 409: it is immutable now. */
  async deleteLoadBalancer(id: string, signal?: AbortSignal): Promise<OctaviaDelete> {
    const what = `octavia delete loadbalancer ${id}`;
    const r = await this.call(
      what,
      'DELETE',
      `${await this.base(signal)}/${encodeURIComponent(id)}?cascade=true`,
      signal,
    );
    if (r.status === 204 || r.status === 202) return 'deleted';
    if (r.status === 404 && isNotFound(r.body)) return 'gone';
    if (r.status === 409) return 'conflict';
    throw new OpenStackApiError(what, r.status, describeBody(r.body));
  }
}
