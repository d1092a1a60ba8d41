/**
 * The one HTTP transport under the Kubernetes and the OpenStack clients: a keep-alive
 * undici Agent, a per-call timeout, the caller's AbortSignal, and retries for reads only
 * (429, 5xx and connection errors), honouring Retry-After up to one cap. Sleeping and
 * timing out go through the injected `Time`, so no test waits on a real clock.
 *
 * undici's own retry interceptor is not used: it sleeps on real timers (no injected
 * clock) and cannot tell the client which attempt failed how; the loop below is short.
 */

import { promisify } from 'node:util';
import { gunzip } from 'node:zlib';
import { Agent, request } from 'undici';
import { TwopassError } from '../errors.ts';
import type { Time } from '../time.ts';
import { countRequest } from './tally.ts';

export const RETRY_AFTER_CAP_MS = 30_000;
const BACKOFF_BASE_MS = 200;
const BACKOFF_CAP_MS = 5_000;

const gunzipAsync = promisify(gunzip);

export type TlsOptions = Readonly<{
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
  rejectUnauthorized?: boolean;
  servername?: string;
}>;

export type TransportOptions = Readonly<{
  time: Time;
  /** Per-call timeout (headers and body), default 30 s. */
  timeoutMs?: number;
  /** Attempts for a retryable call (default 4). */
  readAttempts?: number;
  connections?: number;
  tls?: TlsOptions;
  /** Which API the requests go to, for the run's tally (`kubernetes`, `openstack`, `webhook`). */
  api?: string;
  /** Ask for gzip (`Accept-Encoding: gzip`) and decode it; uncompressed answers are read as they are. */
  gzip?: boolean;
  /** Told of every response, for benchmarks and tests: bytes on the wire, and decoded. */
  onResponse?: (info: {
    method: string;
    path: string;
    status: number;
    bytes: number;
    decodedBytes: number;
  }) => void;
}>;

export type HttpRequest = Readonly<{
  /** What the call is, for errors: `list pods page 2`, `neutron list ports`. */
  call: string;
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  url: URL;
  headers: Readonly<Record<string, string>>;
  body?: string | undefined;
  signal?: AbortSignal | undefined;
  /** Retry on 429/5xx/connection errors: default only for GET (a write is never retried blindly). */
  retry?: boolean;
  /**
   * Stop reading an uncompressed body once this says the text so far is enough (a watch's
   * answer, which the server would keep open): the connection is then closed.
   */
  enough?: ((textSoFar: string) => boolean) | undefined;
}>;

export type HttpResponse = Readonly<{
  status: number;
  headers: Readonly<Record<string, string | string[] | undefined>>;
  text: string;
}>;

/** No answer at all: the connection failed or the call timed out. */
export class ConnectionError extends TwopassError {
  override name = 'ConnectionError';
  readonly retryable = true;
  readonly timedOut: boolean;
  /** What went wrong, without the call's name (a client wraps it into its own error). */
  readonly detail: string;
  constructor(call: string, detail: string, timedOut: boolean, cause: unknown) {
    super(`${call}: ${detail}`, { call, cause });
    this.timedOut = timedOut;
    this.detail = detail;
  }
}

const retryableStatus = (s: number) => s === 429 || s >= 500;

/** Retry-After in seconds or as an HTTP date; capped; undefined when absent or unreadable. */
export function retryAfterMs(value: string | string[] | undefined, now: number): number | undefined {
  const v = Array.isArray(value) ? value[0] : value;
  if (v === undefined || v.trim() === '') return undefined;
  const secs = Number(v);
  const ms = Number.isFinite(secs) ? secs * 1000 : Date.parse(v) - now;
  if (!Number.isFinite(ms)) return undefined;
  return Math.min(Math.max(0, ms), RETRY_AFTER_CAP_MS);
}

export class HttpTransport {
  private readonly agent: Agent;
  private readonly opts: TransportOptions;
  constructor(opts: TransportOptions) {
    this.opts = opts;
    const t = opts.timeoutMs ?? 30_000;
    this.agent = new Agent({
      connect: { timeout: t, ...(opts.tls ?? {}) },
      connections: opts.connections ?? 8,
      keepAliveTimeout: 30_000,
      headersTimeout: t,
      bodyTimeout: t,
    });
  }

