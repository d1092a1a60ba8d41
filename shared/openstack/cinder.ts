/**
 * Cinder (Block Storage v3): the volumes of the token's project, listed completely (limit,
 * marker and `volumes_links`, proven page by page as Neutron's lists are), and one volume
 * by id. No delete: twopass only reports volumes (a deleted volume's data cannot be had
 * back), so there is none to send.
 *
 * Facts (Cinder 21 / Zed, cinder/api/common.py and api/v2/views/volumes.py): a page with as
 * many items as its limit (the limit capped at osapi_max_limit) carries a `next` link whose
 * marker is its last id, even when no item follows; `volumes_links` is absent otherwise; a
 * volume's project shows only as `os-vol-tenant-attr:tenant_id` (admins), so a volume of
 * this listing is of the token's project.
 */
import { ConfigError } from '../errors.ts';
import { OpenStackApiError } from './errors.ts';
import { describeBody, type Http } from './http.ts';
import type { KeystoneAuth } from './keystone.ts';
import { listProven } from './pages.ts';

export type Volume = {
  id: string;
  name?: string | null;
  description?: string | null;
  status?: string;
  size?: number;
  metadata?: Record<string, string>;
  attachments?: { server_id?: string; attachment_id?: string }[];
  created_at?: string;
  updated_at?: string | null;
  /** The project: Cinder's attribute where shown, else the project the listing was scoped to. */
  project_id?: string;
  'os-vol-tenant-attr:tenant_id'?: string;
};

export interface CinderReader {
  listVolumes(f: { project_id: string }, signal?: AbortSignal): Promise<{ items: Volume[]; pages: number }>;
  getVolume(id: string, signal?: AbortSignal): Promise<Volume | undefined>;
}

/** Cinder's own answer that a volume does not exist (not a proxy's 404). */
const isNotFound = (body: unknown) =>
  typeof (body as { itemNotFound?: unknown } | undefined)?.itemNotFound === 'object';

export class CinderClient implements CinderReader {
  private readonly auth: KeystoneAuth;
  private readonly http: Http;
  private readonly pageSize: number;

  constructor(auth: KeystoneAuth, http: Http, pageSize = 500) {
    this.auth = auth;
    this.http = http;
    this.pageSize = pageSize;
  }

  /** The catalog's block-storage endpoint (`volumev3` in older catalogs); it names the project. */
  private async base(signal?: AbortSignal): Promise<string> {
    try {
      return await this.auth.endpoint('block-storage', signal);
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      return this.auth.endpoint('volumev3', signal);
    }
  }

  private call(what: string, url: string, signal?: AbortSignal) {
    return this.auth.send(this.http, what, 'GET', url, signal);
  }

  /** The project's volumes, every page; a volume seen to be of another project is left out. */
  async listVolumes(
    f: { project_id: string },
    signal?: AbortSignal,
  ): Promise<{ items: Volume[]; pages: number }> {
    const scoped = await this.auth.scopedProject(signal);
    const all = await listProven<Volume>({
      what: 'cinder list volumes',
      url: `${await this.base(signal)}/volumes/detail`,
      query: new URLSearchParams({ limit: String(this.pageSize) }),
      key: 'volumes',
      get: (what, url) => this.call(what, url, signal),
    });
    const items: Volume[] = [];
    for (const v of all.items) {
      const project = v['os-vol-tenant-attr:tenant_id'] ?? scoped;
      if (project === f.project_id) items.push({ ...v, ...(project ? { project_id: project } : {}) });
    }
    return { items, pages: all.pages };
  }

  async getVolume(id: string, signal?: AbortSignal): Promise<Volume | undefined> {
    const what = `cinder get volume ${id}`;
    const r = await this.call(what, `${await this.base(signal)}/volumes/${encodeURIComponent(id)}`, signal);
    if (r.status === 404 && isNotFound(r.body)) return undefined;
    if (r.status !== 200)
      throw new OpenStackApiError(what, r.status, describeBody(r.body) || 'not a Cinder answer');
    const v = (r.body as { volume?: Volume } | undefined)?.volume;
    if (!v || typeof v !== 'object' || v.id !== id)
      throw new OpenStackApiError(what, 0, `the answer is not volume ${id}`);
    const project = v['os-vol-tenant-attr:tenant_id'] ?? (await this.auth.scopedProject(signal));
    return { ...v, ...(project ? { project_id: project } : {}) };
  }
}
