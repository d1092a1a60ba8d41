/**
 * Monitoring against the real tools: the alert rules checked and unit-tested by promtool,
 * `twopass run --all --pushgateway` against a real Pushgateway, and the dashboard's every
 * query evaluated on a real Prometheus that scrapes that Pushgateway and a `twopass schedule`
 * (Debian's packages, linked by test/monitoring/build.sh). Without the binaries the
 * suite is reported as skipped (CI sets TWOPASS_REQUIRE_MONITORING=1: then their absence fails).
 */
import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { parse } from 'yaml';
import { KubeHttpClient } from '../../shared/kube/client.ts';
import { NAMESPACES } from '../../shared/kube/resources.ts';
import { installCrdsFromDir } from '../../shared/sandbox/crds.ts';
import { FakeKubeServer } from '../../shared/sandbox/kube/server.ts';
import { leakedEndpoint } from '../../shared/sandbox/scenarios/danm.ts';
import { cliFiles, twopassAsync } from '../helpers/cli.ts';
import { eventually, testTime } from '../helpers/time.ts';

const ROOT = new URL('../../', import.meta.url).pathname;
const BIN = join(process.env.TWOPASS_CACHE ?? join(homedir(), '.cache/twopass'), 'prom/debian');
const have = ['promtool', 'pushgateway', 'prometheus'].every((b) => existsSync(join(BIN, b)));
if (!have && process.env.TWOPASS_REQUIRE_MONITORING === '1')
  throw new Error(
    `prometheus, promtool and pushgateway are required (TWOPASS_REQUIRE_MONITORING=1) in ${BIN}`,
  );
if (!have)
  console.log(`  !!! no prometheus/promtool/pushgateway in ${BIN} (test/monitoring/build.sh): SKIPPED`);

type Ctx = { fake: FakeKubeServer; gw: ChildProcess; url: string; dir: string };
const test = suite<Ctx>('monitoring (promtool, a real Pushgateway)');
const it = have ? test : test.skip;

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

test.before(async (ctx) => {
  if (!have) return;
  ctx.dir = mkdtempSync(join(tmpdir(), 'twopass-mon-'));
  ctx.fake = new FakeKubeServer();
  await ctx.fake.start();
  const admin = new KubeHttpClient({ server: ctx.fake.url, time: testTime() });
  await installCrdsFromDir(admin);
  await admin.close();
  const port = await freePort();
  ctx.url = `http://127.0.0.1:${port}`;
  ctx.gw = spawn(join(BIN, 'pushgateway'), [`--web.listen-address=127.0.0.1:${port}`], { stdio: 'ignore' });
  await eventually(
    'the Pushgateway',
    async () => (await fetch(`${ctx.url}/-/ready`).catch(() => undefined))?.ok,
  );
});
test.after(async (ctx) => {
  if (!have) return;
  ctx.gw.kill('SIGTERM');
  await ctx.fake.stop();
});

type Group = { labels: Record<string, string> } & Record<
  string,
  { metrics?: { labels: Record<string, string>; value: string }[] } | Record<string, string>
>;
async function groups(url: string): Promise<Group[]> {
  return ((await (await fetch(`${url}/api/v1/metrics`)).json()) as { data: Group[] }).data;
}
const sample = (g: Group, name: string, labels: Record<string, string> = {}) =>
  (g[name] as { metrics?: { labels: Record<string, string>; value: string }[] } | undefined)?.metrics?.find(
    (m) => Object.entries(labels).every(([k, v]) => m.labels[k] === v),
  )?.value;

it('promtool: the shipped rules are valid, and their unit tests pass (fire when they must, quiet otherwise)', () => {
  const rules = join(ROOT, 'infra/monitoring/alerts.yaml');
  assert.match(
    execFileSync(join(BIN, 'promtool'), ['check', 'rules', rules], { encoding: 'utf8' }),
    /SUCCESS: 6 rules/,
  );
  const out = execFileSync(
    join(BIN, 'promtool'),
    ['test', 'rules', join(ROOT, 'test/monitoring/alerts.test.yaml')],
    {
      encoding: 'utf8',
    },
  );
  assert.match(out, /SUCCESS/);
});

it('the PrometheusRule of the deploy manifests carries exactly the shipped rules', () => {
  const file = parse(readFileSync(join(ROOT, 'infra/monitoring/alerts.yaml'), 'utf8')) as { groups: unknown };
  const cr = parse(
    readFileSync(join(ROOT, 'infra/kustomize/components/monitoring/prometheusrule.yaml'), 'utf8'),
  ) as { kind: string; spec: { groups: unknown } };
  assert.is(cr.kind, 'PrometheusRule');
  assert.equal(cr.spec.groups, file.groups);
});

