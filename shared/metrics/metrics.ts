/**
 * Prometheus metrics per function (prom-client): fed by the run loop's
 * `finished` hook; served on /metrics by `twopass schedule`, pushed to a
 * Pushgateway or written to a node-exporter textfile by CronJob runs.
 */
import { rename, writeFile } from 'node:fs/promises';
import { Counter, Gauge, Registry } from 'prom-client';
import { request } from 'undici';
import type { RunHooks, RunResult } from '../runtime/run.ts';

export class RunMetrics {
  readonly registry = new Registry();
  private readonly g: Record<string, Gauge> = {};
  private readonly runs: Counter;
  private readonly deleted: Counter;
  private readonly skipped: Counter;
  private readonly failures: Counter;
  private readonly rescued: Counter;
  private readonly duration: Gauge;
  private readonly lastSuccess: Gauge;
  private readonly clock: () => number;

  constructor(clock: () => number = Date.now) {
    this.clock = clock;
    const gauge = (name: string, help: string) => {
      this.g[name] = new Gauge({
        name: `twopass_${name}`,
        help,
        labelNames: ['function'],
        registers: [this.registry],
      });
    };
    gauge('targets', 'Targets in the last complete snapshot.');
    gauge('evidence_in_use', 'Targets with evidence of use in the last complete snapshot.');
    gauge('candidates', 'Targets seen unused (new + pending + confirmed) in the last complete snapshot.');
    gauge('pending', 'Candidates waiting for their grace window.');
    gauge('indeterminate', 'Targets whose use could not be decided.');
    const counter = (name: string, help: string, labels: string[] = ['function']) =>
      new Counter({ name: `twopass_${name}`, help, labelNames: labels, registers: [this.registry] });
    this.runs = counter('runs_total', 'Runs by outcome (ok, aborted, refused, locked, failed).', [
      'function',
      'outcome',
    ]);
    this.deleted = counter('deleted_total', 'Resources deleted and confirmed gone by a read.');
    this.skipped = counter(
      'skipped_total',
      'Deletions skipped: a re-check found use or a precondition failed.',
    );
    this.failures = counter('failures_total', 'Deletions that failed.');
    this.rescued = counter('rescued_total', 'Candidates seen in use again (races prevented).');
    this.duration = new Gauge({
      name: 'twopass_run_duration_seconds',
      help: 'Duration of the last run.',
      labelNames: ['function'],
      registers: [this.registry],
    });
    this.lastSuccess = new Gauge({
      name: 'twopass_last_success_timestamp_seconds',
      help: 'End of the last run that exited 0.',
      labelNames: ['function'],
      registers: [this.registry],
    });
  }

  record(r: RunResult): void {
    const l = { function: r.function };
    this.runs.inc({ ...l, outcome: r.outcome });
    this.duration.set(l, r.durationMs / 1000);
    this.deleted.inc(l, r.deleted.length);
    this.skipped.inc(l, r.skipped.length);
    this.failures.inc(l, r.failed.length);
    if (r.summary) {
      this.g.targets!.set(l, r.summary.targets);
      this.g.evidence_in_use!.set(l, r.summary.used);
      this.g.candidates!.set(l, r.summary.newCandidates + r.summary.pending + r.summary.confirmed);
      this.g.pending!.set(l, r.summary.pending);
      this.g.indeterminate!.set(l, r.summary.indeterminate);
      this.rescued.inc(l, r.summary.rescued);
    }
    if (r.exitCode === 0) this.lastSuccess.set(l, this.clock() / 1000);
  }

  hooks(): RunHooks {
    return { finished: (r) => this.record(r) };
  }

  text(): Promise<string> {
    return this.registry.metrics();
  }

  /** PUT to a Pushgateway, grouped by job and function. */
  async push(gateway: string, fn: string): Promise<void> {
    const url = `${gateway.replace(/\/+$/, '')}/metrics/job/twopass/function/${encodeURIComponent(fn)}`;
    const res = await request(url, {
      method: 'PUT',
      body: await this.text(),
      headers: { 'content-type': this.registry.contentType },
      headersTimeout: 10_000,
      bodyTimeout: 10_000,
    });
    await res.body.text();
    if (res.statusCode >= 300) throw new Error(`pushgateway ${url}: HTTP ${res.statusCode}`);
  }

  /** Writes the node-exporter textfile atomically. */
  async writeTextfile(path: string): Promise<void> {
    await writeFile(`${path}.tmp`, await this.text());
    await rename(`${path}.tmp`, path);
  }
}
