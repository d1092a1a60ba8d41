/** The `twopass` command as a user runs it: a real child process. */
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { PODS } from '../../shared/kube/resources.ts';
import {
  createEndpoint,
  createNetwork,
  createPod,
  forceDeletePod,
  R,
} from '../../shared/sandbox/scenarios/danm.ts';
import {
  allocations,
  containerId,
  createPodWithStatus,
  createPool,
} from '../../shared/sandbox/scenarios/whereabouts.ts';
import { cliFiles, twopass } from '../helpers/cli.ts';
import { type KubeTarget, realTarget } from '../helpers/kube-target.ts';

/** A working directory for CLI runs against a cluster: kubeconfig, config.yaml and a file store. */
function workdir(t: KubeTarget, config: string, grace = true): { dir: string; base: string[] } {
  const dir = mkdtempSync(join(tmpdir(), 'twopass-cli-'));
  const base = [
    ...cliFiles(
      dir,
      t.kubeconfig(),
      grace && !config.includes('allowShortGrace') ? `allowShortGrace: true\n${config}` : config,
    ),
    '--state',
    `file:${join(dir, 'state')}`,
  ];
  if (grace) base.push('--grace', '0s');
  return { dir, base };
}

const test = suite('twopass CLI');

test('--help, --version and per-command help', () => {
  const h = twopass(['--help']);
  assert.is(h.code, 0);
  for (const word of [
    'run',
    'apply --from-report',
    'schedule',
    'functions',
    'state show',
    'explain',
    'diff',
    'demo',
    'rules check|test|rbac|manifests',
    'Exit codes',
  ])
    assert.ok(h.out.includes(word), word);
  assert.match(twopass(['--version']).out, /^twopass \d+\.\d+\.\d+/);
  for (const c of ['run', 'apply', 'schedule', 'functions', 'state', 'explain', 'diff', 'demo', 'rules']) {
    const r = twopass([c, '--help']);
    assert.is(r.code, 0, c);
    assert.match(r.out, /Usage: twopass/);
  }
});

test('bad arguments and config exit 2 with a message that names the key', () => {
  const dir = mkdtempSync(join(tmpdir(), 'twopass-cli-'));
  assert.is(twopass(['frobnicate']).code, 2);
  assert.is(twopass(['run', '--bogus']).code, 2);
  const unknown = twopass(['run', 'nope']);
  assert.is(unknown.code, 2);
  assert.match(unknown.err, /unknown function `nope`; known: danm-endpoints, whereabouts-ips/);
  writeFileSync(join(dir, 'c.yaml'), 'functions:\n  danm-endpoints:\n    grace: 15\n');
  const grace = twopass(['functions', '--config', join(dir, 'c.yaml')]);
  assert.is(grace.code, 2);
  assert.match(
    grace.err,
    /`functions\.danm-endpoints\.grace`: expected a duration like `15m`, got `15` \(number\)/,
  );
  writeFileSync(join(dir, 'd.yaml'), 'apply: yes please\n');
  assert.match(twopass(['functions', '--config', join(dir, 'd.yaml')]).err, /`apply`/);
  writeFileSync(join(dir, 'e.yaml'), 'graceWindow: 5m\n');
  assert.match(twopass(['functions', '--config', join(dir, 'e.yaml')]).err, /unknown key\(s\) `graceWindow`/);
  assert.match(twopass(['functions', '--config', join(dir, 'missing.yaml')]).err, /cannot read/);
  assert.match(
    twopass(['run', 'danm-endpoints', '--state', 'redis:x']).err,
    /expected `file:DIR` or `configmap:NAMESPACE`/,
  );
  assert.match(twopass(['run', 'danm-endpoints', '--grace', 'soon']).err, /--grace: expected a duration/);
  assert.match(twopass(['run', 'danm-endpoints', '--output', 'xml']).err, /--output/);
  assert.match(twopass(['functions'], { TWOPASS_APPLY: 'maybe' }).err, /TWOPASS_APPLY/);
  // function settings are checked when the config loads: a dropped key would widen the scope
  const bad: [string, RegExp][] = [
    [
      'functions:\n  danm-endpoints:\n    settings:\n      namespace: [default]\n',
      /`functions\.danm-endpoints\.settings`: unknown key\(s\) `namespace` \(known: namespaces, group, pageSize, serverSkewSeconds\)/,
    ],
    [
      'functions:\n  whereabouts-ips:\n    settings:\n      namespaces: default\n',
      /`functions\.whereabouts-ips\.settings\.namespaces`: expected a list of namespaces like `\[default\]`, got `default` \(string\)/,
    ],
    [
      'functions:\n  lbaas-ports:\n    settings:\n      projectId: p1\n      scopetag: team-a\n',
      /`functions\.lbaas-ports\.settings`: unknown key\(s\) `scopetag`/,
    ],
    [
      'functions:\n  danm-endpoints:\n    schedule: every 5 min\n',
      /`functions\.danm-endpoints\.schedule`: expected a cron expression \(5 or 6 fields\)/,
    ],
  ];
  for (const [i, [yaml, re]] of bad.entries()) {
    writeFileSync(join(dir, `s${i}.yaml`), yaml);
    const r = twopass([
      'run',
      'danm-endpoints',
      '--config',
      join(dir, `s${i}.yaml`),
      '--state',
      `file:${dir}`,
    ]);
    assert.is(r.code, 2, yaml);
    assert.match(r.err, re);
  }
});

