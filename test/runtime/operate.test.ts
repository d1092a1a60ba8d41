/** Operating twopass: the scheduler, the FaaS handler, metrics push and textfile, Events. */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { Gauge } from 'prom-client';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { FUNCTIONS } from '../../functions/index.ts';
import { resolveConfig } from '../../shared/config.ts';
import { ConfigError } from '../../shared/errors.ts';
import { EVENTS } from '../../shared/kube/resources.ts';
import { RunMetrics } from '../../shared/metrics/metrics.ts';
import type { RunResult } from '../../shared/runtime/result.ts';
import { startScheduler } from '../../shared/runtime/scheduler.ts';
import { runFunction } from '../../shared/runtime/wire.ts';
import { leakedEndpoint } from '../../shared/sandbox/scenarios/danm.ts';
import { fakeTarget, type KubeTarget } from '../helpers/kube-target.ts';
import { captureLog } from '../helpers/memfn.ts';
import { eventually, testTime } from '../helpers/time.ts';

const test = suite<{ t: KubeTarget; dir: string; kc: string }>('operate');

/** A run result that deleted, skipped and refused nothing: each metrics test varies what it needs. */
const QUIET_RUN: RunResult = {
  function: 'f',
  runId: 'r',
  outcome: 'ok',
  exitCode: 0,
  dryRun: false,
  confirmed: [],
  deleted: [],
  deletedByKind: {},
  skipped: [],
  failed: [],
  held: [],
  notices: [],
  sideFailures: 0,
  durationMs: 1,
};
test.before(async (ctx) => {
  ctx.t = await fakeTarget();
  ctx.dir = mkdtempSync(join(tmpdir(), 'twopass-op-'));
  ctx.kc = join(ctx.dir, 'kubeconfig');
  writeFileSync(ctx.kc, ctx.t.kubeconfig());
  const kube = ctx.t.client();
  await leakedEndpoint(kube, 'default', '10.10.10.9');
  await kube.close();
});
test.after(async (ctx) => ctx.t.close());

/** A config that schedules danm-endpoints alone, with its state in `stateDir`. */
const danmOnly = (schedule: string, stateDir: string) =>
  resolveConfig(
    { functions: { 'danm-endpoints': { schedule }, 'whereabouts-ips': { enabled: false } } },
    'test',
    { state: `file:${stateDir}` },
  );

test('schedule runs a function on a six-field (seconds) cron expression and serves metrics', async ({
  t,
  dir,
}) => {
  const cfg = danmOnly('*/1 * * * * *', join(dir, 'sched'));
  const cap = captureLog(Date.now);
  const s = await startScheduler(
    cfg,
    { time: testTime(), log: cap.log, kubeOptions: t.options },
    { host: '127.0.0.1', port: 0, functions: FUNCTIONS, keepResults: 1 },
  );
  try {
    await eventually('two scheduled runs', () => (s.runs >= 2 ? true : undefined));
    assert.is(s.results.length, 1, 'only the latest results are kept (a scheduler runs for months)');
    const health = await fetch(`${s.url}/healthz`);
    assert.is(health.status, 200);
    const text = await (await fetch(`${s.url}/metrics`)).text();
    const runs = /twopass_runs_total\{function="danm-endpoints",outcome="ok"\} (\d+)/.exec(text);
    assert.ok(runs && Number(runs[1]) >= 2, text.slice(0, 500));
    assert.match(text, /twopass_targets\{function="danm-endpoints"\} \d+/);
    assert.match(text, /twopass_last_success_timestamp_seconds\{function="danm-endpoints"\} \d+/);
    assert.not.match(text, /whereabouts-ips/, 'a disabled function is not scheduled');
  } finally {
    await s.stop();
  }
  // Stopped means destroyed: node-cron holds no timer for the task any more, so no run can follow.
  const n = s.runs;
  for (const [name, task] of s.tasks) {
    assert.is(task.getStatus(), 'destroyed', name);
    // and a tick that fires anyway (one already due) starts no run
    await Promise.resolve(task.execute()).catch(() => undefined);
  }
  assert.is(s.runs, n, 'no run after stop');
  assert.ok(cap.events('schedule.stopped').length === 1);
});

