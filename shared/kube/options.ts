/** The options of the Kubernetes client: where, with what credentials, how patiently. */
import type { TlsOptions, TransportOptions } from '../http/transport.ts';
import type { Time } from '../time.ts';

export type KubeClientOptions = Readonly<{
  server: string;
  headers?: Readonly<Record<string, string>>;
  tls?: TlsOptions;
  /** Per-call timeout. */
  callTimeoutMs?: number;
  /** Attempts for idempotent reads on 429/5xx/connection errors. */
  readAttempts?: number;
  /** The clock, sleeps and timeouts (injected: tests never wait on a real clock). */
  time: Time;
  pageSize?: number;
  /** Restarts of a list after 410 Expired. */
  maxListRestarts?: number;
  connections?: number;
  /** Each list page as it arrives (what, pages and items so far): progress on a terminal. */
  onPage?: (progress: { what: string; pages: number; items: number }) => void;
  /** Ask for gzip, as client-go does (default true): large lists cost a fraction of the bytes. */
  gzip?: boolean;
  /** The User-Agent header (default `twopass`; the runtime adds its version). */
  userAgent?: string;
  /** Counts requests and bytes (on the wire, and decoded), for benchmarks and tests. */
  onResponse?: TransportOptions['onResponse'];
  /**
   * A run's client: a list that answers older than the newest list this client read
   * before it is refused as stale (decision 0007).
   */
  freshLists?: boolean;
}>;

/** One request of the client, as it builds it. */
export type KubeCall = {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  path: string;
  query?: Record<string, string | undefined>;
  body?: unknown;
  contentType?: string;
  accept?: string;
  signal?: AbortSignal | undefined;
  what: string;
  /** Read no further once the text so far will do (a watch). */
  enough?: ((textSoFar: string) => boolean) | undefined;
};
