/**
 * The Grafana dashboard of twopass, built with Grafana's typed builders. Every query is a
 * record in `PANELS` with the labels each series it returns must carry: the monitoring
 * suite evaluates each on a real Prometheus after real runs and fails on one that returns
 * nothing, errors, or lacks a promised label.
 *
 * Written to the three places that ship it by `npm run dashboard` (a test fails when they
 * differ from what this file builds): infra/monitoring/, the Helm chart's files/ and the
 * kustomize monitoring component.
 */
import { writeFileSync } from 'node:fs';
import type * as cog from '@grafana/grafana-foundation-sdk/cog';
import {
  DashboardBuilder,
  DatasourceVariableBuilder,
  QueryVariableBuilder,
  RowBuilder,
  VariableRefresh,
  VariableSort,
} from '@grafana/grafana-foundation-sdk/dashboard';
import { DataqueryBuilder } from '@grafana/grafana-foundation-sdk/prometheus';
import { PanelBuilder as StatPanel } from '@grafana/grafana-foundation-sdk/stat';
import { PanelBuilder as TablePanel } from '@grafana/grafana-foundation-sdk/table';
import { PanelBuilder as TimeseriesPanel } from '@grafana/grafana-foundation-sdk/timeseries';

/** One query of a panel, and what every series it returns must be labelled with. */
export type PanelQuery = Readonly<{ expr: string; legend: string; promises: readonly string[] }>;

export type PanelSpec = Readonly<{
  row: string;
  title: string;
  description: string;
  kind: 'timeseries' | 'stat' | 'table';
  unit?: string;
  queries: readonly PanelQuery[];
}>;

/** The function filter every query carries (the dashboard's `function` variable). */
const F = 'function=~"$function"';

const q = (expr: string, legend: string, promises: readonly string[]): PanelQuery => ({
  expr,
  legend,
  promises,
});

