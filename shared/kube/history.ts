/**
 * An object's own history, replayed from the API server's watch cache: every state it went
 * through after a resourceVersion the caller saw, up to one it saw later. A watch from a
 * resourceVersion sends every change after it, in order, one event per write (none merged),
 * or an ERROR event (410 Expired) when the server no longer keeps that far back.
 */
import type { KubeObject } from './resources.ts';

/** Every state in order, or why the history cannot show every state (never a guess). */
export type HistoryResult<T> = Readonly<{ states: T[] }> | Readonly<{ broken: string }>;

/**
 * How long the server keeps a replay's watch open: the history comes at once, and the reader
 * stops at the version it needs (`reached`); this only bounds a version that never comes.
 */
export const HISTORY_TIMEOUT_SECONDS = 5;

/** True once a watch answer's text holds a whole event line naming resourceVersion `until`. */
export function reached(until: string): (text: string) => boolean {
  const marker = `"resourceVersion":"${until}"`;
  return (text) => {
    const i = text.indexOf(marker);
    return i >= 0 && text.indexOf('\n', i) >= 0;
  };
}

/** The query of a watch of one object (by name) from resourceVersion `from`. */
export function historyQuery(name: string, from: string): Record<string, string> {
  return {
    watch: '1',
    fieldSelector: `metadata.name=${name}`,
    resourceVersion: from,
    timeoutSeconds: String(HISTORY_TIMEOUT_SECONDS),
  };
}

/**
 * The states of the watch answer `text` (newline-delimited events) up to and including the
 * one at resourceVersion `until`. Broken when an event says the history is gone (ERROR), the
 * object was deleted, or the answer ends before `until`.
 */
export function replayed<T>(text: string, until: string, view: (o: KubeObject) => T): HistoryResult<T> {
  const states: T[] = [];
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    let e: { type?: unknown; object?: KubeObject & { message?: unknown; code?: unknown } };
    try {
      e = JSON.parse(line);
    } catch {
      return { broken: 'the watch answer is not JSON events' };
    }
    const o = e.object;
    if (e.type === 'BOOKMARK') continue;
    if (e.type === 'ERROR')
      return {
        broken: `the server no longer has that history (${o?.code ?? '?'}: ${String(o?.message ?? '')})`,
      };
    if (e.type === 'DELETED') return { broken: 'the object was deleted' };
    if ((e.type !== 'ADDED' && e.type !== 'MODIFIED') || !o?.metadata)
      return { broken: `an event the replay cannot read (${String(e.type)})` };
    states.push(view(o));
    if (o.metadata.resourceVersion === until) return { states };
  }
  return { broken: `the history ended before resourceVersion ${until}` };
}
