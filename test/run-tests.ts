/**
 * `npm test`: builds (or reuses) the real kube-apiserver + etcd, starts them
 * once, runs every uvu test file against them, stops them, and prints one
 * closing line `N passed, N failed`.
 *   TWOPASS_NO_REAL_CLUSTER=1   skip the real cluster (said loudly; CI never sets it)
 *   TWOPASS_NO_REAL_OPENSTACK=1 skip the real Keystone + Neutron (said loudly); without Debian's
 *                               packages they are skipped too, unless TWOPASS_REQUIRE_REAL_OPENSTACK=1
 *                               (CI), which makes their absence a failure
 *   npm test -- PATTERN         only test files whose path matches PATTERN
 *   TWOPASS_LATE_BUILDS=DIR     (CI) the node, cloud, helm and monitoring suites run last, each
 *                               once the builds it needs (listed in DIR) have ended
 *   TWOPASS_PHASE=early         (CI) only the files that need no real server, without building or
 *                               starting any (they run while the cluster builds); =rest: the others
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Cluster, startCluster } from './cluster/cluster.ts';
import { track } from './helpers/children.ts';
import { openStackInstalled, type RealOpenStack, startOpenStack } from './openstack/real-openstack.ts';

const root = new URL('..', import.meta.url).pathname;
const only = process.argv[2];
const phase = process.env.TWOPASS_PHASE;
if (phase !== undefined && phase !== 'early' && phase !== 'rest') {
  console.error(`TWOPASS_PHASE: expected early or rest, got \`${phase}\``);
  console.log('0 passed, 1 failed');
  process.exit(1);
}

/**
 * What in a test file's text says it needs a real server (the real cluster, the real
 * OpenStack, the node). A file without any runs in the early phase; one that asks for a real
 * server there anyway fails loudly (realCluster, startCluster and realOpenStack refuse in
 * the early phase), so a wrong guess here is never a silent skip.
 */
const REAL_MARKERS =
  /realTarget|realCluster|startCluster|targetSuite|TWOPASS_TEST_|real-openstack|realOpenStack|cluster\/cluster|binDir|\.cache\/twopass/;

/** The test files (relative to test/) that need no real server. */
function earlyFiles(): string[] {
  const out: string[] = [];
  const walk = (dir: string) => {
    for (const e of readdirSync(join(root, 'test', dir), { withFileTypes: true })) {
      const rel = dir ? `${dir}/${e.name}` : e.name;
      if (e.isDirectory()) walk(rel);
      else if (rel.endsWith('.test.ts') && !REAL_MARKERS.test(readFileSync(join(root, 'test', rel), 'utf8')))
        out.push(rel);
    }
  };
  walk('');
  return out.sort();
}
const literal = (f: string) => f.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
/** The suites that wait for late builds (LATE below) are never early. */
const LATE_GROUP_DIRS = ['node', 'cloud', 'helm', 'monitoring'];
const EARLY = phase ? earlyFiles().filter((f) => !LATE_GROUP_DIRS.includes(f.split('/')[0]!)) : [];
const EARLY_RE = `(?:${EARLY.map(literal).join('|')})$`;
const onlyRe = only ? `(?=.*(?:${only}))` : '';
/** The files of this run: the early ones alone in the early phase, the others in the rest. */
const pattern =
  phase === 'early'
    ? `^(?=${EARLY_RE})${onlyRe}.*\\.test\\.ts$`
    : phase === 'rest'
      ? `^(?!${EARLY_RE})${onlyRe}.*\\.test\\.ts$`
      : `^${onlyRe}.*\\.test\\.ts$`;
if (phase === 'early') {
  // no real server in this phase, and none built or started
  process.env.TWOPASS_NO_REAL_CLUSTER = '1';
  process.env.TWOPASS_NO_REAL_OPENSTACK = '1';
  console.log(
    `early phase: ${EARLY.length} test files that need no real server (the others: TWOPASS_PHASE=rest)`,
  );
}
let cluster: Cluster | undefined;
let openstack: (RealOpenStack & { stop: () => Promise<void> }) | undefined;
const env: Record<string, string | undefined> = { ...process.env };

// The real Keystone + Neutron start in the background, beside the cluster.
let openstackStarting: Promise<void> | undefined;
if (phase === 'early') {
  // nothing real is started in the early phase
} else if (process.env.TWOPASS_NO_REAL_OPENSTACK === '1') {
  console.log('!!! TWOPASS_NO_REAL_OPENSTACK=1: the real Keystone + Neutron suites are SKIPPED !!!');
} else if (!openStackInstalled()) {
  if (process.env.TWOPASS_REQUIRE_REAL_OPENSTACK === '1') {
    console.error("the real Keystone + Neutron are required, but Debian's packages are not installed");
    console.log('0 passed, 1 failed');
    process.exit(1);
  }
  console.log(
    "!!! Debian's Keystone + Neutron packages are not installed: the real OpenStack suites are SKIPPED (see .ci/run) !!!",
  );
} else {
  openstackStarting = startOpenStack().then(
    (os) => {
      openstack = os;
      const { stop: _stop, ...facts } = os;
      env.TWOPASS_TEST_OPENSTACK = JSON.stringify(facts);
      console.log(
        `real Keystone + Neutron (Zed): ${os.authUrl}, ${os.neutronUrl} (started in ${os.startedMs} ms)`,
      );
    },
    (err: Error) => {
      console.error(`starting the real Keystone + Neutron failed: ${err.message}`);
      console.log('0 passed, 1 failed');
      process.exit(1);
    },
  );
}