test('a bad cron expression is a config error', async ({ t, dir }) => {
  const cfg = resolveConfig({ functions: { 'danm-endpoints': { schedule: 'every minute' } } }, 'test', {
    state: `file:${dir}`,
  });
  try {
    await startScheduler(
      cfg,
      { time: testTime(), log: captureLog(Date.now).log, kubeOptions: t.options },
      { host: '127.0.0.1', port: 0, functions: FUNCTIONS },
    );
    assert.unreachable();
  } catch (err) {
    assert.instance(err, ConfigError);
    assert.match((err as Error).message, /functions\.danm-endpoints\.schedule: expected a cron expression/);
  }
});

test('twopass schedule as a process: SIGTERM stops it cleanly (exit 0)', async ({ dir, kc }) => {
  writeFileSync(
    join(dir, 'sched.yaml'),
    `state: file:${join(dir, 'proc')}\nfunctions:\n  danm-endpoints:\n    schedule: "*/1 * * * * *"\n  whereabouts-ips:\n    enabled: false\n`,
  );
  const child = spawn(
    process.execPath,
    [
      new URL('../../bin/twopass.js', import.meta.url).pathname,
      'schedule',
      '--config',
      join(dir, 'sched.yaml'),
      '--kubeconfig',
      kc,
      '--listen',
      '127.0.0.1:0',
      '--output',
      'json',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let out = '';
  child.stdout.on('data', (c: Buffer) => (out += c.toString()));
  const url = await eventually(
    'listening',
    () => /"event":"schedule.listening","url":"([^"]+)"/.exec(out)?.[1],
  );
  await eventually('a finished run', () => (out.includes('"event":"run.finished"') ? true : undefined));
  assert.is((await fetch(`${url}/healthz`)).status, 200);
  child.kill('SIGTERM');
  const code = await new Promise<number | null>((r) => child.on('exit', (c) => r(c)));
  assert.is(code, 0);
  assert.ok(out.includes('"event":"schedule.stopped"'));
});

test('handler(event): the way a Lambda-style runtime calls it', async ({ dir, kc }) => {
  const env = { KUBECONFIG: kc };
  // The entry layer builds a handler for every registered function.
  const { handlers } = await import('../../shared/faas.ts');
  assert.equal(Object.keys(handlers).sort(), FUNCTIONS.map((f) => f.name).sort());
  const { makeHandler } = await import('../../shared/runtime/handler.ts');
  const { danmEndpoints } = await import('../../functions/danm-endpoints/index.ts');
  const h = makeHandler(danmEndpoints, { env, stream: captureLogStream() });
  // The event as a Lambda-style runtime hands it over: plain JSON.
  const event = {
    dryRun: true,
    record: true,
    config: {
      state: `file:${join(dir, 'faas')}`,
      allowShortGrace: true,
      functions: { 'danm-endpoints': { grace: '0s', minAge: '0s', maxDeletionPercent: 100 } },
    },
  };
  const out = await h(event);
  assert.is(out.exitCode, 0);
  assert.is(out.dryRun, true);
  assert.ok(out.summary && out.summary.targets > 0);
  const again = await h(JSON.parse(JSON.stringify(event)));
  assert.is(again.confirmed, 1, 'confirmed on the second observation');
  assert.equal(again.deleted, [], 'a dry run deletes nothing');
  for (const bad of [
    { config: { functions: { 'danm-endpoints': { grace: 15 } } } },
    { apply: 'yes' },
    { apply: true, dryRun: true },
    // a string is not false: this event once deleted
    { dryRun: 'true', config: { apply: true, state: `file:${join(dir, 'faas')}` } },
    { dryrun: true },
    { config: 'apply: true' },
    'run',
    { config: { functions: { 'danm-endpoints': { settings: { namespace: ['default'] } } } } },
    { config: { functions: { 'danm-endpoints': { schedule: 'every 5 min' } } } },
  ]) {
    try {
      await h(bad as never);
      assert.unreachable(`accepted a bad event: ${JSON.stringify(bad)}`);
    } catch (err) {
      assert.instance(err, ConfigError);
    }
  }
});

function captureLogStream(): NodeJS.WritableStream {
  return new Writable({ write: (_c, _e, cb) => cb() });
}

