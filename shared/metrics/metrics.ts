/**
 * Prometheus metrics per function (prom-client), fed by the run loop's `finished` hook.
 *
 * Two audiences: `twopass schedule` serves /metrics from a long-lived process (counters
 * make sense there), while CronJob runs live seconds and push to a Pushgateway or write a
 * node-exporter textfile. For those, every fact an alert needs is a gauge about the *last
 * run* (its time, outcome, counts), and the last success survives a failed run: the
 * Pushgateway keeps it because a failed run's push (POST) does not carry it, and the
 * textfile carries it over from the previous file.
 */
import { readFile, rename, writeFile } from 'node:fs/promises';
import { Counter, Gauge, Pushgateway, Registry } from 'prom-client';
import { REFUSAL_GUARDS } from '../engine/types.ts';
import type { RunHooks, RunOutcome, RunResult } from '../outcome.ts';

/** Places named in the metrics per function (the rest are summed per kind as OTHER): bounded cardinality. */
export const TOP_PLACES = 10;
export const OTHER = '(other)';

/**
 * The places of a run with bounded cardinality: the TOP_PLACES with the most candidates and
 * deletions keep their name, the rest are summed per kind under OTHER; an empty place is
 * "(none)".
 */
export function boundedPlaces(places: NonNullable<RunResult['places']>) {
  const score = (p: (typeof places)[number]) => p.candidates + p.deleted;
  const ranked = [...places].sort((a, b) => score(b) - score(a) || a.place.localeCompare(b.place));
  const out = ranked.slice(0, TOP_PLACES).map((p) => ({ ...p, place: p.place || '(none)' }));
  const rest = new Map<string, { candidates: number; confirmed: number; deleted: number }>();
  for (const p of ranked.slice(TOP_PLACES)) {
    const r = rest.get(p.kind) ?? { candidates: 0, confirmed: 0, deleted: 0 };
    r.candidates += p.candidates;
    r.confirmed += p.confirmed;
    r.deleted += p.deleted;
    rest.set(p.kind, r);
  }
  for (const [kind, r] of rest) out.push({ kind, place: OTHER, ...r });
  return out;
}

export const OUTCOMES: readonly RunOutcome[] = [
  'ok',
  'failed',
  'aborted',
  'refused',
  'locked',
  'approval',
  'held',
];
const LAST_SUCCESS = 'twopass_last_success_timestamp_seconds';