if (phase === 'early') {
  // nor built
} else if (process.env.TWOPASS_NO_REAL_CLUSTER === '1') {
  console.log(
    '!!! TWOPASS_NO_REAL_CLUSTER=1: the real kube-apiserver suites are SKIPPED; only the fake is tested !!!',
  );
} else {
  const build = spawnSync('bash', [join(root, 'test/cluster/build.sh')], {
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  if (build.status !== 0) {
    console.error(
      'building kube-apiserver/etcd failed (see above); set TWOPASS_NO_REAL_CLUSTER=1 to run without the real cluster',
    );
    console.log('0 passed, 1 failed');
    process.exit(1);
  }
  const t = Date.now();
  cluster = await startCluster();
  const dir = mkdtempSync(join(tmpdir(), 'twopass-test-'));
  const kc = join(dir, 'kubeconfig');
  writeFileSync(kc, cluster.kubeconfig());
  env.TWOPASS_TEST_KUBECONFIG = kc;
  env.TWOPASS_TEST_KUBE_VERSION = cluster.version;
  env.TWOPASS_TEST_ETCD = cluster.etcd;
  console.log(`real cluster: ${cluster.version} at ${cluster.server} (started in ${Date.now() - t} ms)`);
  process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
}

await openstackStarting;

/** One uvu run over the test files; its output is echoed (unless held) and kept for the count. */
function uvu(args: string[], hold = false): Promise<{ code: number; out: string }> {
  let out = '';
  // tracked: a runner stopped by a signal passes it on, and the suites stop their servers
  const child = track(
    spawn(join(root, 'node_modules/.bin/uvu'), ['test', ...args], {
      cwd: root,
      env,
      stdio: ['ignore', 'pipe', hold ? 'pipe' : 'inherit'],
    }),
  );
  child.stdout?.on('data', (chunk: Buffer) => {
    if (!hold) process.stdout.write(chunk);
    out += chunk.toString();
  });
  let err = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    err += chunk.toString();
  });
  return new Promise((resolve) =>
    child.on('exit', (c) => {
      if (err) process.stderr.write(err);
      resolve({ code: c ?? 1, out });
    }),
  );
}

/**
 * CI starts the tests as soon as the cluster is built, while the tools of a few suites are
 * still building (TWOPASS_LATE_BUILDS: a directory where each such build leaves NAME.pending
 * when it starts and NAME.rc, its exit code, when it ends). Those suites run after the others,
 * each group as soon as the builds it needs have ended (in the order listed when several are
 * ready); a build that failed is a failure, its log's end printed, and its suites still run
 * (they fail where their tools are required).
 * The image and producers suites (lane `side`) start their own apiserver and node, use no
 * OpenStack and mostly wait on the kubelet and on CronJobs firing each minute, so they run
 * beside the others as soon as their builds are done, their output held and printed whole
 * when each group ends. The node suite runs last, once the side lane is done: it needs the
 * same node (bridges, containerd), and its lbaas-ports Jobs reclaim the managed ports of the
 * test OpenStack's project, which the lbaas-ports suites make and expect to find.
 */
type LateGroup = Readonly<{
  name: string;
  files: string;
  needs: readonly string[];
  lane: 'main' | 'side';
  /** Runs only once the side lane has ended. */
  afterSide?: boolean;
}>;
const LATE: readonly LateGroup[] = [
  { name: 'image', files: '^node/image\\.test\\.ts$', needs: ['node-image'], lane: 'side' },
  {
    name: 'producers',
    files: '^node/producers\\.test\\.ts$',
    needs: ['node-go', 'node-image', 'producers', 'helm'],
    lane: 'side',
  },
  { name: 'cloud', files: '^cloud/', needs: ['node-go', 'cloud', 'provisioner'], lane: 'main' },
  { name: 'helm', files: '^helm/', needs: ['helm'], lane: 'main' },
  { name: 'monitoring', files: '^monitoring/', needs: ['monitoring'], lane: 'main' },
  {
    name: 'node',
    files: '^node/(?!producers\\.test\\.ts$|image\\.test\\.ts$)',
    needs: ['node-go', 'node-image', 'helm'],
    lane: 'main',
    afterSide: true,
  },
];
let sideDone = false;
const LATE_DIRS = `^(${LATE_GROUP_DIRS.join('|')})(/|$)`;
for (const d of LATE_GROUP_DIRS)
  if (!LATE.some((g) => g.files.startsWith(`^${d}/`))) throw new Error(`no late group runs test/${d}`);

