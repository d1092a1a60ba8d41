/**
 * Keystone v3 token auth (password with project scope, or application
 * credential). The token is cached and renewed before `expires_at`; a 401
 * mid-run invalidates it so the caller re-authenticates once.
 */
import type { CloudConfig } from './config.ts';
import { OpenStackApiError, OpenStackConfigError } from './errors.ts';
import { describeBody, type Http } from './http.ts';

type CatalogEntry = {
  type: string;
  endpoints: { interface: string; region_id?: string; region?: string; url: string }[];
};

export class KeystoneAuth {
  private readonly cloud: CloudConfig;
  private readonly http: Http;
  private readonly clock: () => number;
  private token:
    | { value: string; expiresAt: number; catalog: CatalogEntry[]; projectId?: string; roles: string[] }
    | undefined;
  /** Renew this long before expiry. */
  private readonly marginMs: number;
  /** The identity v3 URL, found by version discovery when auth_url names the root. */
  private v3: string | undefined;
  issued = 0;

  constructor(cloud: CloudConfig, http: Http, clock: () => number, marginMs = 60_000) {
    this.cloud = cloud;
    this.http = http;
    this.clock = clock;
    this.marginMs = marginMs;
  }

  /** A call with the token; a 401 re-authenticates once (the token was revoked or expired early). */
  async send(http: Http, what: string, method: string, url: string, signal?: AbortSignal) {
    for (let attempt = 0; ; attempt++) {
      const r = await http.send(
        what,
        method,
        url,
        { 'x-auth-token': await this.get(signal) },
        undefined,
        signal,
      );
      if (r.status !== 401 || attempt > 0) return r;
      this.invalidate();
    }
  }

  /** The role names of the current token (issued first when there is none). */
  async roles(signal?: AbortSignal): Promise<readonly string[]> {
    await this.get(signal);
    return this.token!.roles;
  }

  invalidate(): void {
    this.token = undefined;
  }

  async get(signal?: AbortSignal): Promise<string> {
    if (!this.token || this.clock() >= this.token.expiresAt - this.marginMs) await this.issue(signal);
    return this.token!.value;
  }

  /**
   * Whether project `id` is the token's, or visible to it (GET /v3/projects/{id}): a wrong
   * project ID would otherwise list nothing, and a run would see nothing to clean.
   */
  /** The project the token is scoped to. */
  async scopedProject(signal?: AbortSignal): Promise<string | undefined> {
    await this.get(signal);
    return this.token?.projectId;
  }

  async checkProject(id: string, signal?: AbortSignal): Promise<void> {
    const token = await this.get(signal);
    if (this.token?.projectId === id) return;
    const r = await this.http.send(
      'keystone get project',
      'GET',
      `${await this.identityUrl(signal)}/projects/${encodeURIComponent(id)}`,
      { 'x-auth-token': token },
      undefined,
      signal,
    );
    if (r.status === 200) return;
    if (r.status === 404 || r.status === 403 || r.status === 401)
      throw new OpenStackConfigError(
        `project ${id} is not the project of these credentials (${this.token?.projectId ?? 'unscoped'}) and is not visible to them (${r.status}): check settings.projectId`,
      );
    throw new OpenStackApiError('keystone get project', r.status, describeBody(r.body));
  }

  async endpoint(type: string, signal?: AbortSignal): Promise<string> {
    await this.get(signal);
    const entry = this.token!.catalog.find((e) => e.type === type);
    const eps = (entry?.endpoints ?? []).filter(
      (e) =>
        e.interface === this.cloud.interface &&
        (!this.cloud.regionName || (e.region_id ?? e.region) === this.cloud.regionName),
    );
    if (eps.length === 0) {
      const regions = [
        ...new Set((entry?.endpoints ?? []).map((e) => e.region_id ?? e.region).filter(Boolean)),
      ];
      throw new OpenStackConfigError(
        `keystone catalog: no ${type} endpoint for interface ${this.cloud.interface}${this.cloud.regionName ? ` in region ${this.cloud.regionName}` : ''}${regions.length ? ` (the catalog has ${regions.join(', ')})` : ''}: check region_name and interface`,
      );
    }
    return eps[0]!.url.replace(/\/+$/, '');
  }

