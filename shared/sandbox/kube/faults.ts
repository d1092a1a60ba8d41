/**
 * Fault injection for the fake servers, per route and per call number, and the
 * request log. Faults wrap the fake's normal handling; there is no second fake.
 */

export type Fault = Readonly<{
  /** Only requests with this method (default any). */
  method?: string;
  /** Substring or pattern matched against `path?query`. */
  path: string | RegExp;
  /** Fire on the Nth matching request (1-based); default: every matching request. */
  nth?: number;
  /** How many times it may fire (default: once when nth is set, else unlimited). */
  times?: number;
  status?: number;
  reason?: string;
  retryAfterSeconds?: number;
  delayMs?: number;
  /** Hold the request until this settles (a test that needs another process to act first). */
  until?: Promise<unknown>;
  /** Destroy the socket before answering. */
  reset?: boolean;
  /** Send only the first half of the (normal) body, then close. */
  truncate?: boolean;
  /** Answer a list request with a page that has no items but keeps the continue token. */
  emptyPage?: boolean;
  /** Expire the continue token of this request (410). */
  expireContinue?: boolean;
  /** Rewrite the answer (status, parsed body; a string body is sent as it is). */
  rewrite?: (status: number, body: unknown) => [number, unknown];
}>;

export type RequestRecord = Readonly<{
  seq: number;
  method: string;
  path: string;
  query: string;
  status: number;
  fault?: string;
  bytes: number;
}>;

type Armed = { fault: Fault; seen: number; fired: number };

/** The request log both fake servers keep: every request, with the fault applied to it. */
export class RequestLog {
  readonly entries: RequestRecord[] = [];
  private seq = 0;
  record(method: string, url: URL, status: number, bytes: number, fault?: string): void {
    this.entries.push({
      seq: ++this.seq,
      method,
      path: url.pathname,
      query: url.search,
      status,
      bytes,
      ...(fault ? { fault } : {}),
    });
  }
}

export class FaultPlan {
  private armed: Armed[] = [];

  add(fault: Fault): this {
    this.armed.push({ fault, seen: 0, fired: 0 });
    return this;
  }

  clear(): void {
    this.armed = [];
  }

  /** How many times the armed faults fired. */
  fired(): number {
    return this.armed.reduce((n, a) => n + a.fired, 0);
  }

  /** The fault to apply to this request, if any (counts matches as a side effect). */
  match(method: string, target: string): Fault | undefined {
    let hit: Fault | undefined;
    for (const a of this.armed) {
      const f = a.fault;
      if (f.method !== undefined && f.method !== method) continue;
      const ok = typeof f.path === 'string' ? target.includes(f.path) : f.path.test(target);
      if (!ok) continue;
      a.seen++;
      const limit = f.times ?? (f.nth !== undefined ? 1 : Number.POSITIVE_INFINITY);
      if (a.fired >= limit) continue;
      if (f.nth !== undefined && a.seen < f.nth) continue;
      if (hit === undefined) {
        a.fired++;
        hit = f;
      }
    }
    return hit;
  }
}

export function describeFault(f: Fault): string {
  if (f.reset) return 'reset';
  if (f.truncate) return 'truncated';
  if (f.emptyPage) return 'empty-page';
  if (f.expireContinue) return '410';
  if (f.status !== undefined) return String(f.status);
  if (f.rewrite) return 'rewritten';
  if (f.delayMs !== undefined) return `delay ${f.delayMs}ms`;
  if (f.until !== undefined) return 'held';
  return 'fault';
}