/** The gauges of one function's last run, in `registry`. */
class LastRun {
  private readonly g: Record<string, Gauge>;
  constructor(registry: Registry) {
    const gauge = (name: string, help: string, labels: string[] = []) =>
      new Gauge({
        name: `twopass_${name}`,
        help,
        labelNames: ['function', ...labels],
        registers: [registry],
      });
    this.g = {
      at: gauge('last_run_timestamp_seconds', 'End of the last run, whatever its outcome.'),
      outcome: gauge('last_run_outcome', 'Outcome of the last run: 1 for it, 0 for the others.', ['outcome']),
      exit: gauge('last_run_exit_code', 'Exit code of the last run.'),
      duration: gauge('run_duration_seconds', 'Duration of the last run.'),
      confirmed: gauge('last_run_confirmed', 'Targets confirmed unused by the last run (dry run or not).'),
      deleted: gauge('last_run_deleted', 'Resources the last run deleted, by kind.', ['kind']),
      skipped: gauge('last_run_skipped', 'Deletions the last run skipped (re-check or precondition).'),
      failed: gauge('last_run_failed', 'Deletions the last run could not do.'),
      refused: gauge('last_run_refused', '1 when the last run was refused by a blast-radius guard.'),
      held: gauge(
        'last_run_held',
        'Confirmed deletions the last run held and did not attempt (lbaas-ports: the ch-k8s-lbaas controller was running).',
      ),
      unproven: gauge(
        'last_run_unproven',
        'Of the resources the last run counted as deleted, those another cleaner may have deleted at the same moment (both DELETEs answered 204).',
      ),
      targets: gauge('targets', 'Targets in the last complete snapshot.'),
      used: gauge('evidence_in_use', 'Targets with evidence of use in the last complete snapshot.'),
      candidates: gauge(
        'candidates',
        'Targets seen unused (new + pending + confirmed) in the last snapshot.',
      ),
      pending: gauge('pending', 'Candidates waiting for their grace window.'),
      indeterminate: gauge('indeterminate', 'Targets whose use could not be decided.'),
      notify: gauge('last_run_notify_failed', "1 when the last run's notification was not delivered."),
      placeCandidates: gauge(
        'place_candidates',
        `Candidates (pending or confirmed) at the end of the last run, by kind and the object the leak sits in (network, pool, namespace, project; the top ${TOP_PLACES}, the rest as "${OTHER}").`,
        ['kind', 'place'],
      ),
      placeConfirmed: gauge('place_confirmed', 'Targets the last run confirmed unused, by kind and place.', [
        'kind',
        'place',
      ]),
      placeDeleted: gauge('place_deleted', 'Targets the last run deleted, by kind and place.', [
        'kind',
        'place',
      ]),
      oldest: gauge(
        'oldest_candidate_age_seconds',
        'Age of the oldest candidate at the end of the last run (0: none): one that outlives several graces is never being reclaimed.',
      ),
      grace: gauge('grace_seconds', "The function's grace window."),
      refusedBy: gauge(
        'last_run_refused_by',
        '1 for each blast-radius guard that refused the last run (evidence-drop, max-deletions, max-deletion-percent), 0 for the others.',
        ['guard'],
      ),
      requests: gauge(
        'last_run_requests',
        'Requests the last run sent, by API (kubernetes, openstack, webhook); each attempt of a retried call counts.',
        ['api'],
      ),
      evidence: gauge('evidence', 'Evidence of use listed by the last complete snapshot, by source.', [
        'source',
      ]),
      baseline: gauge(
        'evidence_baseline',
        'The evidence counts the last run was guarded against (maxEvidenceDropPercent), by source.',
        ['source'],
      ),
    };
  }

  /** The place series each function's last run set (the next run's replace them). */
  private readonly placeSeries = new Map<string, { kind: string; place: string }[]>();

  private setPlaces(fn: string, places: NonNullable<RunResult['places']>): void {
    const g = this.g;
    for (const l of this.placeSeries.get(fn) ?? [])
      for (const m of [g.placeCandidates!, g.placeConfirmed!, g.placeDeleted!])
        m.remove({ function: fn, ...l });
    const rows = boundedPlaces(places);
    for (const r of rows) {
      const l = { function: fn, kind: r.kind, place: r.place };
      g.placeCandidates!.set(l, r.candidates);
      g.placeConfirmed!.set(l, r.confirmed);
      g.placeDeleted!.set(l, r.deleted);
    }
    this.placeSeries.set(
      fn,
      rows.map((r) => ({ kind: r.kind, place: r.place })),
    );
  }

  /** The label values each function's last run set on a gauge (the next run's replace them). */
  private readonly series = new Map<Gauge, Map<string, string[]>>();

  /** Sets one series a `label` value of `values`, removing those of the function's previous run that it lacks. */
  private replace(
    gauge: Gauge,
    label: string,
    fn: string,
    values: Readonly<Record<string, number>> | undefined,
  ) {
    const byFn = this.series.get(gauge) ?? new Map<string, string[]>();
    this.series.set(gauge, byFn);
    const now = values ?? {};
    for (const v of byFn.get(fn) ?? []) if (!(v in now)) gauge.remove({ function: fn, [label]: v });
    for (const [v, n] of Object.entries(now)) gauge.set({ function: fn, [label]: v }, n);
    byFn.set(fn, Object.keys(now));
  }

  /** The kinds each function's last run deleted (their series are this run's, or none). */
  private readonly deletedKinds = new Map<string, Set<string>>();

  notifyFailed(fn: string): void {
    this.g.notify!.set({ function: fn }, 1);
  }

