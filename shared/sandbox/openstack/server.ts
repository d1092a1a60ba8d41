/**
 * FakeOpenStack: a loopback Keystone v3 + Neutron modelled on their API
 * references, for tests and the sandbox. It is a fake: one region, one
 * project per credential, ports and floating IPs only.
 * Models: token issue (password, application credential) with catalog and
 * expiry, tokens checked on every Neutron call (401), ports and floating IPs
 * with tags and project scoping, revision_number bumped on every change,
 * If-Match (412), a configurable extensions list, pagination by limit/marker
 * with links (or none), fault injection and a request log.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FloatingIp, Port, SecurityGroup } from '../../openstack/neutron.ts';
import { describeFault, FaultPlan, RequestLog, type RequestRecord } from '../kube/faults.ts';
import { type StoredVolume, serveCinder } from './cinder-rules.ts';
import { type Link, pageLinks, parseIfMatch, SERVICE_OWNERS } from './neutron-rules.ts';

type Send = (status: number, body: unknown, headers?: Record<string, string>) => void;

/** Answers 400 (a malformed If-Match) or 412 (another revision) as Neutron does; true when it answered. */
function refusedByIfMatch(im: string | undefined, revision: number | undefined, send: Send): boolean {
  const cond = parseIfMatch(im);
  if (cond.kind === 'bad') {
    send(400, { NeutronError: { type: 'BadRequest', message: cond.message, detail: '' } });
    return true;
  }
  if (cond.kind === 'revision' && cond.revision !== revision) {
    send(412, {
      NeutronError: {
        type: 'RevisionNumberConstraintFailed',
        message: `Constrained to ${im}, but current revision is ${revision}`,
        detail: '',
      },
    });
    return true;
  }
  return false;
}
type TokenInfo = { projectId: string; expiresAt: number; admin: boolean };
const NOT_FOUND = {
  NeutronError: { type: 'HTTPNotFound', message: 'The resource could not be found.', detail: '' },
};

export type FakeUser = {
  name: string;
  domain: string;
  password: string;
  projectId: string;
  projectName: string;
  /** The admin role: its tokens see every project's resources (`project_id` filters them). */
  admin?: boolean;
};
export type FakeAppCred = { id: string; secret: string; projectId: string };

export type FakeOpenStackOptions = Readonly<{
  tokenTtlMs?: number;
  extensions?: readonly string[];
  /** false: the deployment has pagination disabled (no links, everything at once). */
  pagination?: boolean;
  now?: () => number;
}>;

export class FakeOpenStack {
  readonly faults = new FaultPlan();
  private readonly log = new RequestLog();
  /** Every request so far, oldest first. */
  get requests(): RequestRecord[] {
    return this.log.entries;
  }
  readonly users: FakeUser[] = [
    {
      name: 'twopass',
      domain: 'Default',
      password: 'fake-password',
      projectId: 'project-a',
      projectName: 'k8s-a',
    },
    {
      name: 'admin',
      domain: 'Default',
      password: 'admin-pw',
      projectId: 'admin-project',
      projectName: 'admin',
      admin: true,
    },
  ];
  readonly appCreds: FakeAppCred[] = [
    { id: 'app-cred-1', secret: 'fake-app-secret', projectId: 'project-a' },
  ];
  readonly ports = new Map<string, Port>();
  /** The If-Match header of every DELETE of a port or floating IP, in order (undefined: none sent). */
  readonly deleteIfMatch: (string | undefined)[] = [];
  readonly fips = new Map<string, FloatingIp>();
  readonly securityGroups = new Map<string, SecurityGroup>();
  /** Cinder's volumes (see cinder-rules.ts). */
  readonly volumes = new Map<string, StoredVolume>();
  readonly tokens = new Map<string, TokenInfo>();
  /** Routers: only what their interfaces do to a port (its device_owner). */
  readonly routers = new Map<string, { id: string; project_id: string; name: string; ports: string[] }>();
  extensions: string[];
  pagination: boolean;
  tokenTtlMs: number;
  private readonly now: () => number;
  private readonly server: Server;
  url = '';