  close(): Promise<void> {
    return this.agent.close();
  }

  async send(req: HttpRequest): Promise<HttpResponse> {
    const retry = req.retry ?? req.method === 'GET';
    const attempts = retry ? (this.opts.readAttempts ?? 4) : 1;
    for (let attempt = 1; ; attempt++) {
      let res: HttpResponse | undefined;
      let failure: ConnectionError | undefined;
      try {
        res = await this.once(req);
      } catch (err) {
        if (!(err instanceof ConnectionError)) throw err;
        failure = err;
      }
      const again =
        attempt < attempts && !req.signal?.aborted && (failure !== undefined || retryableStatus(res!.status));
      if (!again) {
        if (failure) throw failure;
        return res!;
      }
      const backoff = Math.min(BACKOFF_BASE_MS * 2 ** (attempt - 1), BACKOFF_CAP_MS);
      const wait = res
        ? (retryAfterMs(res.headers['retry-after'], this.opts.time.now()) ?? backoff)
        : backoff;
      await this.opts.time.sleep(wait, req.signal);
    }
  }

  private async once(req: HttpRequest): Promise<HttpResponse> {
    const timeoutMs = this.opts.timeoutMs ?? 30_000;
    const timeout = this.opts.time.timeout(timeoutMs);
    const signal = req.signal ? AbortSignal.any([req.signal, timeout]) : timeout;
    countRequest(this.opts.api ?? 'other');
    try {
      const res = await request(req.url, {
        method: req.method,
        headers: { ...(this.opts.gzip ? { 'accept-encoding': 'gzip' } : {}), ...req.headers },
        body: req.body ?? null,
        signal,
        dispatcher: this.agent,
      });
      const encoding = String(res.headers['content-encoding'] ?? '').toLowerCase();
      const raw =
        req.enough && encoding !== 'gzip'
          ? await readUntil(res.body, req.enough)
          : Buffer.from(await res.body.arrayBuffer());
      const decoded = encoding === 'gzip' ? await gunzipAsync(raw) : raw;
      const text = decoded.toString('utf8');
      this.opts.onResponse?.({
        method: req.method,
        path: req.url.pathname,
        status: res.statusCode,
        bytes: raw.length,
        decodedBytes: decoded.length,
      });
      return { status: res.statusCode, headers: res.headers, text };
    } catch (err) {
      const timedOut = timeout.aborted && !req.signal?.aborted;
      if (req.signal?.aborted)
        throw new ConnectionError(
          req.call,
          `aborted: ${(req.signal.reason as Error)?.message ?? String(req.signal.reason)}`,
          false,
          err,
        );
      throw new ConnectionError(
        req.call,
        timedOut ? `timed out after ${timeoutMs} ms` : connectionWhy(err),
        timedOut,
        err,
      );
    }
  }
}

/** A body read until `enough` says the text so far will do (then the rest is not waited for). */
async function readUntil(body: AsyncIterable<Buffer>, enough: (text: string) => boolean): Promise<Buffer> {
  const chunks: Buffer[] = [];
  const decoder = new TextDecoder();
  let text = '';
  for await (const chunk of body) {
    chunks.push(chunk);
    text += decoder.decode(chunk, { stream: true });
    if (enough(text)) break;
  }
  return Buffer.concat(chunks);
}

/** A connection failure in one line: TLS errors in words, not OpenSSL's source location. */
export function connectionWhy(err: unknown): string {
  const e = err as NodeJS.ErrnoException & { reason?: string };
  const text = String(e.message ?? err);
  if (/wrong version number|WRONG_VERSION_NUMBER|packet length too long/i.test(text))
    return 'TLS handshake failed: the server does not speak TLS (is its URL http:// rather than https://?)';
  if (e.code === 'ERR_SSL_WRONG_VERSION_NUMBER') return 'TLS handshake failed: the server does not speak TLS';
  if (/certificate|self[- ]signed|UNABLE_TO_VERIFY|CERT_/i.test(`${e.code ?? ''} ${text}`))
    return `TLS: the server's certificate is not trusted (${e.code ?? text.split('\n')[0]}): check the kubeconfig's certificate-authority`;
  return text
    .split('\n')[0]!
    .replace(/:\.\.\/deps\/openssl\S*$/, '')
    .trim();
}
