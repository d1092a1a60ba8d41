/** The OpenStack side of the one HTTP transport: JSON in and out, errors as OpenStackApiError. */
import { ConnectionError, HttpTransport } from '../http/transport.ts';
import type { Time } from '../time.ts';
import { OpenStackApiError } from './errors.ts';

export type HttpOptions = Readonly<{ time: Time; timeoutMs?: number; readAttempts?: number }>;

export type Reply = { status: number; headers: Record<string, string | string[] | undefined>; body: unknown };

export class Http {
  private readonly transport: HttpTransport;
  constructor(opts: HttpOptions) {
    this.transport = new HttpTransport({
      api: 'openstack',
      time: opts.time,
      timeoutMs: opts.timeoutMs ?? 30_000,
      ...(opts.readAttempts !== undefined ? { readAttempts: opts.readAttempts } : {}),
    });
  }

  close(): Promise<void> {
    return this.transport.close();
  }

  /**
   * A request; GETs (and calls marked `safeToRetry`, like issuing a token) are retried on
   * 429/5xx/connection errors with backoff, honouring Retry-After. Deletes never are. A
   * 429/5xx that outlives its retries is an error; other statuses are the caller's to read.
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
    let res: { status: number; headers: Reply['headers']; text: string };
    try {
      res = await this.transport.send({
        call,
        method: method as 'GET',
        url: new URL(url),
        headers: {
          accept: 'application/json',
          ...headers,
          ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
        },
        body: body !== undefined ? JSON.stringify(body) : undefined,
        signal,
        retry: method === 'GET' || safeToRetry,
      });
    } catch (err) {
      if (!(err instanceof ConnectionError)) throw err;
      throw new OpenStackApiError(call, 0, err.detail, { cause: err });
    }
    let parsed: unknown;
    if (res.text !== '') {
      try {
        parsed = JSON.parse(res.text);
      } catch {
        if (res.status < 300)
          throw new OpenStackApiError(
            call,
            0,
            `response body is not JSON (${res.text.length} bytes; truncated?)`,
          );
        parsed = res.text.slice(0, 200);
      }
    }
    if (res.status === 429 || res.status >= 500)
      throw new OpenStackApiError(call, res.status, describeBody(parsed));
    return { status: res.status, headers: { ...res.headers }, body: parsed };
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