  set(r: RunResult, endSeconds: number): void {
    const l = { function: r.function };
    const g = this.g;
    g.at!.set(l, endSeconds);
    for (const o of OUTCOMES) g.outcome!.set({ ...l, outcome: o }, o === r.outcome ? 1 : 0);
    g.exit!.set(l, r.exitCode);
    g.duration!.set(l, r.durationMs / 1000);
    g.confirmed!.set(l, r.confirmed.length);
    // Only the kinds of this run: a kind the previous run deleted and this one did not is removed.
    for (const kind of this.deletedKinds.get(r.function) ?? [])
      if (!(kind in r.deletedByKind)) g.deleted!.remove({ ...l, kind });
    for (const [kind, n] of Object.entries(r.deletedByKind)) g.deleted!.set({ ...l, kind }, n);
    this.deletedKinds.set(r.function, new Set(Object.keys(r.deletedByKind)));
    g.skipped!.set(l, r.skipped.length);
    g.failed!.set(l, r.failed.length);
    g.refused!.set(l, r.outcome === 'refused' ? 1 : 0);
    g.held!.set(l, r.held.length);
    g.unproven!.set(
      l,
      Object.values(r.unprovenByKind ?? {}).reduce((a, b) => a + b, 0),
    );
    g.notify!.set(l, 0);
    if (r.summary) {
      g.targets!.set(l, r.summary.targets);
      g.used!.set(l, r.summary.used);
      g.candidates!.set(l, r.summary.newCandidates + r.summary.pending + r.summary.confirmed);
      g.pending!.set(l, r.summary.pending);
      g.indeterminate!.set(l, r.summary.indeterminate);
    }
    if (r.places) this.setPlaces(r.function, r.places);
    const guards = new Set(r.notices.flatMap((n) => (n.event === 'run.refused' ? n.guards : [])));
    for (const guard of REFUSAL_GUARDS) g.refusedBy!.set({ ...l, guard }, guards.has(guard) ? 1 : 0);
    this.replace(g.requests!, 'api', r.function, r.requests);
    if (r.evidence) this.replace(g.evidence!, 'source', r.function, r.evidence);
    if (r.evidence) this.replace(g.baseline!, 'source', r.function, r.evidenceBaseline ?? {});
    if (r.oldestCandidateAgeSeconds !== undefined) g.oldest!.set(l, r.oldestCandidateAgeSeconds);
    if (r.graceSeconds !== undefined) g.grace!.set(l, r.graceSeconds);
  }
}

function buildInfo(registry: Registry, version: string): void {
  new Gauge({
    name: 'twopass_build_info',
    help: 'Always 1: the twopass version and the Node.js version running it.',
    labelNames: ['version', 'node'],
    registers: [registry],
  }).set({ version, node: process.versions.node }, 1);
}

function lastSuccessGauge(registry: Registry): Gauge {
  return new Gauge({
    name: LAST_SUCCESS,
    help: 'End of the last run that exited 0.',
    labelNames: ['function'],
    registers: [registry],
  });
}

export class RunMetrics {
  readonly registry = new Registry();
  private readonly last: LastRun;
  private readonly lastSuccess: Gauge;
  private readonly runs: Counter;
  private readonly deletedTotal: Counter;
  private readonly rescued: Counter;
  private readonly notifyFailures: Counter;
  private readonly clock: () => number;
  private readonly version: string;
  /** The last result of each function, for its own push. */
  private readonly results = new Map<string, { r: RunResult; at: number }>();
  private readonly notifyFailedFns = new Set<string>();

  constructor(clock: () => number, version: string) {
    this.clock = clock;
    this.version = version;
    buildInfo(this.registry, version);
    this.last = new LastRun(this.registry);
    this.lastSuccess = lastSuccessGauge(this.registry);
    const counter = (name: string, help: string, labels: string[]) =>
      new Counter({ name: `twopass_${name}`, help, labelNames: labels, registers: [this.registry] });
    this.runs = counter('runs_total', 'Runs by outcome, since this process started.', [
      'function',
      'outcome',
    ]);
    this.deletedTotal = counter('deleted_total', 'Resources deleted, since this process started.', [
      'function',
      'kind',
    ]);
    this.rescued = counter('rescued_total', 'Candidates seen in use again (races prevented).', ['function']);
    this.notifyFailures = counter('notify_failures_total', 'Run notifications the webhook did not accept.', [
      'function',
    ]);
  }