test('functions lists defaults; config overrides them', () => {
  const dir = mkdtempSync(join(tmpdir(), 'twopass-cli-'));
  const r = twopass(['functions']);
  assert.is(r.code, 0);
  assert.match(r.out, /danm-endpoints\n/);
  assert.match(r.out, /grace 5m \(DanmBit=10m\)/);
  writeFileSync(join(dir, 'c.yaml'), 'functions:\n  danm-endpoints:\n    grace: 20m\n    maxDeletions: 3\n');
  assert.match(twopass(['functions', '--config', join(dir, 'c.yaml')]).out, /grace 20m .*maxDeletions 3/);
  assert.match(
    twopass(['functions', '--config', join(dir, 'c.yaml'), '--grace', '1h']).out,
    /grace 1h/,
    'flags over the file',
  );
  // --grace raises every kind that would wait less; a kind that waits longer keeps its wait
  const raised = twopass(['functions', '--grace', '3h']).out;
  assert.match(raised, /grace 3h \(DanmBit=3h\)/);
  assert.match(
    raised,
    /grace 3h \(IPPoolAllocationNotListed=3h, OverlappingRangeIPReservationNotListed=3h\)/,
  );
  assert.match(twopass(['functions', '--grace', '2m']).out, /grace 2m \(DanmBit=10m\)/);
  writeFileSync(
    join(dir, 'k.yaml'),
    'functions:\n  danm-endpoints:\n    grace: 30m\n    kindGrace: { DanmBit: 10m }\n',
  );
  assert.match(
    twopass(['functions', '--config', join(dir, 'k.yaml')]).out,
    /grace 30m \(DanmBit=30m\)/,
    'a kindGrace below the grace is raised to it',
  );
});

test('state show and reset on an empty store; diff of two snapshots', () => {
  const dir = mkdtempSync(join(tmpdir(), 'twopass-cli-'));
  const show = twopass(['state', 'show', 'danm-endpoints', '--state', `file:${dir}`]);
  assert.is(show.code, 0);
  assert.match(show.out, /nothing stored yet/);
  assert.match(twopass(['state', 'reset', 'danm-endpoints', '--state', `file:${dir}`]).out, /no state/);
  const snap = (id: string, targets: unknown[], used: string[]) => ({
    id,
    function: 'danm-endpoints',
    takenAt: 0,
    sources: [],
    targets,
    used,
    indeterminate: [],
  });
  const t = (key: string, fp: string) => ({ key, kind: 'DanmEp', fingerprint: fp, name: key, keep: false });
  writeFileSync(join(dir, 'a.json'), JSON.stringify(snap('a', [t('x', '1'), t('y', '1')], ['x'])));
  writeFileSync(join(dir, 'b.json'), JSON.stringify(snap('b', [t('y', '2'), t('z', '1')], ['y'])));
  const d = twopass(['diff', join(dir, 'a.json'), join(dir, 'b.json')]);
  assert.is(d.code, 0);
  assert.match(d.out, /\+ appeared {5}DanmEp z/);
  assert.match(d.out, /- vanished {5}DanmEp x/);
  assert.match(d.out, /~ changed {6}DanmEp y: 1 -> 2/);
  assert.match(d.out, /now used {5}y/);
  assert.is(twopass(['diff', join(dir, 'a.json')]).code, 2);
});