it('run --all --pushgateway: each function is its own group; a failed run keeps the last success', async ({
  fake,
  url,
  dir,
}) => {
  const files = cliFiles(
    join(dir, 'all'),
    fake.kubeconfig(),
    'functions:\n  danm-endpoints: { schedule: "*/5 * * * *" }\n  whereabouts-ips: { schedule: "*/5 * * * *" }\n',
  );
  const ok = await twopassAsync(['run', '--all', ...files, '--state', `file:${join(dir, 's')}`], {
    TWOPASS_PUSHGATEWAY: url,
  });
  assert.is(ok.code, 0, ok.err + ok.out.slice(-400));
  let gs = await groups(url);
  const byFn = (fn: string) => gs.find((g) => g.labels.function === fn && g.labels.job === 'twopass');
  for (const fn of ['danm-endpoints', 'whereabouts-ips']) {
    const g = byFn(fn);
    assert.ok(g, `a group for ${fn}`);
    // every series of the group is about its own function
    for (const [name, fam] of Object.entries(g))
      for (const m of (fam as { metrics?: { labels: Record<string, string> }[] }).metrics ?? [])
        if (name.startsWith('twopass_') && name !== 'twopass_build_info')
          assert.is(m.labels.function, fn, `${name} in the ${fn} group`);
    assert.is(sample(g, 'twopass_last_run_outcome', { outcome: 'ok' }), '1');
    assert.ok(sample(g, 'twopass_last_success_timestamp_seconds'), `${fn}: last success`);
    assert.is(sample(g, 'twopass_build_info'), '1');
  }
  const success = sample(byFn('danm-endpoints')!, 'twopass_last_success_timestamp_seconds');
  // now the cluster is gone: the run aborts (exit 3), its push keeps the last success
  const down = cliFiles(
    join(dir, 'down'),
    readFileSync(new URL('../fixtures/unreachable.kubeconfig', import.meta.url), 'utf8'),
    '',
  );
  const failed = await twopassAsync(['run', 'danm-endpoints', ...down, '--state', `file:${join(dir, 's')}`], {
    TWOPASS_PUSHGATEWAY: url,
  });
  assert.is(failed.code, 3);
  gs = await groups(url);
  const g = byFn('danm-endpoints')!;
  assert.is(sample(g, 'twopass_last_run_outcome', { outcome: 'aborted' }), '1');
  assert.is(sample(g, 'twopass_last_run_exit_code'), '3');
  assert.is(sample(g, 'twopass_last_success_timestamp_seconds'), success, 'the last success is kept');
});

it('a push that cannot be delivered fails the run (exit 1) after its work, and says so', async ({
  fake,
  dir,
}) => {
  const files = cliFiles(join(dir, 'nogw'), fake.kubeconfig(), '');
  const r = await twopassAsync(['run', 'danm-endpoints', ...files, '--state', `file:${join(dir, 's2')}`], {
    TWOPASS_PUSHGATEWAY: `http://127.0.0.1:${await freePort()}`,
  });
  assert.is(r.code, 1);
  assert.ok(r.json().some((e) => e.event === 'metrics.push-failed'));
  assert.ok(
    r.json().some((e) => e.event === 'run.finished' && e.exitCode === 0),
    'the run itself finished',
  );
});

