/**
 * How the real Neutron (Zed) answers where the details matter, as the fake reproduces it;
 * each rule is a case of the OpenStack contract suite, run on the fake and the real one.
 */

export type Link = { rel: 'next' | 'previous'; href: string };

/**
 * The `*_links` of a page asked with `limit`: `previous` on every page (the first too),
 * `next` on every full page (a full final page too: its `next` leads to an empty page).
 * Hrefs are built from the request's Host and X-Forwarded-Proto, as the server's
 * proxy middleware does. Without `limit` a list has no links key at all.
 */
export function pageLinks(
  base: { proto: string; host: string; path: string },
  query: URLSearchParams,
  page: readonly { id: string }[],
  limit: number,
): Link[] {
  const href = (marker: string | undefined, reverse: boolean) => {
    const q = new URLSearchParams(query);
    q.delete('marker');
    q.delete('page_reverse');
    if (marker) q.set('marker', marker);
    if (reverse) q.set('page_reverse', 'True');
    return `${base.proto}://${base.host}${base.path}?${q}`;
  };
  const links: Link[] = [];
  if (page.length >= limit) links.push({ rel: 'next', href: href(page[page.length - 1]!.id, false) });
  links.push({ rel: 'previous', href: href(page[0]?.id ?? query.get('marker') ?? undefined, true) });
  return links;
}

export type IfMatch =
  | { kind: 'none' }
  | { kind: 'revision'; revision: number }
  | { kind: 'bad'; message: string };

/**
 * The If-Match of a write: `revision_number=<int>` constrains it; two values, or a
 * `revision_number=` that is not an integer, are 400; any other value is ignored (the
 * write goes on unconstrained: the real server deletes on `If-Match: garbage`, which is
 * why the client sends nothing but the one well-formed value).
 */
export function parseIfMatch(header: string | undefined): IfMatch {
  if (header === undefined) return { kind: 'none' };
  const values = header.split(',').map((v) => v.trim());
  const bad = {
    kind: 'bad',
    message: 'Bad if-match request: Revision number etag must be in the format of revision_number=<int>.',
  } as const;
  if (values.length > 1) return bad;
  const v = values[0]!;
  if (!v.startsWith('revision_number=')) return { kind: 'none' };
  const n = v.slice('revision_number='.length);
  return /^\d+$/.test(n) ? { kind: 'revision', revision: Number(n) } : bad;
}

/** Device owners whose ports only their service may delete (409 ServicePortInUse on the port API). */
export const SERVICE_OWNERS = [
  'network:router_interface',
  'network:router_interface_distributed',
  'network:ha_router_replicated_interface',
  'network:router_gateway',
  'network:floatingip',
];
