/** One keep-alive undici pool per endpoint origin, with timeouts and read retries. */
import { Agent, request } from 'undici';
import { OpenStackApiError } from './errors.ts';

export type HttpOptions = Readonly<{
  timeoutMs?: number;
  readAttempts?: number;
  sleep?: (ms: number) => Promise<void>;
}>;

export type Reply = { status: number; headers: Record<string, string | string[] | undefined>; body: unknown };

export class Http {
  private readonly agent: Agent;
  private readonly opts: HttpOptions;
  constructor(opts: HttpOptions = {}) {
    this.opts = opts;
    const t = opts.timeoutMs ?? 30_000;
    this.agent = new Agent({
      connectTimeout: t,
      headersTimeout: t,
      bodyTimeout: t,
      keepAliveTimeout: 30_000,
      connections: 8,
    });
  }

  close(): Promise<void> {
    return this.agent.close();
  }

  /**
   * A request; GETs (and calls marked `safeToRetry`, like issuing a token) are retried on
   * 429/5xx/connection errors with backoff, honouring Retry-After. Deletes never are.
   */
  async send(
    call: string,
    method: string,
    url: string,
    headers: Record<string, string>,
    body?: unknown,
    signal?: AbortSignal,
    safeToRetry = false,
  ): Promise<Reply> {
    const attempts = method === 'GET' || safeToRetry ? (this.opts.readAttempts ?? 4) : 1;
    for (let attempt = 1; ; attempt++) {
      try {
        const r = await this.once(call, method, url, headers, body, signal);
        if (r.status === 429 || r.status >= 500) {
          const err = new OpenStackApiError(call, r.status, describeBody(r.body));
          const ra = r.headers['retry-after'];
          if (typeof ra === 'string' && Number.isFinite(Number(ra))) err.retryAfterMs = Number(ra) * 1000;
          throw err;
        }
        return r;
      } catch (err) {
        const e = err as OpenStackApiError;
        if (!(e instanceof OpenStackApiError) || !e.retryable || attempt >= attempts || signal?.aborted)
          throw err;
        await (this.opts.sleep ?? ((ms) => new Promise((r) => setTimeout(r, ms))))(
          e.retryAfterMs ?? Math.min(200 * 2 ** (attempt - 1), 5000),
        );
      }
    }
  }

  private async once(
    call: string,
    method: string,
    url: string,
    headers: Record<string, string>,
    body: unknown,
    signal?: AbortSignal,
  ): Promise<Reply> {
    const timeout = AbortSignal.timeout(this.opts.timeoutMs ?? 30_000);
    try {
      const res = await request(url, {
        method: method as 'GET',
        headers: {
          accept: 'application/json',
          ...headers,
          ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
        },
        body: body !== undefined ? JSON.stringify(body) : null,
        dispatcher: this.agent,
        signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
      });
      const text = await res.body.text();
      let parsed: unknown;
      if (text !== '') {
        try {
          parsed = JSON.parse(text);
        } catch {
          if (res.statusCode < 300)
            throw new OpenStackApiError(
              call,
              0,
              `response body is not JSON (${text.length} bytes; truncated?)`,
            );
          parsed = text.slice(0, 200);
        }
      }
      return { status: res.statusCode, headers: res.headers as Reply['headers'], body: parsed };
    } catch (err) {
      if (err instanceof OpenStackApiError) throw err;
      throw new OpenStackApiError(
        call,
        0,
        timeout.aborted ? `timed out after ${this.opts.timeoutMs ?? 30_000} ms` : (err as Error).message,
        { cause: err },
      );
    }
  }
}

/** What an error answer says, without echoing a page: HTML (a proxy's, a web server's) is named, not quoted. */
export function describeBody(b: unknown): string {
  if (typeof b === 'string' && /^\s*<(!doctype|html|\?xml)/i.test(b))
    return 'an HTML page, not an OpenStack API answer';
  if (b && typeof b === 'object') {
    const v = Object.values(b as Record<string, unknown>)[0] as
      | { message?: string; type?: string }
      | undefined;
    if (v && typeof v === 'object' && typeof v.message === 'string')
      return `${v.type ? `${v.type}: ` : ''}${v.message}`;
  }
  return typeof b === 'string' ? b : '';
}