/** The exit code a late build left, or undefined while it runs (a build never started counts as done). */
function buildState(dir: string, name: string): string | undefined {
  if (!existsSync(join(dir, `${name}.pending`))) return '0';
  const rc = join(dir, `${name}.rc`);
  return existsSync(rc) ? readFileSync(rc, 'utf8').trim() : undefined;
}

const reported = new Set<string>();
/** Runs one lane's late groups, each once its builds have ended; the number of builds that failed. */
async function runLate(dir: string, lane: 'main' | 'side'): Promise<number> {
  let failed = 0;
  const left = LATE.filter((g) => g.lane === lane);
  const t = Date.now();
  let said = 0;
  while (left.length > 0) {
    const i = left.findIndex(
      (g) => (!g.afterSide || sideDone) && g.needs.every((n) => buildState(dir, n) !== undefined),
    );
    if (i < 0) {
      if (lane === 'main' && Date.now() - said > 60_000) {
        const waiting = [...new Set(left.flatMap((g) => g.needs))].filter(
          (n) => buildState(dir, n) === undefined,
        );
        const side = left.some((g) => g.afterSide) && !sideDone ? ['the image and producers suites'] : [];
        console.log(
          `waiting for ${[...waiting.map((n) => `the build of ${n}`), ...side].join(', ')} (${Math.round((Date.now() - t) / 1000)} s)`,
        );
        said = Date.now();
      }
      await new Promise((r) => setTimeout(r, 2000));
      continue;
    }
    const g = left.splice(i, 1)[0]!;
    for (const n of g.needs) {
      const rc = buildState(dir, n);
      if (rc === '0' || reported.has(n)) continue;
      reported.add(n);
      failed++;
      const log = join(dir, `${n}.log`);
      console.log(
        `the build of ${n} failed (exit ${rc})${existsSync(log) ? `:\n${readFileSync(log, 'utf8').slice(-4000)}` : ''}`,
      );
    }
    const files = only ? `^(?=.*(?:${only}))(?=${g.files}).*\\.test\\.ts$` : `^(?=${g.files}).*\\.test\\.ts$`;
    const began = Date.now();
    if (lane === 'side') console.log(`[late] the ${g.name} suites start, beside the others`);
    const run = await uvu([files], lane === 'side');
    runs.push(run);
    if (lane === 'side')
      console.log(
        `\n[late] the ${g.name} suites, run beside the others (${Math.round((Date.now() - began) / 1000)} s):\n${run.out}`,
      );
  }
  return failed;
}

const lateDir = process.env.TWOPASS_LATE_BUILDS;
const runs: { code: number; out: string }[] = [];
let buildFailures = 0;
if (lateDir && phase !== 'early') {
  const side = runLate(lateDir, 'side').finally(() => {
    sideDone = true;
  });
  runs.push(await uvu([pattern, '-i', LATE_DIRS]));
  buildFailures = (await runLate(lateDir, 'main')) + (await side);
} else runs.push(await uvu([pattern]));
const code = Math.max(...runs.map((r) => r.code));
const out = runs.map((r) => r.out).join('\n');
await cluster?.stop();
await openstack?.stop();

// uvu prints `Total: N`, `Passed: N`, `Skipped: N` (with colours); its summary is not the line CI reads.
const ESC = String.fromCharCode(27);
const plain = out
  .split(ESC)
  .map((part, i) => (i === 0 ? part : part.replace(/^\[[0-9;]*m/, '')))
  .join('');
// (summed over the runs: CI makes two)
const num = (label: string) =>
  [...plain.matchAll(new RegExp(`${label}:\\s+(\\d+)`, 'g'))].reduce((n, m) => n + Number(m[1]), 0);
const total = num('Total');
const passed = num('Passed');
const skipped = num('Skipped');
// Each failing test prints one `FAIL  <suite>  "<test>"` block; Total - Passed - Skipped can
// under-count (uvu's Skipped also counts tests of suites that failed around them).
const failLines = plain.match(/^\s*FAIL\s/gm)?.length ?? 0;
let failed = Math.max(failLines, total - passed - skipped) + buildFailures;
if (code !== 0 && failed === 0) failed = 1; // a file that crashed before uvu could count it
// uvu prints each failure beside its suite, far above the end; repeat their first lines here, so
// the tail of a long run says which tests failed and why.
const failures = [...plain.matchAll(/^\s*FAIL\s[^\n]*(?:\n(?!\s*FAIL\s)[^\n]*){0,6}/gm)].map((m) =>
  m[0].trim(),
);
if (failures.length > 0) {
  console.log(`\n${failures.length} failed (as uvu printed them above):`);
  for (const f of failures) console.log(`${f}\n`);
}
console.log(`${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ''}`);
process.exit(code !== 0 || failed > 0 ? 1 : 0);
