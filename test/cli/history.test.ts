/**
 * `twopass history` as an operator uses it the morning after: on the file store and on the
 * ConfigMap store (the CronJob's), after the scheduler was restarted, and `explain`
 * pointing into it. The seed incident is the world: the old DanmEps of ss-cinfo-0 and
 * ss-cinfo-4 are reclaimed over two runs a grace apart.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { FUNCTIONS } from '../../functions/index.ts';
import { resolveConfig } from '../../shared/config.ts';
import { CONFIGMAPS } from '../../shared/kube/resources.ts';
import { startScheduler } from '../../shared/runtime/scheduler.ts';
import { seedIncident } from '../../shared/sandbox/scenarios/danm.ts';
import type { RunRecord } from '../../shared/state/history.ts';
import { cliFiles, twopassAsync } from '../helpers/cli.ts';
import { fakeTarget, type KubeTarget } from '../helpers/kube-target.ts';
import { captureLog } from '../helpers/memfn.ts';
import { eventually, testTime } from '../helpers/time.ts';

type Ctx = { t: KubeTarget };
const test = suite<Ctx>('twopass history');
test.before(async (ctx) => {
  ctx.t = await fakeTarget();
});
test.after(async (ctx) => ctx.t.close());

/** The seed incident in a fresh namespace; the config that runs danm-endpoints there with a 1m grace. */
async function incident(t: KubeTarget, dir: string, state: (ns: string) => string) {
  const kube = t.client();
  const ns = await t.namespace();
  const w = await seedIncident.before(kube, ns);
  await seedIncident.nodeLost(kube, w);
  await seedIncident.cniDone(kube, w);
  await kube.close();
  const base = [
    ...cliFiles(
      dir,
      t.kubeconfig(),
      `allowShortGrace: true\nfunctions:\n  danm-endpoints:\n    grace: 1m\n    minAge: 0s\n    settings: { namespaces: [${ns}] }\n`,
    ),
    '--state',
    state(ns),
  ];
  const at = (ms: number) => ({ TWOPASS_CLOCK_START: String(ms) });
  // the runs' clock starts now, after the objects were made (the fake server stamps them with the real clock)
  const start = Date.now();
  const first = await twopassAsync(['run', 'danm-endpoints', ...base, '--record'], at(start));
  assert.is(first.code, 0, first.err);
  const second = await twopassAsync(['run', 'danm-endpoints', ...base, '--apply'], at(start + 2 * 60_000));
  assert.is(second.code, 0, second.err);
  return { ns, w, base, start, oldUid: w.oldEps['ss-cinfo-0']!.metadata.uid };
}

async function historyOf(base: string[]): Promise<RunRecord[]> {
  const r = await twopassAsync(['history', 'danm-endpoints', ...base, '--output', 'json']);
  assert.is(r.code, 0, r.err);
  return (r.json()[0] as { runs: RunRecord[] }).runs;
}

test('file store: the table lists the runs newest first with their counts; one run in full names what it deleted and why; explain points into it', async ({
  t,
}) => {
  const dir = mkdtempSync(join(tmpdir(), 'twopass-hist-'));
  const { ns, base, oldUid, start } = await incident(t, dir, () => `file:${join(dir, 'state')}`);
  const runs = await historyOf(base);
  assert.is(runs.length, 2);
  const [apply, record] = runs as [RunRecord, RunRecord];
  assert.ok(record.dryRun && !apply.dryRun, 'newest first: the deleting run, then the recording dry run');
  assert.ok(record.startedAt >= start && record.startedAt < start + 60_000, `${record.startedAt}`);
  const deleted = apply.lists.deleted?.items ?? [];
  assert.is(apply.lists.deleted?.n, 2, JSON.stringify(apply.lists));
  assert.ok(
    deleted.some((d) => d.key === oldUid && d.name?.startsWith(`${ns}/ss-cinfo-0 eth0`)),
    JSON.stringify(deleted),
  );
  assert.ok(
    record.lists.new?.items.some((i) => i.key === oldUid),
    'the first run saw it unused first',
  );
  const table = await twopassAsync(['history', 'danm-endpoints', ...base, '--output', 'table']);
  assert.is(table.code, 0, table.err);
  const lines = table.out.split('\n');
  assert.match(lines[0]!, /the last 2 of 2 runs kept in file:/);
  assert.match(
    lines[1]!,
    /^STARTED\s+RUN\s+MODE\s+OUTCOME\s+NEW\s+PENDING\s+RESCUED\s+RESET\s+INDET\s+CONFIRMED\s+DELETED\s+TOOK/,
  );
  assert.match(
    lines[2]!,
    new RegExp(
      `^${new Date(apply.startedAt).toISOString().slice(0, 19)}Z\\s+${apply.runId.slice(0, 8)}\\s+apply\\s+ok\\s+(\\d+\\s+){5}2\\s+2\\s`,
    ),
  );
  assert.match(lines[3]!, /^\d{4}-\d\d-\d\dT[\d:]{8}Z\s+\S{8}\s+dry\s+ok\s/);
  const one = await twopassAsync([
    'history',
    'danm-endpoints',
    ...base,
    '--run',
    apply.runId.slice(0, 8),
    '--output',
    'table',
  ]);
  assert.is(one.code, 0, one.err);
  assert.match(one.out, new RegExp(`danm-endpoints run ${apply.runId}`));
  assert.match(one.out, /deleting run: ok, exit 0/);
  assert.match(one.out, /^confirmed \(2\): unused in two complete snapshots a grace apart$/m);
  assert.match(one.out, /^deleted \(2\): deleted by this run/m);
  assert.match(one.out, new RegExp(`DanmEp ${ns}/ss-cinfo-0 eth0 .*\\[${oldUid}\\]: unused for`));
  const explain = await twopassAsync(['explain', 'danm-endpoints', oldUid, ...base, '--output', 'table']);
  assert.is(explain.code, 0, explain.err);
  assert.match(
    explain.out,
    new RegExp(
      `history: first seen unused in run ${record.runId.slice(0, 8)} at ${new Date(record.startedAt).toISOString()}; confirmed in run ${apply.runId.slice(0, 8)} .*; deleted in run ${apply.runId.slice(0, 8)}`,
    ),
  );
  const last1 = await twopassAsync(['history', 'danm-endpoints', ...base, '--last', '1', '--output', 'json']);
  assert.equal(
    (last1.json()[0] as { runs: RunRecord[] }).runs.map((r) => r.runId),
    [apply.runId],
  );
});

