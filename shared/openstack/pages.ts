/**
 * A complete listing of an OpenStack collection, proven page by page (limit, marker and
 * `<key>_links`): each page is a JSON object with the collection array; every item has an
 * id and no id comes twice; a `next` link's marker is its page's last id, and only that
 * marker is taken from it: every page goes to the same endpoint with this request's own
 * query, never to a host or path the link names. A page with a next link and no items
 * cannot be proven. Any failure leaves the list unproven (ListIncompleteError), except a
 * configuration error, which stays one.
 */
import { ConfigError, ListIncompleteError, messageOf } from '../errors.ts';
import { describeBody } from './http.ts';

export type Get = (what: string, url: string) => Promise<{ status: number; body: unknown }>;

export async function listProven<T extends { id: string }>(
  o: Readonly<{
    what: string;
    url: string;
    query: URLSearchParams;
    key: string;
    get: Get;
    /** Why an item cannot be taken as it is (the list is then unproven). */
    check?: (item: T) => string | undefined;
  }>,
): Promise<{ items: T[]; pages: number }> {
  const q = new URLSearchParams(o.query);
  const items: T[] = [];
  const seen = new Set<string>();
  let pages = 0;
  for (;;) {
    const call = `${o.what} page ${pages + 1}`;
    let r: { status: number; body: unknown };
    try {
      r = await o.get(call, `${o.url}?${q}`);
    } catch (err) {
      if (err instanceof ConfigError) throw err;
      throw new ListIncompleteError(call, messageOf(err), { cause: err });
    }
    if (r.status !== 200) throw new ListIncompleteError(call, `${r.status} ${describeBody(r.body)}`);
    const incomplete = (why: string): never => {
      throw new ListIncompleteError(call, why);
    };
    const body = r.body as Record<string, unknown> | undefined;
    if (!body || typeof body !== 'object' || Array.isArray(body))
      incomplete('the answer is not a JSON object');
    const page = body![o.key];
    if (!Array.isArray(page)) incomplete(`the answer has no ${o.key} list`);
    pages++;
    for (const it of page as T[]) {
      if (!it || typeof it !== 'object' || typeof it.id !== 'string' || it.id === '')
        incomplete('an item has no id');
      if (seen.has(it.id)) incomplete(`${it.id} came twice: the pages overlap`);
      const bad = o.check?.(it);
      if (bad) incomplete(bad);
      seen.add(it.id);
      items.push(it);
    }
    const links = body![`${o.key}_links`] ?? [];
    if (!Array.isArray(links)) incomplete(`${o.key}_links is not a list`);
    const next = (links as { rel?: unknown; href?: unknown }[]).find((l) => l?.rel === 'next')?.href;
    if (next === undefined) break;
    if (typeof next !== 'string') incomplete('the next link has no href');
    let marker: string | null = null;
    try {
      marker = new URL(next as string, o.url).searchParams.get('marker');
    } catch {
      incomplete('the next link is not a URL');
    }
    if (!marker) incomplete('the next link has no marker');
    const last = (page as T[])[(page as T[]).length - 1];
    if (!last) incomplete('a page with a next link has no items');
    if (marker !== last!.id)
      incomplete(`the next link's marker ${marker} is not the page's last id ${last!.id}`);
    q.set('marker', marker!);
    if (pages > 100_000) incomplete('more than 100000 pages');
  }
  return { items, pages };
}
