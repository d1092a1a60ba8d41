/**
 * The fake server's answer to a watch: its history of one object, as newline-delimited events.
 */
import type { WatchHistory } from './history.ts';
import { FakeApiError } from './store.ts';

/** A body that is not one JSON document: a watch's newline-delimited events. */
export class EventStream {
  readonly text: string;
  constructor(text: string) {
    this.text = text;
  }
}

/** True for a GET of a collection that asks for a watch. */
export function isWatch(q: URLSearchParams): boolean {
  const w = q.get('watch');
  return w === '1' || w === 'true';
}

/**
 * A watch of one object from a resourceVersion: its changes since, then the end of the
 * answer (the real server keeps it open for `timeoutSeconds` and sends what comes; a reader
 * stops at the version it needs either way). This fake watches one object only.
 */
export function watchAnswer(
  history: WatchHistory,
  resource: string,
  namespace: string | undefined,
  q: URLSearchParams,
): EventStream {
  const name = /^metadata\.name=(.+)$/.exec(q.get('fieldSelector') ?? '')?.[1];
  const from = q.get('resourceVersion');
  if (name === undefined || !from)
    throw new FakeApiError(
      400,
      'BadRequest',
      'the fake serves watches of one object (fieldSelector metadata.name=) from a resourceVersion',
    );
  const events = history.since(
    resource,
    namespace !== undefined ? `${namespace}/${name}` : name,
    Number(from),
  );
  if (events === undefined) {
    const status = {
      kind: 'Status',
      apiVersion: 'v1',
      metadata: {},
      status: 'Failure',
      message: `too old resource version: ${from}`,
      reason: 'Expired',
      code: 410,
    };
    return new EventStream(`${JSON.stringify({ type: 'ERROR', object: status })}\n`);
  }
  return new EventStream(
    events.map((e) => `${JSON.stringify({ type: e.type, object: e.object })}\n`).join(''),
  );
}