export const PANELS: readonly PanelSpec[] = [
  {
    row: 'Runs',
    title: 'Last run outcome',
    description:
      "The outcome of each function's last run: ok, refused (a blast-radius guard), aborted (a snapshot incomplete: nothing deleted), failed, locked (another run held the lock), approval (waiting for a human), held (a producer that hands out from memory was running).",
    kind: 'stat',
    queries: [
      q(`max by (function, outcome) (twopass_last_run_outcome{${F}}) == 1`, '{{function}}: {{outcome}}', [
        'function',
        'outcome',
      ]),
    ],
  },
  {
    row: 'Runs',
    title: 'Since the last successful run',
    description: 'Time since the last run that exited 0. The alert TwopassNoSuccess fires past 15 minutes.',
    kind: 'stat',
    unit: 's',
    queries: [
      q(`time() - max by (function) (twopass_last_success_timestamp_seconds{${F}})`, '{{function}}', [
        'function',
      ]),
    ],
  },
  {
    row: 'Runs',
    title: 'Since the last run (the schedule)',
    description:
      'Time since the last run ended, whatever its outcome: a line that climbs past the schedule is a CronJob that no longer runs (suspended, failing to start, or its pushes lost).',
    kind: 'timeseries',
    unit: 's',
    queries: [
      q(`time() - max by (function) (twopass_last_run_timestamp_seconds{${F}})`, '{{function}}', [
        'function',
      ]),
    ],
  },
  {
    row: 'Runs',
    title: 'Runs by outcome (twopass schedule)',
    description:
      'Runs of the in-process scheduler by outcome (a counter since it started; CronJob runs report their last run only).',
    kind: 'timeseries',
    queries: [
      q(
        `sum by (function, outcome) (increase(twopass_runs_total{${F}}[$__rate_interval]))`,
        '{{function}} {{outcome}}',
        ['function', 'outcome'],
      ),
    ],
  },
  {
    row: 'Runs',
    title: 'Lock held by another run',
    description:
      "1 when the last run found the function's lock (a Lease, or a lock file) held by another run and did nothing: two schedules of one function, or a run by hand beside the CronJob.",
    kind: 'timeseries',
    queries: [
      q(`max by (function) (twopass_last_run_outcome{${F}, outcome="locked"})`, '{{function}}', ['function']),
    ],
  },
  {
    row: 'Candidates and deletions',
    title: 'Candidates, pending and confirmed',
    description:
      'Targets seen unused (new, pending and confirmed), those waiting for their grace, and those confirmed unused by two complete snapshots a grace apart (a dry run confirms too).',
    kind: 'timeseries',
    queries: [
      q(`max by (function) (twopass_candidates{${F}})`, '{{function}} candidates', ['function']),
      q(`max by (function) (twopass_pending{${F}})`, '{{function}} pending', ['function']),
      q(`max by (function) (twopass_last_run_confirmed{${F}})`, '{{function}} confirmed', ['function']),
    ],
  },
  {
    row: 'Candidates and deletions',
    title: 'Deleted by the last run, by kind',
    description:
      'Resources the last run deleted (tombstone written, precondition sent, confirmed gone by a read).',
    kind: 'timeseries',
    queries: [
      q(`sum by (function, kind) (twopass_last_run_deleted{${F}})`, '{{function}} {{kind}}', [
        'function',
        'kind',
      ]),
    ],
  },
  {
    row: 'Candidates and deletions',
    title: 'Deleted over time (twopass schedule)',
    description: 'Deletions of the in-process scheduler, by kind.',
    kind: 'timeseries',
    queries: [
      q(
        `sum by (function, kind) (increase(twopass_deleted_total{${F}}[$__rate_interval]))`,
        '{{function}} {{kind}}',
        ['function', 'kind'],
      ),
    ],
  },
  {
    row: 'Candidates and deletions',
    title: 'Rescued: races prevented',
    description:
      'Candidates seen in use again before their grace ended (an endpoint that appeared late, a pod re-created under the same name): each one a deletion another cleaner might have made.',
    kind: 'timeseries',
    queries: [
      q(`sum by (function) (increase(twopass_rescued_total{${F}}[$__rate_interval]))`, '{{function}}', [
        'function',
      ]),
    ],
  },
  {
    row: 'Candidates and deletions',
    title: 'Skipped, failed and held deletions',
    description:
      'Confirmed deletions the last run skipped (in use or changed at the re-check, a failed precondition), could not do, or held (a producer that hands out from memory was running).',
    kind: 'timeseries',
    queries: [
      q(`max by (function) (twopass_last_run_skipped{${F}})`, '{{function}} skipped', ['function']),
      q(`max by (function) (twopass_last_run_failed{${F}})`, '{{function}} failed', ['function']),
      q(`max by (function) (twopass_last_run_held{${F}})`, '{{function}} held', ['function']),
    ],
  },
  {
    row: 'Where',
    title: 'Candidates by place',
    description:
      'Where the candidates sit: the network, pool, namespace or project (the ten largest named, the rest as "(other)"). A place that keeps growing is a producer leaking there.',
    kind: 'table',
    queries: [
      q(`max by (function, kind, place) (twopass_place_candidates{${F}})`, '{{place}}', [
        'function',
        'kind',
        'place',
      ]),
    ],
  },
  {
    row: 'Where',
    title: 'Deleted by place (last run)',
    description: 'What the last run deleted, by place.',
    kind: 'table',
    queries: [
      q(`max by (function, kind, place) (twopass_place_deleted{${F}})`, '{{place}}', [
        'function',
        'kind',
        'place',
      ]),
    ],
  },
  {
    row: 'Guards',
    title: 'Refusals by guard',
    description:
      '1 for each blast-radius guard that refused the last run: evidence-drop (evidence of use shrank: accept with `twopass state accept-evidence` if real), max-deletions, max-deletion-percent.',
    kind: 'timeseries',
    queries: [
      q(`max by (function, guard) (twopass_last_run_refused_by{${F}})`, '{{function}} {{guard}}', [
        'function',
        'guard',
      ]),
    ],
  },
  {
    row: 'Guards',
    title: 'Evidence of use against its baseline',
    description:
      'Evidence listed by the last complete snapshot, by source, beside the counts the evidence guard compared it with: a gap above maxEvidenceDropPercent refuses the run.',
    kind: 'timeseries',
    queries: [
      q(`max by (function, source) (twopass_evidence{${F}})`, '{{function}} {{source}}', [
        'function',
        'source',
      ]),
      q(`max by (function, source) (twopass_evidence_baseline{${F}})`, '{{function}} {{source}} baseline', [
        'function',
        'source',
      ]),
    ],
  },
  {
    row: 'Guards',
    title: 'Indeterminate targets',
    description:
      'Targets whose use could not be decided: never deleted; each has its reason in the diff log.',
    kind: 'timeseries',
    queries: [q(`max by (function) (twopass_indeterminate{${F}})`, '{{function}}', ['function'])],
  },
  {
    row: 'Guards',
    title: 'Oldest candidate against the grace',
    description:
      'Age of the oldest candidate beside the grace window: one that outlives several graces is never being reclaimed (TwopassCandidatesStuck).',
    kind: 'timeseries',
    unit: 's',
    queries: [
      q(`max by (function) (twopass_oldest_candidate_age_seconds{${F}})`, '{{function}} oldest', [
        'function',
      ]),
      q(`max by (function) (twopass_grace_seconds{${F}})`, '{{function}} grace', ['function']),
    ],
  },
  {
    row: 'Cost',
    title: 'Run duration',
    description: 'How long the last run took, listing to the last deletion.',
    kind: 'timeseries',
    unit: 's',
    queries: [q(`max by (function) (twopass_run_duration_seconds{${F}})`, '{{function}}', ['function'])],
  },
  {
    row: 'Cost',
    title: 'Requests per run, by API',
    description:
      'Requests the last run sent to the Kubernetes API server, OpenStack and the webhook (each attempt of a retried call counts).',
    kind: 'timeseries',
    queries: [
      q(`max by (function, api) (twopass_last_run_requests{${F}})`, '{{function}} {{api}}', [
        'function',
        'api',
      ]),
    ],
  },
  {
    row: 'Cost',
    title: 'Versions running',
    description: 'The twopass and Node.js versions that pushed or served metrics.',
    kind: 'table',
    queries: [
      q('count by (version, node) (twopass_build_info)', '{{version}} on Node {{node}}', ['version', 'node']),
    ],
  },
];