it('--metrics-textfile: a failed run keeps the last success of the previous file', async ({ fake, dir }) => {
  const textfile = join(dir, 'twopass.prom');
  const files = cliFiles(join(dir, 'tf'), fake.kubeconfig(), '');
  const run = (f: string[]) =>
    twopassAsync([
      'run',
      'danm-endpoints',
      ...f,
      '--state',
      `file:${join(dir, 's3')}`,
      '--metrics-textfile',
      textfile,
    ]);
  const ok = await run(files);
  assert.is(ok.code, 0, ok.err);
  const line = /^twopass_last_success_timestamp_seconds\{function="danm-endpoints"\} \S+$/m.exec(
    readFileSync(textfile, 'utf8'),
  )?.[0];
  assert.ok(line);
  const down = cliFiles(
    join(dir, 'tf-down'),
    readFileSync(new URL('../fixtures/unreachable.kubeconfig', import.meta.url), 'utf8'),
    '',
  );
  const failed = await run(down);
  assert.is(failed.code, 3);
  const text = readFileSync(textfile, 'utf8');
  assert.ok(text.includes(line), 'the last success carried over');
  assert.match(text, /twopass_last_run_outcome\{function="danm-endpoints",outcome="aborted"\} 1/);
  assert.match(text, /twopass_build_info\{version="\d+\.\d+\.\d+",node="[^"]+"\} 1/);
});

it("--metrics-textfile shared by two functions: each run keeps the other's series; promtool accepts the file", async ({
  fake,
  dir,
}) => {
  const textfile = join(dir, 'shared.prom');
  const files = cliFiles(join(dir, 'tf-shared'), fake.kubeconfig(), '');
  const run = (fn: string) =>
    twopassAsync(['run', fn, ...files, '--state', `file:${join(dir, 's4')}`, '--metrics-textfile', textfile]);
  assert.is((await run('danm-endpoints')).code, 0);
  assert.is((await run('whereabouts-ips')).code, 0);
  const text = readFileSync(textfile, 'utf8');
  for (const fn of ['danm-endpoints', 'whereabouts-ips'])
    assert.match(
      text,
      new RegExp(`^twopass_last_success_timestamp_seconds\\{function="${fn}"\\} \\S+$`, 'm'),
      fn,
    );
  assert.is(text.match(/^# TYPE twopass_last_success_timestamp_seconds /gm)?.length, 1, 'one family, once');
  const check = spawnSync(join(BIN, 'promtool'), ['check', 'metrics'], { input: text, encoding: 'utf8' });
  assert.not.match(`${check.stdout}${check.stderr}`, /error|duplicate/i, check.stderr);
  // the first function again: its series replaced, the other's kept
  assert.is((await run('danm-endpoints')).code, 0);
  const again = readFileSync(textfile, 'utf8');
  assert.is(again.match(/^twopass_last_success_timestamp_seconds\{function="danm-endpoints"\}/gm)?.length, 1);
  assert.match(again, /^twopass_last_success_timestamp_seconds\{function="whereabouts-ips"\}/m);
});

/** Starts a process and waits until `ready` answers; the caller kills it. */
async function serve(cmd: string[], ready: string, log: string[]): Promise<ChildProcess> {
  const c = spawn(cmd[0]!, cmd.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
  c.stdout?.on('data', (d: Buffer) => log.push(d.toString()));
  c.stderr?.on('data', (d: Buffer) => log.push(d.toString()));
  await eventually(
    `${cmd.join(' ').slice(0, 80)} ready`,
    async () => (await fetch(ready).catch(() => undefined))?.ok,
  );
  return c;
}

type Series = { metric: Record<string, string>; value: [number, string] };
async function query(
  prom: string,
  expr: string,
): Promise<{ status: string; error?: string; result: Series[] }> {
  const res = await fetch(`${prom}/api/v1/query?query=${encodeURIComponent(expr)}`);
  const body = (await res.json()) as { status: string; error?: string; data?: { result: Series[] } };
  return {
    status: body.status,
    ...(body.error ? { error: body.error } : {}),
    result: body.data?.result ?? [],
  };
}

it("the dashboard: every panel's query, evaluated on a real Prometheus that scraped the Pushgateway and `twopass schedule` after real runs, returns the series it promises", async ({
  url,
  dir,
}) => {
  const { PANELS } = await import('../../infra/monitoring/dashboard.ts');
  // a cluster whose objects are an hour old (so the runs may place themselves minutes apart)
  const fake = new FakeKubeServer({ now: () => new Date(Date.now() - 3600_000) });
  await fake.start();
  const kube = new KubeHttpClient({ server: fake.url, time: testTime() });
  await installCrdsFromDir(kube);
  for (const ns of ['cron', 'sched'])
    await kube.create(NAMESPACES, { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } });
  await leakedEndpoint(kube, 'cron', '10.10.10.7');
  await leakedEndpoint(kube, 'sched', '10.10.10.8');
  await kube.close();
  const log: string[] = [];
  const procs: ChildProcess[] = [];
  try {
    const config = (ns: string, apply = false) =>
      `allowShortGrace: true\nfunctions:\n  danm-endpoints:\n    grace: 1m\n    minAge: 0s\n${apply ? '    apply: true\n' : ''}    record: true\n    schedule: "*/2 * * * * *"\n    settings: { namespaces: [${ns}] }\n  whereabouts-ips: { enabled: false }\n`;
    const at = (ms: number) => ({ TWOPASS_CLOCK_START: String(ms) });
    // CronJob mode: a recording run, then a deleting run two minutes later, each pushed
    const cron = [
      ...cliFiles(join(dir, 'dash-cron'), fake.kubeconfig(), config('cron')),
      '--state',
      `file:${join(dir, 'dash-cron', 's')}`,
    ];
    const first = await twopassAsync(['run', 'danm-endpoints', ...cron, '--record'], {
      ...at(Date.now() - 5 * 60_000),
      TWOPASS_PUSHGATEWAY: url,
    });
    assert.is(first.code, 0, first.err);
    const second = await twopassAsync(['run', 'danm-endpoints', ...cron, '--apply'], {
      ...at(Date.now() - 2 * 60_000),
      TWOPASS_PUSHGATEWAY: url,
    });
    assert.is(second.code, 0, second.err);
    assert.ok(
      second.json().some((e) => e.event === 'resource.deleted'),
      `the CronJob-style run deleted the leak: ${second.out.slice(-2500)}`,
    );
    // scheduler mode: observations recorded minutes ago, so its first run deletes
    const sched = [
      ...cliFiles(join(dir, 'dash-sched'), fake.kubeconfig(), config('sched', true)),
      '--state',
      `file:${join(dir, 'dash-sched', 's')}`,
    ];
    const seeded = await twopassAsync(
      ['run', 'danm-endpoints', ...sched, '--record'],
      at(Date.now() - 5 * 60_000),
    );
    assert.is(seeded.code, 0, seeded.err);
    const schedPort = await freePort();
    procs.push(
      await serve(
        [
          process.execPath,
          join(ROOT, 'bin/twopass.js'),
          'schedule',
          ...sched,
          '--listen',
          `127.0.0.1:${schedPort}`,
          '--output',
          'json',
        ],
        `http://127.0.0.1:${schedPort}/healthz`,
        log,
      ),
    );
    const promPort = await freePort();
    const promDir = join(dir, 'prom');
    mkdirSync(promDir, { recursive: true });
    writeFileSync(
      join(promDir, 'prometheus.yml'),
      [
        'global: { scrape_interval: 1s, evaluation_interval: 1s }',
        'scrape_configs:',
        '  - job_name: pushgateway',
        '    honor_labels: true',
        `    static_configs: [{ targets: ["${new URL(url).host}"] }]`,
        '  - job_name: twopass-scheduler',
        `    static_configs: [{ targets: ["127.0.0.1:${schedPort}"] }]`,
        '',
      ].join('\n'),
    );
    procs.push(
      await serve(
        [
          join(BIN, 'prometheus'),
          `--config.file=${join(promDir, 'prometheus.yml')}`,
          `--storage.tsdb.path=${join(promDir, 'data')}`,
          `--web.listen-address=127.0.0.1:${promPort}`,
        ],
        `http://127.0.0.1:${promPort}/-/ready`,
        log,
      ),
    );
    const prom = `http://127.0.0.1:${promPort}`;
    // both targets scraped, and the scheduler has deleted (its counter is there)
    await eventually(
      'Prometheus has scraped both, and the scheduler has deleted',
      async () => {
        const up = await query(prom, 'sum(up{job=~"pushgateway|twopass-scheduler"})');
        const del = await query(prom, 'twopass_deleted_total');
        return up.result[0]?.value[1] === '2' && del.result.length > 0 ? true : undefined;
      },
      60_000,
    );
    // a few more scrapes, for increase() over the range
    await new Promise((r) => setTimeout(r, 4000));
    let checked = 0;
    for (const p of PANELS)
      for (const x of p.queries) {
        const expr = x.expr.replaceAll('$function', '.+').replaceAll('$__rate_interval', '1m');
        const r = await query(prom, expr);
        assert.is(r.status, 'success', `${p.title}: ${expr}: ${r.error}`);
        assert.ok(r.result.length > 0, `${p.title}: \`${expr}\` returned nothing`);
        for (const s of r.result)
          for (const l of x.promises)
            assert.ok(
              s.metric[l],
              `${p.title}: \`${expr}\`: a series without ${l}: ${JSON.stringify(s.metric)}`,
            );
        checked++;
      }
    assert.is(checked, PANELS.flatMap((p) => p.queries).length);
    // what the panels show is what the runs did
    const deleted = await query(prom, 'sum by (kind) (twopass_last_run_deleted{function="danm-endpoints"})');
    assert.ok(
      deleted.result.some((s) => s.metric.kind === 'DanmEp' && Number(s.value[1]) >= 1),
      JSON.stringify(deleted.result),
    );
    const requests = await query(prom, 'max by (api) (twopass_last_run_requests{function="danm-endpoints"})');
    assert.ok(
      requests.result.some((s) => s.metric.api === 'kubernetes' && Number(s.value[1]) > 0),
      JSON.stringify(requests.result),
    );
  } catch (err) {
    console.log(log.join('').slice(-3000));
    throw err;
  } finally {
    for (const c of procs) c.kill('SIGTERM');
    await Promise.all(
      procs.map((c) => new Promise((r) => (c.exitCode !== null ? r(null) : c.on('exit', r)))),
    );
    await fake.stop();
  }
});

test.run();