  private body(): unknown {
    const c = this.cloud;
    if (c.authType === 'v3applicationcredential') {
      const cred = c.applicationCredentialId
        ? { id: c.applicationCredentialId, secret: c.applicationCredentialSecret }
        : {
            name: c.applicationCredentialName,
            secret: c.applicationCredentialSecret,
            user: c.userId
              ? { id: c.userId }
              : {
                  name: c.username,
                  domain: c.userDomainId ? { id: c.userDomainId } : { name: c.userDomainName },
                },
          };
      return { auth: { identity: { methods: ['application_credential'], application_credential: cred } } };
    }
    const user = c.userId
      ? { id: c.userId, password: c.password }
      : {
          name: c.username,
          password: c.password,
          domain: c.userDomainId ? { id: c.userDomainId } : { name: c.userDomainName },
        };
    const project = c.projectId
      ? { id: c.projectId }
      : {
          name: c.projectName,
          domain: c.projectDomainId ? { id: c.projectDomainId } : { name: c.projectDomainName },
        };
    return { auth: { identity: { methods: ['password'], password: { user } }, scope: { project } } };
  }

  /**
   * The identity v3 URL: auth_url itself when it ends in /v3, else what the root's version
   * document names for v3 (Keystone answers its root with one), else auth_url + /v3.
   */
  private async identityUrl(signal?: AbortSignal): Promise<string> {
    if (this.v3) return this.v3;
    const base = this.cloud.authUrl.replace(/\/+$/, '');
    if (/\/v3$/.test(base)) {
      this.v3 = base;
      return base;
    }
    const r = await this.http.send('keystone version discovery', 'GET', base, {}, undefined, signal);
    type Version = { id?: string; status?: string; links?: { rel?: string; href?: string }[] };
    const b = r.body as { versions?: { values?: Version[] }; version?: Version } | undefined;
    const all = b?.versions?.values ?? (b?.version ? [b.version] : []);
    const v3 = all.find((v) => typeof v.id === 'string' && v.id.startsWith('v3'));
    const href = v3?.links?.find((l) => l.rel === 'self')?.href;
    this.v3 = (href ?? `${base}/v3`).replace(/\/+$/, '');
    return this.v3;
  }

  private async issue(signal?: AbortSignal): Promise<void> {
    const url = `${await this.identityUrl(signal)}/auth/tokens`;
    const r = await this.http.send(
      'keystone issue token',
      'POST',
      url,
      {},
      this.body(),
      signal,
      true, // issuing a token changes nothing: safe to retry
    );
    if (r.status === 401 || r.status === 403)
      throw new OpenStackConfigError(
        `keystone issue token: ${r.status}: authentication refused (${describeBody(r.body) || 'no reason given'}): check the credentials and the project in clouds.yaml or OS_*`,
      );
    if (r.status === 404 || r.status === 405)
      throw new OpenStackConfigError(
        `keystone issue token: ${r.status} from ${url}: no identity v3 API there (${describeBody(r.body) || 'no body'}): check auth_url`,
      );
    if (r.status === 400)
      throw new OpenStackConfigError(
        `keystone issue token: 400: the request was refused (${describeBody(r.body) || 'no reason given'}): check the auth settings in clouds.yaml or OS_*`,
      );
    if (r.status !== 201)
      throw new OpenStackApiError(
        'keystone issue token',
        r.status,
        describeBody(r.body) || 'authentication failed',
      );
    const value = r.headers['x-subject-token'];
    const t = (
      r.body as
        | {
            token?: {
              expires_at?: string;
              catalog?: CatalogEntry[];
              project?: { id?: string };
              roles?: { name?: unknown }[];
            };
          }
        | undefined
    )?.token;
    const expiresAt = t?.expires_at ? Date.parse(t.expires_at) : Number.NaN;
    if (typeof value !== 'string' || !Number.isFinite(expiresAt))
      throw new OpenStackApiError(
        'keystone issue token',
        r.status,
        'no X-Subject-Token or expires_at in the answer',
      );
    this.issued++;
    this.token = {
      value,
      expiresAt,
      catalog: t?.catalog ?? [],
      ...(t?.project?.id ? { projectId: t.project.id } : {}),
      roles: (t?.roles ?? []).flatMap((r) => (typeof r?.name === 'string' ? [r.name] : [])),
    };
  }
}