test('demo (npm start) shows the incident and ends OK', () => {
  const r = twopass(['demo']);
  assert.is(r.code, 0, r.err);
  assert.match(
    r.out,
    /target\.indeterminate +DanmBit +DanmNet default\/test-net1 10\.10\.10\.15 +pod default\/ss-cinfo-0 is being set up/,
  );
  assert.match(r.out, /resource\.deleted +DanmEp +default\/ss-cinfo-0/);
  assert.match(
    r.out,
    /candidate\.rescued +CiliumEndpoint +shop\/web-0/,
    'the rule scene rescues the re-created pod',
  );
  assert.match(r.out, /resource\.deleted +CiliumEndpoint +shop\/cache-0/);
  assert.match(r.out, /sandbox: OK/);
  const j = twopass(['demo', '--output', 'json']);
  const events = j.json().map((e) => e.event);
  assert.ok(events.includes('target.indeterminate') && events.includes('resource.deleted'));
});

const real = suite<{ t?: KubeTarget }>('twopass CLI on the real test cluster');
real.before(async (ctx) => {
  const t = await realTarget();
  if (t) ctx.t = t;
});
real.after(async (ctx) => ctx.t?.close());

real('run danm-endpoints: dry run, --save-snapshot, explain, state show, then --apply', async (ctx) => {
  if (!ctx.t) return;
  const t = ctx.t;
  const kube = t.client();
  const ns = await t.namespace();
  await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', ['10.10.10.7']);
  const pod = await createPod(kube, ns, 'cli-0');
  const ep = await createEndpoint(kube, pod, 'test-net1', '10.10.10.7/24');
  await forceDeletePod(kube, ns, 'cli-0');
  const { dir, base } = workdir(
    t,
    `allowShortGrace: true\nfunctions:\n  danm-endpoints:\n    minAge: 0s\n    maxDeletionPercent: 100\n    settings:\n      namespaces: [${ns}]\n`,
  );
  const dry1 = twopass(['run', 'danm-endpoints', ...base, '--record', '--save-snapshot', join(dir, 'snaps')]);
  assert.is(dry1.code, 0, dry1.err + dry1.out);
  assert.ok(dry1.json().some((e) => e.event === 'candidate.new' && e.key === ep.metadata.uid));
  const show = twopass(['state', 'show', 'danm-endpoints', ...base]);
  assert.match(show.out, /1 candidate\(s\)/);
  const dry2 = twopass(['run', 'danm-endpoints', ...base, '--record', '--save-snapshot', join(dir, 'snaps')]);
  assert.is(dry2.code, 0);
  const confirmed = dry2.json().find((e) => e.event === 'candidate.confirmed');
  assert.is(confirmed?.dryRun, true);
  assert.ok(await kube.get(R.danmeps, ns, ep.metadata.name), 'a dry run deletes nothing');
  const snaps = readdirSync(join(dir, 'snaps')).sort();
  assert.is(snaps.length, 2);
  const diff = twopass(['diff', join(dir, 'snaps', snaps[0]!), join(dir, 'snaps', snaps[1]!)]);
  assert.is(diff.code, 0);
  const explain = twopass(['explain', 'danm-endpoints', ep.metadata.uid, ...base]);
  assert.is(explain.code, 0, explain.err);
  assert.match(explain.out, /candidate\.confirmed/);
  const apply = twopass(['run', 'danm-endpoints', ...base, '--apply']);
  assert.is(apply.code, 0, apply.err);
  assert.ok(apply.json().some((e) => e.event === 'resource.deleted' && e.key === ep.metadata.uid));
  assert.is(await kube.get(R.danmeps, ns, ep.metadata.name), undefined);
  const reset = twopass(['state', 'reset', 'danm-endpoints', ...base]);
  assert.match(reset.out, /observation starts over/);
  await kube.close();
});

