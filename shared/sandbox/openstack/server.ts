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
import { describeFault, type Fault, FaultPlan, RequestLog, type RequestRecord } from '../kube/faults.ts';
import { type StoredVolume, serveCinder } from './cinder-rules.ts';
import { type FakeAppCred, type FakeUser, NOT_FOUND, type Send, type TokenInfo } from './common.ts';
import { type KeystoneState, serveIdentity } from './keystone-rules.ts';
import { createResource, listCollection } from './neutron-collections.ts';
import { deleteObject, router, tags, updateFip, updatePort } from './neutron-objects.ts';

export type { FakeAppCred, FakeUser } from './common.ts';

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
    const send = sender(res, fault, record);
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
      if (serveIdentity(this.keystone(), req, url, method, raw, send)) return;
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
      return this.neutron(req, url, method, raw, t, send, fault);
    } catch (err) {
      return send(500, { NeutronError: { type: 'InternalError', message: String(err), detail: '' } });
    }
  }

  /** A Neutron request, its token checked: extensions, routers, and ports, floating IPs and security groups. */
  private neutron(
    req: IncomingMessage,
    url: URL,
    method: string,
    raw: string,
    t: TokenInfo,
    send: Send,
    fault: Fault | undefined,
  ) {
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
    if (collection === 'routers') return router(this, method, id, sub, raw, t, send);
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
      return listCollection(this, collection, store, url, base, t, send, fault?.emptyPage === true);
    }
    if (id === undefined && method === 'POST') return createResource(this, collection, raw, t, send);
    const obj = id ? store.get(id) : undefined;
    if (!obj || (obj.project_id !== t.projectId && !t.admin)) return notFound();
    if (sub === 'tags') return tags(this, obj, method, subId, raw, send);
    if (method === 'PUT' && sub === undefined && collection === 'floatingips')
      return updateFip(this, obj as FloatingIp, raw, t, send);
    if (method === 'PUT' && sub === undefined)
      return updatePort(this, obj as Port, raw, req.headers['if-match'], send);
    if (method === 'GET') return send(200, { [key]: obj });
    if (method === 'DELETE') return deleteObject(this, collection, store, obj, req.headers['if-match'], send);
    return send(405, {
      NeutronError: { type: 'HTTPMethodNotAllowed', message: `${method} not allowed`, detail: '' },
    });
  }

  /** The view of this fake its Keystone serves. */
  private keystone(): KeystoneState {
    return {
      users: this.users,
      appCreds: this.appCreds,
      tokens: this.tokens,
      tokenTtlMs: this.tokenTtlMs,
      url: this.url,
      authUrl: this.authUrl,
      now: this.now,
    };
  }
}

/** How a request is answered: JSON, as a fault rewrites or truncates it, and recorded. */
function sender(
  res: ServerResponse,
  fault: Fault | undefined,
  record: (status: number, bytes: number, f?: string) => void,
): Send {
  return (status0, body0, headers = {}) => {
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
}