test('bad input: an unknown function, an unknown run, a bad --last: exit 2 with one line that says why', async ({
  t,
}) => {
  const dir = mkdtempSync(join(tmpdir(), 'twopass-hist-'));
  const base = [...cliFiles(dir, t.kubeconfig(), 'functions: {}\n'), '--state', `file:${join(dir, 's')}`];
  const cases: [string[], RegExp][] = [
    [['history', 'danm-endpoint', ...base], /unknown function `danm-endpoint`; known: danm-endpoints/],
    [
      ['history', 'danm-endpoints', ...base, '--run', 'nope'],
      /no run `nope` in the history of danm-endpoints/,
    ],
    [['history', 'danm-endpoints', ...base, '--last', '0'], /--last: expected a whole number of runs/],
    [['history', ...base], /usage: twopass history <function>/],
  ];
  for (const [args, says] of cases) {
    const r = await twopassAsync(args);
    assert.is(r.code, 2, `${args.join(' ')}: ${r.err}`);
    assert.match(r.err, says);
  }
  const empty = await twopassAsync(['history', 'danm-endpoints', ...base, '--output', 'table']);
  assert.is(empty.code, 0, empty.err);
  assert.match(empty.out, /no runs recorded in file:.*--record write one each/);
});

test('ConfigMap store: the history is a ConfigMap beside the state, read by `twopass history` like the file', async ({
  t,
}) => {
  const dir = mkdtempSync(join(tmpdir(), 'twopass-hist-'));
  const { ns, base, oldUid } = await incident(t, dir, (n) => `configmap:${n}`);
  const kube = t.client();
  const cm = await kube.get(CONFIGMAPS, ns, 'twopass-danm-endpoints-history');
  await kube.close();
  assert.ok(cm, 'the ConfigMap twopass-danm-endpoints-history');
  assert.is(cm.metadata.labels?.['twopass.io/history'], 'true');
  const runs = await historyOf(base);
  assert.equal(
    runs.map((r) => r.dryRun),
    [false, true],
  );
  assert.ok(
    runs[0]?.lists.deleted?.items.some((d) => d.key === oldUid),
    JSON.stringify(runs),
  );
});

test('the scheduler: runs of a scheduler that was stopped and started again are all in the history', async ({
  t,
}) => {
  const dir = mkdtempSync(join(tmpdir(), 'twopass-hist-'));
  const kube = t.client();
  const ns = await t.namespace();
  const w = await seedIncident.before(kube, ns);
  await seedIncident.nodeLost(kube, w);
  await kube.close();
  const state = `file:${join(dir, 'state')}`;
  const cfg = resolveConfig(
    {
      functions: {
        'danm-endpoints': { schedule: '*/1 * * * * *', record: true, settings: { namespaces: [ns] } },
        'whereabouts-ips': { enabled: false },
      },
    },
    'test',
    { state },
  );
  const ids: string[] = [];
  for (const round of [1, 2]) {
    const s = await startScheduler(
      cfg,
      { time: testTime(), log: captureLog(Date.now).log, kubeOptions: t.options },
      { host: '127.0.0.1', port: 0, functions: FUNCTIONS },
    );
    try {
      await eventually(`a run of scheduler ${round}`, () => (s.runs >= 1 ? true : undefined));
    } finally {
      await s.stop();
    }
    ids.push(...s.results.map((r) => r.runId));
  }
  const base = [...cliFiles(dir, t.kubeconfig(), 'functions: {}\n'), '--state', state];
  const kept = (await historyOf(base)).map((r) => r.runId);
  for (const id of ids)
    assert.ok(kept.includes(id), `run ${id} (of either scheduler) in the history: ${kept}`);
  assert.ok(ids.length >= 2);
});

test.run();