  record(r: RunResult): void {
    const at = this.clock() / 1000;
    const l = { function: r.function };
    this.results.set(r.function, { r, at });
    this.notifyFailedFns.delete(r.function);
    this.last.set(r, at);
    this.runs.inc({ ...l, outcome: r.outcome });
    for (const [kind, n] of Object.entries(r.deletedByKind)) this.deletedTotal.inc({ ...l, kind }, n);
    if (r.summary) this.rescued.inc(l, r.summary.rescued);
    if (r.exitCode === 0) this.lastSuccess.set(l, at);
  }

  hooks(): RunHooks {
    return {
      finished: (r) => this.record(r),
      notifyFailed: (fn) => {
        this.notifyFailures.inc({ function: fn });
        this.notifyFailedFns.add(fn);
        this.last.notifyFailed(fn);
      },
    };
  }

  text(): Promise<string> {
    return this.registry.metrics();
  }

  /**
   * Pushes one function's last run to a Pushgateway as its own group (job `twopass`,
   * `function` label): one registry per push, so no function carries another's series.
   * POST, so a failed run leaves the group's last success in place.
   */
  async push(gateway: string, fn: string): Promise<void> {
    const last = this.results.get(fn);
    if (!last) return;
    const registry = new Registry();
    buildInfo(registry, this.version);
    const lastRun = new LastRun(registry);
    lastRun.set(last.r, last.at);
    if (this.notifyFailedFns.has(fn)) lastRun.notifyFailed(fn);
    if (last.r.exitCode === 0) lastSuccessGauge(registry).set({ function: fn }, last.at);
    await new Pushgateway(gateway, { timeout: 10_000 }, registry).pushAdd({
      jobName: 'twopass',
      groupings: { function: fn },
    });
  }

  /**
   * Writes the node-exporter textfile atomically. A function whose last run here did not
   * succeed keeps the last success the previous file recorded.
   */
  async writeTextfile(path: string): Promise<void> {
    const before = await readFile(path, 'utf8').catch(() => '');
    for (const [fn, { r }] of this.results) {
      if (r.exitCode === 0) continue;
      const m = new RegExp(`^${LAST_SUCCESS}\\{function="${fn}"\\} (\\S+)$`, 'm').exec(before);
      if (m) this.lastSuccess.set({ function: fn }, Number(m[1]));
    }
    // One file may be shared by the runs of several functions (one CronJob each, one
    // textfile): the series of the other functions are kept, this run's are replaced.
    const text = mergeTextfile(before, await this.text(), new Set(this.results.keys()));
    await writeFile(`${path}.tmp`, text);
    await rename(`${path}.tmp`, path);
  }
}

/**
 * The Prometheus text of this run, with the samples of `before` whose `function` label is
 * another function's kept in their families (one HELP and TYPE a family, as the textfile
 * collector requires).
 */
export function mergeTextfile(before: string, fresh: string, mine: ReadonlySet<string>): string {
  const families = new Map<string, { meta: string[]; samples: string[] }>();
  const read = (text: string, keep: (sample: string) => boolean) => {
    let current: { meta: string[]; samples: string[] } | undefined;
    for (const line of text.split('\n')) {
      if (line === '') continue;
      const m = /^# (HELP|TYPE) (\S+)/.exec(line);
      if (m) {
        current = families.get(m[2]!) ?? { meta: [], samples: [] };
        families.set(m[2]!, current);
        if (!current.meta.some((l) => l.startsWith(`# ${m[1]} `))) current.meta.push(line);
        continue;
      }
      if (line.startsWith('#') || !current || !keep(line)) continue;
      if (!current.samples.includes(line)) current.samples.push(line);
    }
  };
  read(fresh, () => true);
  read(before, (sample) => {
    const fn = /[{,]function="([^"]*)"/.exec(sample)?.[1];
    return fn !== undefined && !mine.has(fn);
  });
  return `${[...families.values()].map((f) => [...f.meta, ...f.samples].join('\n')).join('\n')}\n`;
}
