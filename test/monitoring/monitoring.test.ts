/**
 * Monitoring in CronJob mode, against the real tools: the alert rules checked and unit-tested
 * by promtool, and `twopass run --all --pushgateway` against a real Pushgateway (both built
 * from the Go module proxy by test/monitoring/build.sh). Without the binaries the suite is
 * reported as skipped (CI sets TWOPASS_REQUIRE_MONITORING=1: then their absence fails).
 */
import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { parse } from 'yaml';
import { KubeHttpClient } from '../../shared/kube/client.ts';
import { installCrdsFromDir } from '../../shared/sandbox/crds.ts';
import { FakeKubeServer } from '../../shared/sandbox/kube/server.ts';
import { cliFiles, twopassAsync } from '../helpers/cli.ts';
import { eventually, testTime } from '../helpers/time.ts';

const ROOT = new URL('../../', import.meta.url).pathname;
const BIN = join(process.env.TWOPASS_CACHE ?? join(homedir(), '.cache/twopass'), 'prom/v0.316.0-v1.11.1');
const have = existsSync(join(BIN, 'promtool')) && existsSync(join(BIN, 'pushgateway'));
if (!have && process.env.TWOPASS_REQUIRE_MONITORING === '1')
  throw new Error(`promtool and pushgateway are required (TWOPASS_REQUIRE_MONITORING=1) in ${BIN}`);
if (!have) console.log(`  !!! no promtool/pushgateway in ${BIN} (test/monitoring/build.sh): SKIPPED`);

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

test.run();
