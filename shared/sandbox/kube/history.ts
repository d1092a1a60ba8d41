/**
 * The fake server's watch history: per resource, the last `capacity` changes, as the API
 * server's watch cache keeps them. A watch from a resourceVersion the log no longer reaches
 * back to is answered as the real server does, with an ERROR event (410 Expired).
 */
import type { KubeObject } from '../../kube/resources.ts';

type StoredObject = Readonly<KubeObject>;

export type WatchEvent = Readonly<{
  type: 'ADDED' | 'MODIFIED' | 'DELETED';
  /** namespace/name, or name */
  id: string;
  rv: number;
  object: StoredObject;
}>;

type Log = { events: WatchEvent[]; start: number; floor: number };

export class WatchHistory {
  private readonly logs = new Map<string, Log>();

  /** The store's resourceVersion before its first write. */
  private readonly start: number;
  /** Changes kept per resource (the real server keeps at least 100, more while they are recent). */
  capacity: number;

  constructor(start: number, capacity = 1000) {
    this.start = start;
    this.capacity = capacity;
  }

  record(resource: string, type: WatchEvent['type'], id: string, object: StoredObject): void {
    let log = this.logs.get(resource);
    if (!log) {
      log = { events: [], start: 0, floor: this.start };
      this.logs.set(resource, log);
    }
    log.events.push({ type, id, rv: Number(object.metadata.resourceVersion), object });
    while (log.events.length - log.start > this.capacity) log.floor = log.events[log.start++]!.rv;
    if (log.start > this.capacity) {
      log.events = log.events.slice(log.start);
      log.start = 0;
    }
  }

  /** The changes of one object after `from`, or undefined when the log does not reach back to it. */
  since(resource: string, id: string, from: number): WatchEvent[] | undefined {
    const log = this.logs.get(resource);
    if (!log) return from >= this.start ? [] : undefined;
    if (!Number.isFinite(from) || from < log.floor) return undefined;
    const out: WatchEvent[] = [];
    for (let i = log.start; i < log.events.length; i++) {
      const e = log.events[i]!;
      if (e.rv > from && e.id === id) out.push(e);
    }
    return out;
  }
}