test('run --pushgateway pushes the metrics; --metrics-textfile writes them', async ({ dir, kc }) => {
  const bodies: { url: string; method: string; body: string }[] = [];
  const gw = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      bodies.push({ url: req.url ?? '', method: req.method ?? '', body });
      res.writeHead(200).end();
    });
  });
  await new Promise<void>((r) => gw.listen(0, '127.0.0.1', () => r()));
  const port = (gw.address() as AddressInfo).port;
  try {
    const textfile = join(dir, 'twopass.prom');
    const r = await new Promise<{ code: number | null }>((resolve) => {
      const c = spawn(
        process.execPath,
        [
          new URL('../../bin/twopass.js', import.meta.url).pathname,
          'run',
          'danm-endpoints',
          '--kubeconfig',
          kc,
          '--state',
          `file:${join(dir, 'push')}`,
          '--pushgateway',
          `http://127.0.0.1:${port}`,
          '--metrics-textfile',
          textfile,
        ],
        { stdio: 'ignore' },
      );
      c.on('exit', (code) => resolve({ code }));
    });
    assert.is(r.code, 0);
    assert.is(bodies.length, 1);
    // POST: series this push does not carry (a failed run's last success) stay in the group
    assert.is(bodies[0]?.method, 'POST');
    assert.is(bodies[0]?.url, '/metrics/job/twopass/function/danm-endpoints');
    assert.match(bodies[0]!.body, /twopass_last_run_outcome\{function="danm-endpoints",outcome="ok"\} 1/);
    assert.match(bodies[0]!.body, /twopass_last_success_timestamp_seconds\{function="danm-endpoints"\} \d+/);
    assert.match(readFileSync(textfile, 'utf8'), /twopass_run_duration_seconds\{function="danm-endpoints"\}/);
  } finally {
    await new Promise<void>((r) => gw.close(() => r()));
  }
});

test('a refused run leaves a Warning Event on the CronJob', async ({ t, dir }) => {
  const cfg = resolveConfig(
    {
      allowShortGrace: true,
      eventNamespace: 'default',
      functions: { 'danm-endpoints': { grace: 0, minAge: 0, maxDeletions: 0 } },
    },
    'test',
    { state: `file:${join(dir, 'ev')}` },
  );
  const env = { time: testTime(), log: captureLog(Date.now).log, kubeOptions: t.options };
  const danm = FUNCTIONS[0]!;
  await runFunction(danm, cfg, env, { apply: true });
  const r = await runFunction(danm, cfg, env, { apply: true });
  assert.is(r.outcome, 'refused');
  const kube = t.client();
  const events = await kube.listAll(EVENTS, { namespace: 'default' });
  const ev = events.items.find((e) => (e as { reason?: string }).reason === 'TwopassRunRefused') as
    | { involvedObject: { kind: string; name: string }; type: string }
    | undefined;
  assert.ok(ev);
  assert.is(ev.involvedObject.kind, 'CronJob');
  assert.is(ev.involvedObject.name, 'twopass-danm-endpoints');
  assert.is(ev.type, 'Warning');
  await kube.close();
});

test('/metrics: a collector that fails is a 500 for that scrape, and the scheduler lives on', async ({
  t,
  dir,
}) => {
  const cfg = danmOnly('0 0 1 1 *', join(dir, 'sched-500'));
  const s = await startScheduler(
    cfg,
    { time: testTime(), log: captureLog(Date.now).log, kubeOptions: t.options },
    { host: '127.0.0.1', port: 0, functions: FUNCTIONS },
  );
  try {
    new Gauge({
      name: 'broken_collector',
      help: 'fails to collect',
      registers: [s.metrics.registry],
      collect() {
        throw new Error('collector broke');
      },
    });
    assert.is((await fetch(`${s.url}/metrics`)).status, 500);
    assert.is((await fetch(`${s.url}/healthz`)).status, 200, 'still serving');
  } finally {
    await s.stop();
  }
});

test('last_run_deleted has only the kinds of the latest run', async () => {
  const m = new RunMetrics(() => 1_800_000_000_000, '0.0.0');
  const base = { ...QUIET_RUN, deleted: ['a', 'b'] };
  m.record({ ...base, deletedByKind: { DanmEp: 1, DanmBit: 1 } });
  m.record({ ...base, deleted: ['c'], deletedByKind: { DanmEp: 1 } });
  const text = await m.text();
  assert.match(text, /twopass_last_run_deleted\{function="f",kind="DanmEp"\} 1/);
  assert.not.match(text, /twopass_last_run_deleted\{function="f",kind="DanmBit"\}/);
});