  constructor(opts: FakeOpenStackOptions = {}) {
    this.extensions = [
      ...(opts.extensions ?? ['standard-attr-revisions', 'revision-if-match', 'standard-attr-tag', 'router']),
    ];
    this.pagination = opts.pagination ?? true;
    this.tokenTtlMs = opts.tokenTtlMs ?? 3_600_000;
    this.now = opts.now ?? Date.now;
    this.server = createServer((req, res) => void this.handle(req, res));
  }

  async start(): Promise<string> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', () => r()));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this.url;
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }

  get authUrl(): string {
    return `${this.url}/identity/v3`;
  }

  /** A clouds.yaml for this fake (password or application credential). */
  cloudsYaml(kind: 'password' | 'appcred' | 'admin' = 'appcred', name = 'fake'): string {
    const auth =
      kind === 'admin'
        ? `      auth_url: ${this.authUrl}\n      username: admin\n      password: admin-pw\n      user_domain_name: Default\n      project_name: admin\n      project_domain_name: Default\n`
        : kind === 'password'
          ? `      auth_url: ${this.authUrl}\n      username: twopass\n      password: fake-password\n      user_domain_name: Default\n      project_name: k8s-a\n      project_domain_name: Default\n`
          : `      auth_url: ${this.authUrl}\n      application_credential_id: app-cred-1\n      application_credential_secret: fake-app-secret\n`;
    return `clouds:\n  ${name}:\n${kind === 'appcred' ? '    auth_type: v3applicationcredential\n' : ''}    region_name: RegionOne\n    interface: public\n    auth:\n${auth}`;
  }

  /** The project's security group `default`, made on first need as Neutron does. */
  defaultGroup(projectId: string): { id: string } {
    for (const g of this.securityGroups.values())
      if (g.project_id === projectId && g.name === 'default') return g;
    return this.addSecurityGroup({
      project_id: projectId,
      name: 'default',
      description: 'Default security group',
    });
  }

  addPort(p: Partial<Port> & { id?: string }): Port {
    const port: Port = {
      id: p.id ?? randomUUID(),
      project_id: 'project-a',
      tags: [],
      device_id: '',
      device_owner: '',
      fixed_ips: [],
      // as Neutron's: every port is on a network
      network_id: 'net-1',
      revision_number: 1,
      status: 'DOWN',
      created_at: new Date(this.now()).toISOString(),
      ...p,
    };
    port.tenant_id = port.project_id!;
    this.ports.set(port.id, port);
    return port;
  }

  addFip(f: Partial<FloatingIp> & { id?: string }): FloatingIp {
    const fip: FloatingIp = {
      id: f.id ?? randomUUID(),
      project_id: 'project-a',
      tags: [],
      port_id: null,
      fixed_ip_address: null,
      // as Neutron's: every floating IP is of an external network
      floating_network_id: 'public-net',
      // a floating IP starts at revision 0 (a port at 1), as Neutron's are
      revision_number: 0,
      created_at: new Date(this.now()).toISOString(),
      ...f,
    };
    this.fips.set(fip.id, fip);
    return fip;
  }

  addVolume(v: Partial<StoredVolume> & { id?: string }): StoredVolume {
    const at = new Date(this.now()).toISOString();
    const volume: StoredVolume = {
      id: v.id ?? randomUUID(),
      project_id: 'project-a',
      name: null,
      description: null,
      status: 'available',
      size: 1,
      metadata: {},
      attachments: [],
      created_at: at,
      updated_at: at,
      ...v,
    };
    this.volumes.set(volume.id, volume);
    return volume;
  }

  addSecurityGroup(g: Partial<SecurityGroup> & { id?: string }): SecurityGroup {
    const group: SecurityGroup = {
      id: g.id ?? randomUUID(),
      project_id: 'project-a',
      tags: [],
      name: '',
      description: '',
      revision_number: 1,
      created_at: new Date(this.now()).toISOString(),
      ...g,
    };
    this.securityGroups.set(group.id, group);
    return group;
  }

  /** Any change bumps revision_number, as Neutron does. */
  update<T extends Port | FloatingIp>(obj: T, change: Partial<T>): T {
    Object.assign(obj, change);
    obj.revision_number = (obj.revision_number ?? 0) + 1;
    return obj;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://x');
    const method = req.method ?? 'GET';
    let raw = '';
    for await (const c of req) raw += c;
    const fault = this.faults.match(method, url.pathname + url.search);
    const record = (status: number, bytes: number, f?: string) =>
      this.log.record(method, url, status, bytes, f);
    const send = (status0: number, body0: unknown, headers: Record<string, string> = {}) => {
      const [status, body] = fault?.rewrite ? fault.rewrite(status0, body0) : [status0, body0];
      const text = body === undefined ? '' : typeof body === 'string' ? body : JSON.stringify(body);
      if (fault?.truncate && text) {
        res.writeHead(status, {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(text),
          ...headers,
        });
        res.write(text.slice(0, Math.floor(text.length / 2)));
        record(status, text.length / 2, 'truncated');
        res.socket?.destroy();
        return;
      }
      res.writeHead(status, {
        'content-type': 'application/json',
        ...(text ? { 'content-length': String(Buffer.byteLength(text)) } : {}),
        ...headers,
      });
      res.end(text);
      record(status, text.length, fault ? describeFault(fault) : undefined);
    };
    if (fault?.delayMs) await new Promise((r) => setTimeout(r, fault.delayMs));
    if (fault?.reset) {
      record(0, 0, 'reset');
      req.socket.destroy();
      return;
    }
    if (fault?.status !== undefined) {
      send(
        fault.status,
        { NeutronError: { type: 'Injected', message: `injected fault ${fault.status}`, detail: '' } },
        fault.retryAfterSeconds !== undefined ? { 'retry-after': String(fault.retryAfterSeconds) } : {},
      );
      return;
    }
    try {
      if (url.pathname === '/identity/v3/auth/tokens' && method === 'POST') return this.issue(raw, send);
      if (url.pathname === '/identity/v3/auth/tokens' && method === 'DELETE') {
        // revocation: X-Auth-Token authenticates, X-Subject-Token is revoked (a token may revoke itself)
        const by = req.headers['x-auth-token'];
        const subject = req.headers['x-subject-token'];
        if (typeof by !== 'string' || !this.tokens.has(by))
          return send(401, {
            error: {
              code: 401,
              title: 'Unauthorized',
              message: 'The request you have made requires authentication.',
            },
          });
        if (typeof subject !== 'string' || !this.tokens.delete(subject))
          return send(404, { error: { code: 404, title: 'Not Found', message: 'Could not find token.' } });
        return send(204, undefined);
      }
      const project = /^\/identity\/v3\/projects\/([^/]+)$/.exec(url.pathname);
      if (project && method === 'GET') {
        // a project is shown to its own members and to an admin
        const tk = req.headers['x-auth-token'];
        const by = typeof tk === 'string' ? this.tokens.get(tk) : undefined;
        if (!by)
          return send(401, {
            error: { code: 401, message: 'The request you have made requires authentication.' },
          });
        const id = decodeURIComponent(project[1]!);
        const known =
          this.users.some((u) => u.projectId === id) || this.appCreds.some((c) => c.projectId === id);
        if (!known) return send(404, { error: { code: 404, message: `Could not find project: ${id}.` } });
        if (!by.admin && by.projectId !== id)
          return send(403, {
            error: { code: 403, message: 'You are not authorized to perform the requested action.' },
          });
        return send(200, { project: { id, name: id, domain_id: 'default' } });
      }
      const cinder = url.pathname.startsWith('/volume/v3/');
      if (!url.pathname.startsWith('/network/v2.0/') && !cinder)
        return send(404, { error: { message: 'not found' } });
      const token = req.headers['x-auth-token'];
      const t = typeof token === 'string' ? this.tokens.get(token) : undefined;
      if (!t || this.now() >= t.expiresAt)
        return send(401, {
          error: {
            code: 401,
            title: 'Unauthorized',
            message: 'The request you have made requires authentication.',
          },
        });
      if (cinder)
        return serveCinder(
          this.volumes,
          url.pathname,
          url,
          {
            proto: String(req.headers['x-forwarded-proto'] ?? 'http'),
            host: req.headers.host ?? 'localhost',
          },
          t,
          method,
          send,
        );
      const path = url.pathname.slice('/network/v2.0/'.length).replace(/\/$/, '');
      if (path === 'extensions' && method === 'GET')
        return send(200, {
          extensions: this.extensions.map((alias) => ({
            alias,
            name: alias,
            description: '',
            updated: '2026-01-01T00:00:00Z',
          })),
        });
      const [collection, id, sub, subId] = path.split('/') as [
        string,
        string | undefined,
        string | undefined,
        string | undefined,
      ];
      if (collection === 'routers') return this.router(method, id, sub, raw, t, send);
      const kinds = {
        ports: { store: this.ports, key: 'port', type: 'PortNotFound', noun: 'Port' },
        floatingips: { store: this.fips, key: 'floatingip', type: 'FloatingIPNotFound', noun: 'Floating IP' },
        'security-groups': {
          store: this.securityGroups,
          key: 'security_group',
          type: 'SecurityGroupNotFound',
          noun: 'Security group',
        },
      } as const;
      if (!Object.hasOwn(kinds, collection)) return send(404, NOT_FOUND);
      const k = kinds[collection as keyof typeof kinds];
      const store = k.store as Map<string, Port | FloatingIp | SecurityGroup>;
      const key = k.key;
      const notFound = () =>
        send(404, {
          NeutronError: {
            type: k.type,
            message: `${k.noun} ${id} could not be found.`,
            detail: '',
          },
        });
      if (id === undefined && method === 'GET') {
        const proto = req.headers['x-forwarded-proto'];
        const base = {
          proto: typeof proto === 'string' ? proto : 'http',
          host: req.headers.host ?? new URL(this.url).host,
          path: url.pathname,
        };
        return this.list(collection, store, url, base, t, send, fault?.emptyPage === true);
      }
      if (id === undefined && method === 'POST') return this.create(collection, raw, t, send);
      const obj = id ? store.get(id) : undefined;
      if (!obj || (obj.project_id !== t.projectId && !t.admin)) return notFound();
      if (sub === 'tags') return this.tags(obj, method, subId, raw, send);
      if (method === 'PUT' && sub === undefined && collection === 'floatingips')
        return this.updateFip(obj as FloatingIp, raw, t, send);
      if (method === 'PUT' && sub === undefined) {
        const p =
          (JSON.parse(raw || '{}') as { port?: Partial<Port> & { security_groups?: unknown } }).port ?? {};
        // Neutron looks the groups up before If-Match: one that does not exist is a 404
        const missing = Array.isArray(p.security_groups)
          ? (p.security_groups as unknown[]).find((g) => typeof g !== 'string' || !this.securityGroups.has(g))
          : undefined;
        if (missing !== undefined)
          return send(404, {
            NeutronError: {
              type: 'SecurityGroupNotFound',
              message: `Security group ${String(missing)} does not exist`,
              detail: '',
            },
          });
        // an update may be conditional too (revision-if-match applies to every write)
        if (refusedByIfMatch(req.headers['if-match'], obj.revision_number, send)) return;
        // the fields a port update may change here; the reply's revision is the one the write made
        const change: Partial<Port> & { security_groups?: string[] } = {};
        for (const k of ['name', 'description', 'device_id', 'device_owner'] as const)
          if (typeof p[k] === 'string') change[k] = p[k];
        if (Array.isArray(p.security_groups) && p.security_groups.every((g) => typeof g === 'string'))
          change.security_groups = [...new Set(p.security_groups as string[])];
        this.update(obj as Port, change);
        return send(200, { port: obj });
      }
      if (method === 'GET') return send(200, { [key]: obj });
      if (method === 'DELETE') {
        const im = req.headers['if-match'];
        this.deleteIfMatch.push(im);
        if (im !== undefined && !this.extensions.includes('revision-if-match'))
          return send(400, {
            NeutronError: { type: 'HTTPBadRequest', message: 'If-Match is not supported', detail: '' },
          });
        if (refusedByIfMatch(im, obj.revision_number, send)) return;
        if (
          collection === 'security-groups' &&
          [...this.ports.values()].some((p) =>
            (p as { security_groups?: string[] }).security_groups?.includes(obj.id),
          )
        )
          return send(409, {
            NeutronError: {
              type: 'SecurityGroupInUse',
              message: `Security Group ${obj.id} in use.`,
              detail: '',
            },
          });
        const owner = collection === 'ports' ? (obj as Port).device_owner : undefined;
        if (owner && SERVICE_OWNERS.includes(owner))
          return send(409, {
            NeutronError: {
              type: 'ServicePortInUse',
              message: `Port ${obj.id} cannot be deleted directly via the port API: has device owner ${owner}.`,
              detail: '',
            },
          });
        store.delete(obj.id);
        if (collection === 'ports')
          for (const f of this.fips.values())
            if (f.port_id === obj.id) this.update(f, { port_id: null, fixed_ip_address: null });
        return send(204, undefined);
      }
      return send(405, {
        NeutronError: { type: 'HTTPMethodNotAllowed', message: `${method} not allowed`, detail: '' },
      });
    } catch (err) {
      return send(500, { NeutronError: { type: 'InternalError', message: String(err), detail: '' } });
    }
  }

  /** standard-attr-tag: PUT replaces all tags, PUT /tags/{tag} adds one (201, body null), DELETE removes one. */
  private tags(obj: Port | FloatingIp, method: string, subId: string | undefined, raw: string, send: Send) {
    // an encoded slash never reaches the tag route: the real server answers 404
    if (subId !== undefined && /%2f/i.test(subId)) return send(404, NOT_FOUND);
    if (method === 'PUT' && subId === undefined) {
      const tags = (JSON.parse(raw || '{}') as { tags?: unknown }).tags;
      if (!Array.isArray(tags) || !tags.every((x) => typeof x === 'string'))
        return send(400, { NeutronError: { type: 'HTTPBadRequest', message: 'Invalid tags', detail: '' } });
      this.update(obj, { tags: [...new Set(tags as string[])].sort() });
      return send(200, { tags: obj.tags });
    }
    if (method === 'PUT' && subId !== undefined) {
      const tag = decodeURIComponent(subId);
      if (!obj.tags?.includes(tag)) this.update(obj, { tags: [...(obj.tags ?? []), tag].sort() });
      return send(201, null);
    }
    if (method === 'DELETE' && subId !== undefined) {
      const tag = decodeURIComponent(subId);
      if (!obj.tags?.includes(tag))
        return send(404, {
          NeutronError: { type: 'TagNotFound', message: `Tag ${tag} could not be found.`, detail: '' },
        });
      this.update(obj, { tags: (obj.tags ?? []).filter((x) => x !== tag) });
      return send(204, undefined);
    }
    return send(405, {
      NeutronError: { type: 'HTTPMethodNotAllowed', message: `${method} not allowed`, detail: '' },
    });
  }

  /** A floating IP update: the port association changes only when `port_id` is in the body. */
  private updateFip(fip: FloatingIp, raw: string, t: TokenInfo, send: Send) {
    const f =
      (JSON.parse(raw || '{}') as { floatingip?: { port_id?: string | null; description?: string } })
        .floatingip ?? {};
    const change: Partial<FloatingIp> = {};
    if ('port_id' in f) {
      const port = f.port_id ? this.ports.get(f.port_id) : undefined;
      if (f.port_id && (!port || (port.project_id !== t.projectId && !t.admin)))
        return send(404, {
          NeutronError: {
            type: 'PortNotFound',
            message: `Port ${f.port_id} could not be found.`,
            detail: '',
          },
        });
      change.port_id = port?.id ?? null;
      change.fixed_ip_address = port?.fixed_ips?.[0]?.ip_address ?? null;
    }
    if (typeof f.description === 'string') change.description = f.description;
    this.update(fip, change);
    return send(200, { floatingip: fip });
  }

  /** Routers, as far as their interfaces make a port the router's (device_owner network:router_interface). */
  private router(
    method: string,
    id: string | undefined,
    action: string | undefined,
    raw: string,
    t: TokenInfo,
    send: Send,
  ) {
    const body = JSON.parse(raw || '{}') as { router?: { name?: string }; port_id?: string };
    if (id === undefined && method === 'POST') {
      const r = { id: randomUUID(), project_id: t.projectId, name: body.router?.name ?? '', ports: [] };
      this.routers.set(r.id, r);
      return send(201, {
        router: { id: r.id, name: r.name, project_id: r.project_id, tenant_id: r.project_id },
      });
    }
    const r = id ? this.routers.get(id) : undefined;
    if (!r || (r.project_id !== t.projectId && !t.admin))
      return send(404, {
        NeutronError: { type: 'RouterNotFound', message: `Router ${id} could not be found.`, detail: '' },
      });
    if (method === 'PUT' && (action === 'add_router_interface' || action === 'remove_router_interface')) {
      const port = body.port_id ? this.ports.get(body.port_id) : undefined;
      if (!port)
        return send(404, {
          NeutronError: {
            type: 'PortNotFound',
            message: `Port ${body.port_id} could not be found.`,
            detail: '',
          },
        });
      if (action === 'add_router_interface') {
        this.update(port, { device_owner: 'network:router_interface', device_id: r.id });
        r.ports.push(port.id);
      } else {
        // removing the interface deletes the port, as Neutron does for a port it made the router's
        r.ports = r.ports.filter((p) => p !== port.id);
        this.ports.delete(port.id);
      }
      return send(200, { id: r.id, port_id: port.id, tenant_id: r.project_id, project_id: r.project_id });
    }
    if (method === 'DELETE' && action === undefined) {
      if (r.ports.length > 0)
        return send(409, {
          NeutronError: { type: 'RouterInUse', message: `Router ${r.id} still has ports`, detail: '' },
        });
      this.routers.delete(r.id);
      return send(204, undefined);
    }
    if (method === 'GET' && action === undefined) return send(200, { router: { id: r.id, name: r.name } });
    return send(405, {
      NeutronError: { type: 'HTTPMethodNotAllowed', message: `${method} not allowed`, detail: '' },
    });
  }

  private issue(raw: string, send: (s: number, b: unknown, h?: Record<string, string>) => void): void {
    let body: {
      auth?: {
        identity?: {
          methods?: string[];
          password?: { user?: { name?: string; password?: string; domain?: { name?: string } } };
          application_credential?: { id?: string; secret?: string };
        };
        scope?: { project?: { name?: string; id?: string } };
      };
    };
    try {
      body = JSON.parse(raw);
    } catch {
      send(400, { error: { code: 400, message: 'Malformed request body' } });
      return;
    }
    const id = body.auth?.identity;
    let projectId: string | undefined;
    let admin = false;
    if (id?.methods?.includes('application_credential')) {
      if (body.auth?.scope) {
        send(401, { error: { code: 401, message: 'Application credentials cannot request a scope.' } });
        return;
      }
      const c = this.appCreds.find(
        (a) => a.id === id.application_credential?.id && a.secret === id.application_credential?.secret,
      );
      projectId = c?.projectId;
    } else if (id?.methods?.includes('password')) {
      const u = id.password?.user;
      const user = this.users.find(
        (x) => x.name === u?.name && x.password === u?.password && x.domain === u?.domain?.name,
      );
      const p = body.auth?.scope?.project;
      if (user && (p?.id === user.projectId || p?.name === user.projectName)) {
        projectId = user.projectId;
        admin = user.admin === true;
      }
    }
    if (!projectId) {
      send(401, {
        error: {
          code: 401,
          title: 'Unauthorized',
          message: 'The request you have made requires authentication.',
        },
      });
      return;
    }
    const token = `fake-token-${randomUUID()}`;
    const expiresAt = this.now() + this.tokenTtlMs;
    this.tokens.set(token, { projectId, expiresAt, admin });
    const ep = (iface: string) => ({
      id: randomUUID(),
      interface: iface,
      region_id: 'RegionOne',
      region: 'RegionOne',
      url: `${this.url}/network`,
    });
    send(
      201,
      {
        token: {
          methods: id?.methods ?? [],
          expires_at: new Date(expiresAt).toISOString(),
          issued_at: new Date(this.now()).toISOString(),
          project: {
            id: projectId,
            name: admin ? 'admin' : 'k8s-a',
            domain: { id: 'default', name: 'Default' },
          },
          roles: admin ? [{ id: 'role-admin', name: 'admin' }] : [{ id: 'role-member', name: 'member' }],
          catalog: [
            {
              type: 'identity',
              name: 'keystone',
              endpoints: [
                { id: randomUUID(), interface: 'public', region_id: 'RegionOne', url: this.authUrl },
              ],
            },
            { type: 'network', name: 'neutron', endpoints: [ep('public'), ep('internal')] },
            {
              type: 'block-storage',
              name: 'cinderv3',
              endpoints: ['public', 'internal'].map((iface) => ({
                ...ep(iface),
                url: `${this.url}/volume/v3/${projectId}`,
              })),
            },
          ],
        },
      },
      { 'x-subject-token': token },
    );
  }

  private create(collection: string, raw: string, t: TokenInfo, send: (s: number, b: unknown) => void): void {
    const asked = (JSON.parse(raw || '{}') as Record<string, { project_id?: string } | undefined>)[
      collection === 'security-groups' ? 'security_group' : collection === 'ports' ? 'port' : 'floatingip'
    ]?.project_id;
    // an admin may make a resource in another project (project_id in the body), as Neutron allows
    const projectId = t.admin && asked ? asked : t.projectId;
    const body = JSON.parse(raw || '{}') as {
      security_group?: { name?: string; description?: string };
      port?: Partial<Port> & { network_id?: string; security_groups?: string[] };
      floatingip?: {
        floating_network_id?: string;
        port_id?: string;
        floating_ip_address?: string;
        description?: string;
      };
    };
    if (collection === 'security-groups') {
      const g = body.security_group ?? {};
      send(201, {
        security_group: this.addSecurityGroup({
          project_id: projectId,
          name: g.name ?? '',
          description: g.description ?? '',
        }),
      });
      return;
    }
    if (collection === 'ports') {
      const p = body.port ?? {};
      const taken = (p.fixed_ips ?? []).find((f) =>
        [...this.ports.values()].some((o) => o.fixed_ips?.some((x) => x.ip_address === f.ip_address)),
      );
      if (taken) {
        send(409, {
          NeutronError: {
            type: 'IpAddressAlreadyAllocated',
            message: `IP address ${taken.ip_address} already allocated in subnet ${taken.subnet_id ?? 'subnet-1'}`,
            detail: '',
          },
        });
        return;
      }
      // As ML2's port_security extension driver: security on by default, and then the
      // project's default group unless groups are given; off, no group may be given.
      const secured = p.port_security_enabled ?? true;
      if (!secured && p.security_groups?.length) {
        send(400, {
          NeutronError: {
            type: 'PortSecurityAndIPRequiredForSecurityGroups',
            message:
              'Port security must be enabled and port must have an IP address in order to use security groups.',
            detail: '',
          },
        });
        return;
      }
      const n = this.ports.size + 10;
      const port = this.addPort({
        project_id: projectId,
        name: p.name ?? '',
        description: p.description ?? '',
        device_id: p.device_id ?? '',
        device_owner: p.device_owner ?? '',
        fixed_ips: p.fixed_ips ?? [{ ip_address: `10.1.${Math.floor(n / 250)}.${(n % 250) + 2}` }],
        port_security_enabled: secured,
        security_groups: p.security_groups ?? (secured ? [this.defaultGroup(projectId).id] : []),
      });
      send(201, { port });
      return;
    }
    const f = body.floatingip ?? {};
    const port = f.port_id ? this.ports.get(f.port_id) : undefined;
    const n = this.fips.size + 10;
    // a floating IP of a chosen address is admin-only (Neutron's create_floatingip:floating_ip_address)
    if (f.floating_ip_address && !t.admin) {
      send(403, {
        NeutronError: {
          type: 'PolicyNotAuthorized',
          message:
            '(rule:create_floatingip and rule:create_floatingip:floating_ip_address) is disallowed by policy',
          detail: '',
        },
      });
      return;
    }
    if (
      f.floating_ip_address &&
      [...this.fips.values()].some((x) => x.floating_ip_address === f.floating_ip_address)
    ) {
      send(409, {
        NeutronError: {
          type: 'IpAddressAlreadyAllocated',
          message: `IP address ${f.floating_ip_address} already allocated in subnet public-subnet`,
          detail: '',
        },
      });
      return;
    }
    const fip = this.addFip({
      project_id: projectId,
      ...(f.description !== undefined ? { description: f.description } : {}),
      floating_ip_address: f.floating_ip_address ?? `198.18.${Math.floor(n / 250)}.${(n % 250) + 2}`,
      port_id: port?.id ?? null,
      fixed_ip_address: port?.fixed_ips?.[0]?.ip_address ?? null,
    });
    send(201, { floatingip: fip });
  }

  private list(
    collection: string,
    store: Map<string, Port | FloatingIp | SecurityGroup>,
    url: URL,
    base: { proto: string; host: string; path: string },
    t: TokenInfo,
    send: Send,
    empty: boolean,
  ): void {
    const listKey = collection === 'security-groups' ? 'security_groups' : collection;
    const q = url.searchParams;
    const tags = q.get('tags')?.split(',').filter(Boolean) ?? [];
    const tagsAny = q.get('tags-any')?.split(',').filter(Boolean) ?? [];
    const notTags = q.get('not-tags')?.split(',').filter(Boolean) ?? [];
    const project = q.get('project_id');
    const deviceId = q.get('device_id');
    const fields = q.getAll('fields');
    let items = [...store.values()]
      // a member token sees its project; an admin token every project (project_id narrows it)
      .filter(
        (o) => (t.admin || o.project_id === t.projectId) && (project === null || o.project_id === project),
      )
      .filter(
        (o) =>
          tags.every((x) => o.tags?.includes(x)) &&
          (tagsAny.length === 0 || tagsAny.some((x) => o.tags?.includes(x))) &&
          !notTags.some((x) => o.tags?.includes(x)),
      )
      .filter((o) => deviceId === null || (o as Port).device_id === deviceId)
      // fixed_ips=ip_address=X (ports), floating_ip_address=X (floating IPs), as Neutron filters
      .filter((o) => {
        const want = q
          .getAll('fixed_ips')
          .map((f) => /^ip_address=(.+)$/.exec(f)?.[1])
          .filter(Boolean);
        return want.every((a) => (o as Port).fixed_ips?.some((x) => x.ip_address === a));
      })
      .filter((o) => {
        const want = q.get('floating_ip_address');
        return want === null || (o as FloatingIp).floating_ip_address === want;
      })
      .sort((a, b) => (a.id < b.id ? -1 : 1));
    const limit = Number(q.get('limit') ?? '0');
    const marker = q.get('marker');
    if (this.pagination && limit > 0 && empty && items.some((o) => !marker || o.id > marker)) {
      // an empty page that keeps its place: the next link repeats the same marker
      send(200, {
        [collection]: [],
        [`${listKey}_links`]: [{ rel: 'next', href: `${base.proto}://${base.host}${base.path}?${q}` }],
      });
      return;
    }
    let links: Link[] | undefined;
    if (this.pagination && limit > 0) {
      if (marker) items = items.filter((o) => o.id > marker);
      items = items.slice(0, limit);
      links = pageLinks(base, q, items, limit);
    }
    const shaped = fields.length
      ? items.map((o) => Object.fromEntries(Object.entries(o).filter(([k]) => fields.includes(k))))
      : items;
    send(200, { [listKey]: shaped, ...(links ? { [`${listKey}_links`]: links } : {}) });
  }
}
