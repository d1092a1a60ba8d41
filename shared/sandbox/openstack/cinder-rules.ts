/**
 * The fake's Cinder (Block Storage v3), held to Cinder 21 (Zed) as its code and API
 * reference document it: volumes of the token's project only (a URL naming another project
 * is 400 "Malformed request url"); sorted newest first (created_at, then id, descending);
 * `limit` capped at osapi_max_limit (1000); a page with as many items as its limit carries
 * `volumes_links` with a `next` href to the listing asked (`…/{project}/volumes/detail?…` for
 * the detailed one, as api/v2/views/volumes.py names it) with `marker=<last id>`, even when
 * nothing follows; no links key otherwise; a volume not found is 404 `itemNotFound`; the
 * project shows as `os-vol-tenant-attr:tenant_id` to its readers (Zed's policy
 * SYSTEM_READER_OR_PROJECT_READER). Held to a real Cinder by test/openstack/cinder-contract.ts.
 */
import type { Volume } from '../../openstack/cinder.ts';

export const MAX_LIMIT = 1000;

export type StoredVolume = Volume & { project_id: string };

type Send = (status: number, body: unknown) => void;

/** Serves `/volume/v3/{project}/volumes[/detail|/{id}]`. */
export function serveCinder(
  volumes: ReadonlyMap<string, StoredVolume>,
  path: string,
  url: URL,
  base: { proto: string; host: string },
  token: { projectId: string; admin: boolean },
  method: string,
  send: Send,
): undefined {
  const m = /^\/volume\/v3\/([^/]+)\/volumes(?:\/([^/]+))?\/?$/.exec(path);
  if (!m) return void send(404, { itemNotFound: { code: 404, message: 'The resource could not be found.' } });
  const project = decodeURIComponent(m[1]!);
  if (project !== token.projectId)
    return void send(400, { badRequest: { code: 400, message: 'Malformed request url' } });
  if (method !== 'GET') return void send(405, { error: 'only GET is modelled' });
  const view = (v: StoredVolume) => {
    const { project_id, ...rest } = v;
    return { ...rest, 'os-vol-tenant-attr:tenant_id': project_id };
  };
  const sub = m[2] && decodeURIComponent(m[2]);
  if (sub && sub !== 'detail') {
    const v = volumes.get(sub);
    if (!v || v.project_id !== project)
      return void send(404, { itemNotFound: { code: 404, message: `Volume ${sub} could not be found.` } });
    return void send(200, { volume: view(v) });
  }
  const q = url.searchParams;
  const raw = q.get('limit');
  const asked = raw === null ? MAX_LIMIT : Number(raw);
  if (!Number.isInteger(asked))
    return void send(400, { badRequest: { code: 400, message: 'limit param must be an integer' } });
  if (asked < 0)
    return void send(400, { badRequest: { code: 400, message: 'limit param must be positive' } });
  const limit = Math.min(asked, MAX_LIMIT);
  let items = [...volumes.values()]
    .filter((v) => v.project_id === project)
    .sort((a, b) =>
      (a.created_at ?? '') !== (b.created_at ?? '')
        ? (a.created_at ?? '') < (b.created_at ?? '')
          ? 1
          : -1
        : a.id < b.id
          ? 1
          : -1,
    );
  const marker = q.get('marker');
  if (marker !== null) {
    const at = items.findIndex((v) => v.id === marker);
    // the marker is looked up as a volume: an unknown one is that volume's 404
    if (at < 0)
      return void send(404, { itemNotFound: { code: 404, message: `Volume ${marker} could not be found.` } });
    items = items.slice(at + 1);
  }
  items = items.slice(0, limit);
  const body: Record<string, unknown> = { volumes: items.map(view) };
  if (items.length > 0 && limit <= items.length) {
    const params = new URLSearchParams(q);
    params.set('marker', items[items.length - 1]!.id);
    body.volumes_links = [
      {
        rel: 'next',
        href: `${base.proto}://${base.host}/volume/v3/${project}/volumes${sub === 'detail' ? '/detail' : ''}?${params}`,
      },
    ];
  }
  send(200, body);
  return undefined;
}
