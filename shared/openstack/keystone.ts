/**
 * Keystone v3 token auth (password with project scope, or application
 * credential). The token is cached and renewed before `expires_at`; a 401
 * mid-run invalidates it so the caller re-authenticates once.
 */
import type { CloudConfig } from './config.ts';
import { OpenStackApiError } from './errors.ts';
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
    | { value: string; expiresAt: number; catalog: CatalogEntry[]; projectId?: string }
    | undefined;
  /** Renew this long before expiry. */
  private readonly marginMs: number;
  issued = 0;

  constructor(cloud: CloudConfig, http: Http, clock: () => number = Date.now, marginMs = 60_000) {
    this.cloud = cloud;
    this.http = http;
    this.clock = clock;
    this.marginMs = marginMs;
  }

  invalidate(): void {
    this.token = undefined;
  }

  async get(signal?: AbortSignal): Promise<string> {
    if (!this.token || this.clock() >= this.token.expiresAt - this.marginMs) await this.issue(signal);
    return this.token!.value;
  }

  async projectId(signal?: AbortSignal): Promise<string | undefined> {
    await this.get(signal);
    return this.token?.projectId;
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
      throw new OpenStackApiError(
        'keystone catalog',
        0,
        `no ${type} endpoint for interface ${this.cloud.interface}${this.cloud.regionName ? ` in region ${this.cloud.regionName}` : ''}`,
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

  private async issue(signal?: AbortSignal): Promise<void> {
    const r = await this.http.send(
      'keystone issue token',
      'POST',
      `${this.cloud.authUrl}/auth/tokens`,
      {},
      this.body(),
      signal,
      true, // issuing a token changes nothing: safe to retry
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
        | { token?: { expires_at?: string; catalog?: CatalogEntry[]; project?: { id?: string } } }
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
    };
  }
}
