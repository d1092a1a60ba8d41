/**
 * The webhook sink: one summary message per run (counts, the first keys, the exit code,
 * where to see the rest), as plain JSON or as a Slack-compatible `{ text }` body. It is
 * sent after the run has decided and acted: a slow or failing receiver is logged and
 * counted, never fails the run, never delays a deletion. The URL is a secret (Slack's
 * carry their token): it never appears in a log line, only where it came from.
 */

import type { Config } from '../config.ts';
import { ConnectionError, HttpTransport } from '../http/transport.ts';
import type { Logger } from '../log/logger.ts';
import type { RunResult } from '../outcome.ts';
import type { Time } from '../time.ts';

export type NotifyOn =
  | 'refused'
  | 'aborted'
  | 'failed'
  | 'locked'
  | 'approval'
  | 'held'
  | 'deleted'
  | 'confirmed-dry-run';
const DEFAULT_ON: readonly NotifyOn[] = ['refused', 'aborted', 'failed', 'approval', 'held', 'deleted'];

export type Webhook = Readonly<{
  url: string;
  /** Where the URL came from, for logs (never the URL). */
  from: string;
  format: 'json' | 'slack';
  timeoutMs: number;
  on: readonly NotifyOn[];
  maxKeys: number;
}>;

/** The configured webhook, or undefined; an env variable named but empty is a config error. */
export function webhookFrom(
  cfg: Config,
  env: Readonly<Record<string, string | undefined>>,
): Webhook | { error: string } | undefined {
  const w = cfg.notify?.webhook;
  if (!w) return undefined;
  const name = w.urlEnv ?? (w.url === undefined ? 'TWOPASS_WEBHOOK_URL' : undefined);
  const url = name ? env[name] : w.url;
  if (!url) return { error: `notify.webhook: $${name} is not set (the webhook URL, from a Secret)` };
  if (!/^https?:\/\//.test(url))
    return { error: `notify.webhook: ${name ? `$${name}` : 'url'} is not an http(s) URL` };
  return {
    url,
    from: name ? `$${name}` : 'notify.webhook.url',
    format: w.format ?? 'json',
    timeoutMs: w.timeout ?? 5_000,
    on: w.on ?? DEFAULT_ON,
    maxKeys: w.maxKeys ?? 10,
  };
}

/** Which of the configured outcomes a run is, if any. */
export function reasonToSend(r: RunResult, on: readonly NotifyOn[]): NotifyOn | undefined {
  if (r.outcome !== 'ok') return on.includes(r.outcome) ? r.outcome : undefined;
  if (r.deleted.length > 0 && on.includes('deleted')) return 'deleted';
  if (r.dryRun && r.confirmed.length > 0 && on.includes('confirmed-dry-run')) return 'confirmed-dry-run';
  return undefined;
}

export function message(r: RunResult, why: NotifyOn, maxKeys: number): Record<string, unknown> {
  const keys = r.deleted.length > 0 ? r.deleted : r.confirmed;
  const shown = keys.slice(0, maxKeys);
  return {
    source: 'twopass',
    function: r.function,
    runId: r.runId,
    why,
    outcome: r.outcome,
    exitCode: r.exitCode,
    dryRun: r.dryRun,
    counts: {
      confirmed: r.confirmed.length,
      deleted: r.deleted.length,
      skipped: r.skipped.length,
      failed: r.failed.length,
    },
    keys: shown,
    moreKeys: keys.length - shown.length,
    ...(r.error ? { error: r.error } : {}),
    rest: `every event of this run is in its log (runId ${r.runId}); \`twopass state show ${r.function}\` shows the candidates`,
  };
}

function slackText(m: Record<string, unknown>): string {
  const c = m.counts as Record<string, number>;
  const keys = m.keys as string[];
  const head = `twopass ${m.function}: ${m.why} (exit ${m.exitCode}${m.dryRun ? ', dry run' : ''})`;
  const counts = `confirmed ${c.confirmed}, deleted ${c.deleted}, skipped ${c.skipped}, failed ${c.failed}`;
  const list = keys.length ? `\n${keys.map((k) => `• ${k}`).join('\n')}` : '';
  const more = Number(m.moreKeys) > 0 ? `\n…and ${m.moreKeys} more` : '';
  const error = m.error ? `\n${m.error}` : '';
  return `${head}: ${counts}${error}${list}${more}\n${m.rest}`;
}

/**
 * Sends the run's summary when its outcome is one to send, on the one HTTP transport (its
 * timeouts, and its retries of a 429/5xx or a lost connection, as every other call);
 * failures are logged and reported, never thrown.
 */
export async function notifyRun(
  w: Webhook,
  r: RunResult,
  log: Logger,
  failed: (fn: string) => void,
  time: Time,
): Promise<void> {
  const why = reasonToSend(r, w.on);
  if (!why) return;
  const m = message(r, why, w.maxKeys);
  const body = JSON.stringify(w.format === 'slack' ? { text: slackText(m) } : m);
  const fail = (reason: string) => {
    log.warn({ event: 'notify.failed', function: r.function, webhook: w.from, reason }, 'notify.failed');
    failed(r.function);
  };
  const http = new HttpTransport({
    api: 'webhook',
    time,
    timeoutMs: w.timeoutMs,
    readAttempts: 3,
    connections: 1,
  });
  try {
    const res = await http.send({
      call: 'webhook',
      method: 'POST',
      url: new URL(w.url),
      headers: { 'content-type': 'application/json' },
      body,
      signal: time.timeout(w.timeoutMs * 3),
      // A notification sent twice is better than one lost: a 429/5xx or a lost connection is retried.
      retry: true,
    });
    if (res.status >= 300) return fail(`HTTP ${res.status}`);
    log.info({ event: 'notify.sent', function: r.function, webhook: w.from, why }, 'notify.sent');
  } catch (err) {
    // The error text of a failed request can carry the URL: say only what kind of failure it was.
    fail(
      err instanceof ConnectionError
        ? err.timedOut || /aborted|timed out|TimeoutError/.test(err.detail)
          ? `no answer within ${w.timeoutMs} ms`
          : 'no connection'
        : ((err as { name?: string }).name ?? 'error'),
    );
  } finally {
    await http.close();
  }
}