real('run whereabouts-ips from the CLI: dry run, then --apply', async (ctx) => {
  if (!ctx.t) return;
  const t = ctx.t;
  const kube = t.client();
  const ns = await t.namespace();
  await createPool(kube, ns, 'pool', '192.168.2.0/24', {
    '192.168.2.10': { id: containerId(), podref: `${ns}/gone-0` },
  });
  const { base } = workdir(
    t,
    `allowShortGrace: true\nfunctions:\n  whereabouts-ips:\n    minAge: 0s\n    maxDeletionPercent: 100\n    settings:\n      namespaces: [${ns}]\n`,
  );
  assert.is(twopass(['run', 'whereabouts-ips', ...base, '--record']).code, 0);
  const dry = twopass(['run', 'whereabouts-ips', ...base, '--record']);
  assert.ok(dry.json().some((e) => e.event === 'candidate.confirmed' && e.dryRun === true));
  assert.is(Object.keys(await allocations(kube, ns, 'pool')).length, 1);
  const apply = twopass(['run', 'whereabouts-ips', ...base, '--apply']);
  assert.is(apply.code, 0, apply.err);
  assert.is(Object.keys(await allocations(kube, ns, 'pool')).length, 0);
  await kube.close();
});

real(
  'a real scale-down: refused, `state accept-evidence` accepts it and keeps the candidates, later runs proceed',
  async (ctx) => {
    if (!ctx.t) return;
    const t = ctx.t;
    const kube = t.client();
    const ns = await t.namespace();
    const allocs: Record<string, { id: string; podref: string }> = {
      '192.168.3.99': { id: containerId(), podref: `${ns}/gone-0` },
    };
    for (let i = 0; i < 4; i++) {
      await createPodWithStatus(kube, ns, `web-${i}`, [`192.168.3.${10 + i}`]);
      allocs[`192.168.3.${10 + i}`] = { id: containerId(), podref: `${ns}/web-${i}` };
    }
    await createPool(kube, ns, 'pool', '192.168.3.0/24', allocs);
    // the guard is cluster-wide: its limit at half of the drop this scale-down causes
    const total = (await kube.listAll(PODS, {})).items.length;
    const limit = Math.max(1, Math.floor((2 / total) * 50));
    const { base } = workdir(
      t,
      `functions:\n  whereabouts-ips:\n    maxEvidenceDropPercent: ${limit}\n    acceptEvidenceDropAfter: never\n    settings:\n      namespaces: [${ns}]\n`,
      false,
    );
    assert.is(twopass(['run', 'whereabouts-ips', ...base, '--record']).code, 0);
    for (const n of ['web-2', 'web-3']) await forceDeletePod(kube, ns, n);
    const refused = twopass(['run', 'whereabouts-ips', ...base, '--record']);
    assert.is(refused.code, 4);
    const reason = String(refused.json().find((e) => e.event === 'run.refused')?.reason);
    assert.match(reason, /evidence pods shrank/);
    assert.match(reason, /twopass state accept-evidence whereabouts-ips/);
    const accept = twopass(['state', 'accept-evidence', 'whereabouts-ips', ...base, '--output', 'json']);
    assert.is(accept.code, 0, accept.err);
    const said = JSON.parse(accept.out) as {
      accepted: boolean;
      counts: Record<string, { was: number; now: number }>;
      deleted: number;
    };
    assert.is(said.accepted, true, accept.out);
    assert.ok(said.counts.pods && said.counts.pods.now < said.counts.pods.was, accept.out);
    assert.is(said.deleted, 0);
    const again = twopass(['state', 'accept-evidence', 'whereabouts-ips', ...base, '--output', 'table']);
    assert.match(
      again.out,
      /no evidence drop to accept; the baseline is now snapshot .* Nothing was deleted/,
    );
    assert.is(Object.keys(await allocations(kube, ns, 'pool')).length, 5, 'accepting deletes nothing');
    const after = twopass(['run', 'whereabouts-ips', ...base, '--record']);
    assert.is(after.code, 0, 'the new baseline holds');
    assert.ok(
      after.json().some((e) => e.event === 'candidate.pending' && String(e.name).includes('gone-0')),
      'the candidate observed before the scale-down was kept',
    );
    await kube.close();
  },
);

real('a run against an unreachable server aborts with exit 3', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'twopass-cli-'));
  writeFileSync(
    join(dir, 'kubeconfig'),
    readFileSync(new URL('../fixtures/unreachable.kubeconfig', import.meta.url), 'utf8'),
  );
  const r = twopass([
    'run',
    'danm-endpoints',
    '--kubeconfig',
    join(dir, 'kubeconfig'),
    '--state',
    `file:${dir}`,
    '--apply',
  ]);
  assert.is(r.code, 3);
  assert.ok(r.json().some((e) => e.event === 'run.aborted'));
});

test.run();
real.run();