test('metrics say which guard refused, how many requests the run sent by API, and the evidence beside its baseline; series of a source or API the next run lacks go', async () => {
  const m = new RunMetrics(() => 1_800_000_000_000, '0.0.0');
  const base = QUIET_RUN;
  m.record({
    ...base,
    outcome: 'refused',
    exitCode: 4,
    notices: [{ event: 'run.refused', reason: 'pods shrank', guards: ['evidence-drop'] }],
    requests: { kubernetes: 12, openstack: 3 },
    evidence: { pods: 40, services: 5 },
    evidenceBaseline: { pods: 100, services: 5 },
  });
  let text = await m.text();
  assert.match(text, /twopass_last_run_refused_by\{function="f",guard="evidence-drop"\} 1/);
  assert.match(text, /twopass_last_run_refused_by\{function="f",guard="max-deletions"\} 0/);
  assert.match(text, /twopass_last_run_requests\{function="f",api="kubernetes"\} 12/);
  assert.match(text, /twopass_last_run_requests\{function="f",api="openstack"\} 3/);
  assert.match(text, /twopass_evidence\{function="f",source="pods"\} 40/);
  assert.match(text, /twopass_evidence_baseline\{function="f",source="pods"\} 100/);
  m.record({ ...base, requests: { kubernetes: 7 }, evidence: { pods: 41 }, evidenceBaseline: { pods: 40 } });
  text = await m.text();
  assert.match(text, /twopass_last_run_refused_by\{function="f",guard="evidence-drop"\} 0/);
  assert.not.match(text, /api="openstack"/, 'an API the last run did not call has no series');
  assert.not.match(text, /source="services"/, 'a source the last run did not list has no series');
  assert.match(text, /twopass_evidence_baseline\{function="f",source="pods"\} 40/);
});

test('a run counts its own requests by API, also when runs overlap', async () => {
  const { countingRequests, countRequest } = await import('../../shared/http/tally.ts');
  const both = await Promise.all(
    [3, 5].map((n) =>
      countingRequests(async (counts) => {
        for (let i = 0; i < n; i++) {
          countRequest('kubernetes');
          await new Promise((r) => setTimeout(r, 1));
        }
        return counts();
      }),
    ),
  );
  assert.equal(both, [{ kubernetes: 3 }, { kubernetes: 5 }]);
});

test('metrics say where: candidates, confirmed and deleted by kind and place, the top 10 places named and the rest summed; a place the next run does not have goes', async () => {
  const m = new RunMetrics(() => 1_800_000_000_000, '0.0.0');
  const base = QUIET_RUN;
  const places = Array.from({ length: 14 }, (_, i) => ({
    kind: 'DanmEp',
    place: `DanmNet/ns/net-${String(i).padStart(2, '0')}`,
    candidates: 100 - i,
    confirmed: i === 0 ? 5 : 0,
    deleted: i === 0 ? 4 : 0,
  }));
  m.record({ ...base, places, oldestCandidateAgeSeconds: 1234, graceSeconds: 300 });
  const text = await m.text();
  const series = text.split('\n').filter((l) => l.startsWith('twopass_place_candidates{'));
  assert.is(series.length, 11, 'ten places by name and one for the rest');
  assert.match(
    text,
    /twopass_place_candidates\{function="f",kind="DanmEp",place="DanmNet\/ns\/net-00"\} 100/,
  );
  assert.match(text, /twopass_place_confirmed\{function="f",kind="DanmEp",place="DanmNet\/ns\/net-00"\} 5/);
  assert.match(text, /twopass_place_deleted\{function="f",kind="DanmEp",place="DanmNet\/ns\/net-00"\} 4/);
  // net-10 .. net-13 (90 + 89 + 88 + 87) summed
  assert.match(text, /twopass_place_candidates\{function="f",kind="DanmEp",place="\(other\)"\} 354/);
  assert.not.match(text, /net-13/);
  assert.match(text, /twopass_oldest_candidate_age_seconds\{function="f"\} 1234/);
  assert.match(text, /twopass_grace_seconds\{function="f"\} 300/);
  m.record({ ...base, places: [{ kind: 'DanmEp', place: '', candidates: 1, confirmed: 0, deleted: 0 }] });
  const next = await m.text();
  assert.not.match(next, /net-00/, "the last run's places only");
  assert.match(next, /twopass_place_candidates\{function="f",kind="DanmEp",place="\(none\)"\} 1/);
});

test.run();