// biome-ignore lint/suspicious/noTemplateCurlyInString: Grafana's own variable syntax
const DS = { type: 'prometheus', uid: '${datasource}' };

function panelOf(p: PanelSpec, id: number): cog.Builder<unknown> {
  const targets = p.queries.map((x, i) => {
    const t = new DataqueryBuilder()
      .datasource(DS)
      .refId(String.fromCharCode(65 + i))
      .expr(x.expr)
      .legendFormat(x.legend);
    // a graph over time asks for a range; a stat or a table for the value now
    return p.kind === 'timeseries' ? t.range() : t.instant();
  });
  const panel =
    p.kind === 'stat' ? new StatPanel() : p.kind === 'table' ? new TablePanel() : new TimeseriesPanel();
  panel
    .id(id)
    .title(p.title)
    .description(p.description)
    .datasource(DS)
    .height(8)
    .span(p.kind === 'stat' ? 6 : 12);
  if (p.unit) panel.unit(p.unit);
  for (const t of targets) panel.withTarget(t);
  return panel;
}

/** The dashboard model, as Grafana stores it (JSON). */
export function buildDashboard(): unknown {
  const d = new DashboardBuilder('twopass')
    .uid('twopass')
    .description(
      'What twopass, the garbage collector of leaked network resources, did: its runs, candidates, deletions by place, the guards that refused, evidence against its baseline, and what the runs cost.',
    )
    .tags(['twopass'])
    .refresh('1m')
    .time({ from: 'now-24h', to: 'now' })
    .timezone('browser')
    .withVariable(new DatasourceVariableBuilder('datasource').label('Prometheus').type('prometheus'))
    .withVariable(
      new QueryVariableBuilder('function')
        .label('Function')
        .datasource(DS)
        .query('label_values(twopass_last_run_timestamp_seconds, function)')
        .refresh(VariableRefresh.OnTimeRangeChanged)
        .sort(VariableSort.AlphabeticalAsc)
        .multi(true)
        .includeAll(true)
        .allValue('.+'),
    );
  let row: string | undefined;
  let id = 0;
  for (const p of PANELS) {
    if (p.row !== row) {
      row = p.row;
      d.withRow(new RowBuilder(row).id(++id));
    }
    d.withPanel(panelOf(p, ++id) as Parameters<typeof d.withPanel>[0]);
  }
  return d.build();
}

/** The JSON text shipped (stable: the same build gives the same bytes). */
export function dashboardJson(): string {
  return `${JSON.stringify(buildDashboard(), null, 2)}\n`;
}

/** Where the dashboard is shipped, from the repository's root. */
export const SHIPPED = [
  'infra/monitoring/twopass-dashboard.json',
  'infra/helm/twopass/files/twopass-dashboard.json',
  'infra/kustomize/components/monitoring/twopass-dashboard.json',
] as const;

if (import.meta.main) {
  const root = new URL('../../', import.meta.url).pathname;
  for (const f of SHIPPED) writeFileSync(`${root}${f}`, dashboardJson());
  console.log(`wrote ${SHIPPED.join(', ')}`);
}
