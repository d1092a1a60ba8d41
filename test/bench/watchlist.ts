/**
 * A streaming list (KEP-3157 "watch-list") for the real-apiserver benchmark: a watch with
 * sendInitialEvents=true, resourceVersionMatch=NotOlderThan and bookmarks; the list is
 * complete at the BOOKMARK annotated k8s.io/initial-events-end. Anything else (an ERROR
 * event, a MODIFIED/DELETED before the end, a stream that ends first) is incomplete.
 * Measured here next to the paginated lists before the client adopts it.
 */
import { createGunzip } from 'node:zlib';
import { Agent, request } from 'undici';

const METADATA = 'application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json';

export type StreamResult = { items: number; resourceVersion: string; bytes: number; encoding: string };

export async function watchList(
  server: string,
  headers: Record<string, string>,
  path: string,
  metadataOnly: boolean,
  gzip: boolean,
): Promise<StreamResult> {
  const agent = new Agent({ connect: { rejectUnauthorized: false } });
  const url = new URL(server + path);
  for (const [k, v] of Object.entries({
    watch: '1',
    sendInitialEvents: 'true',
    resourceVersionMatch: 'NotOlderThan',
    allowWatchBookmarks: 'true',
    timeoutSeconds: '600',
  }))
    url.searchParams.set(k, v);
  const res = await request(url, {
    headers: {
      ...headers,
      accept: metadataOnly ? METADATA : 'application/json',
      ...(gzip ? { 'accept-encoding': 'gzip' } : {}),
    },
    dispatcher: agent,
  });
  try {
    if (res.statusCode !== 200)
      throw new Error(`watch-list: ${res.statusCode} ${(await res.body.text()).slice(0, 300)}`);
    const encoding = String(res.headers['content-encoding'] ?? 'identity');
    let bytes = 0;
    res.body.on('data', (c: Buffer) => {
      bytes += c.length;
    });
    const stream = encoding === 'gzip' ? res.body.pipe(createGunzip()) : res.body;
    let items = 0;
    let rest = '';
    for await (const chunk of stream) {
      rest += chunk.toString('utf8');
      let nl = rest.indexOf('\n');
      while (nl >= 0) {
        const line = rest.slice(0, nl);
        rest = rest.slice(nl + 1);
        nl = rest.indexOf('\n');
        if (line.trim() === '') continue;
        const ev = JSON.parse(line) as {
          type: string;
          object: {
            metadata?: { resourceVersion?: string; annotations?: Record<string, string> };
            message?: string;
          };
        };
        if (ev.type === 'ADDED') items++;
        else if (ev.type === 'BOOKMARK') {
          if (ev.object.metadata?.annotations?.['k8s.io/initial-events-end'] === 'true')
            return { items, resourceVersion: ev.object.metadata.resourceVersion ?? '', bytes, encoding };
        } else
          throw new Error(
            `watch-list: ${ev.type} before the end of the initial events: ${ev.object.message ?? ''}`,
          );
      }
    }
    throw new Error('watch-list: the stream ended before the initial-events-end bookmark');
  } finally {
    res.body.destroy();
    await agent.destroy();
  }
}
