/**
 * The read-only commands as an operator uses them on the seed incident: `explain` by the
 * name the logs print (the old and the new DanmEp of ss-cinfo-0 share it), and
 * `--output json` from functions, state show, explain and diff.
 */
import { mkdtempSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { suite } from 'uvu';
import * as assert from 'uvu/assert';
import { seedIncident } from '../../shared/sandbox/scenarios/danm.ts';
import { cliFiles, twopassAsync } from '../helpers/cli.ts';
import { fakeTarget, type KubeTarget } from '../helpers/kube-target.ts';

type Ctx = { t: KubeTarget; ns: string; base: string[]; dir: string; oldUid: string; newUid: string };
const test = suite<Ctx>('read-only commands on the seed incident');

test.before(async (ctx) => {
  ctx.t = await fakeTarget();
  const kube = ctx.t.client();
  const ns = await ctx.t.namespace();
  ctx.ns = ns;
  const w = await seedIncident.before(kube, ns);
  await seedIncident.nodeLost(kube, w);
  await seedIncident.cniDone(kube, w);
  await kube.close();
  ctx.oldUid = w.oldEps['ss-cinfo-0']!.metadata.uid;
  ctx.newUid = w.newEps['ss-cinfo-0']!.metadata.uid;
  ctx.dir = mkdtempSync(join(tmpdir(), 'twopass-read-'));
  ctx.base = [
    ...cliFiles(
      ctx.dir,
      ctx.t.kubeconfig(),
      `allowShortGrace: true\nfunctions:\n  danm-endpoints:\n    minAge: 0s\n    settings: { namespaces: [${ns}] }\n`,
    ),
    '--state',
    `file:${join(ctx.dir, 'state')}`,
  ];
  for (let i = 0; i < 2; i++) {
    const r = await twopassAsync([
      'run',
      'danm-endpoints',
      ...ctx.base,
      '--record',
      '--save-snapshot',
      join(ctx.dir, 'snaps'),
    ]);
    assert.is(r.code, 0, r.err);
  }
});
test.after(async (ctx) => ctx.t.close());

test('explain by the name the table prints: both objects of the name, each with its key and decision', async (ctx) => {
  const name = `${ctx.ns}/ss-cinfo-0 eth0`;
  const r = await twopassAsync(['explain', 'danm-endpoints', name, ...ctx.base, '--output', 'table']);
  assert.is(r.code, 0, r.err);
  assert.match(r.out, /2 objects are called `.*ss-cinfo-0 eth0`; each by its key/);
  assert.ok(r.out.includes(ctx.oldUid) && r.out.includes(ctx.newUid), r.out);
  assert.match(r.out, /candidate\.pending/, 'the old one: a candidate');
  assert.match(r.out, /in use \(evidence found\)/, 'the new one: in use');
  const j = await twopassAsync(['explain', 'danm-endpoints', name, ...ctx.base, '--output', 'json']);
  const out = j.json()[0] as { matches: { key: string; now: string[] }[] };
  assert.equal(out.matches.map((m) => m.key).sort(), [ctx.oldUid, ctx.newUid].sort());
  const byKey = await twopassAsync([
    'explain',
    'danm-endpoints',
    ctx.oldUid,
    ...ctx.base,
    '--output',
    'json',
  ]);
  assert.equal(
    (byKey.json()[0] as { matches: { key: string }[] }).matches.map((m) => m.key),
    [ctx.oldUid],
  );
  // the two objects' names differ: the pod UID (short) and the address
  const names = out.matches.map((m) => (m as { name?: string }).name ?? '');
  assert.is(new Set(names).size, 2, `two names: ${names}`);
  for (const m of out.matches as { name?: string; key: string }[])
    assert.match(m.name ?? '', /ss-cinfo-0 eth0 \S+ \(pod [0-9a-f-]{1,8}\)$/);
  // by the pod's name alone: both DanmEps of it
  for (const q of [`${ctx.ns}/ss-cinfo-0`, 'ss-cinfo-0']) {
    const byPod = await twopassAsync(['explain', 'danm-endpoints', q, ...ctx.base, '--output', 'json']);
    assert.equal(
      (byPod.json()[0] as { matches: { key: string }[] }).matches.map((m) => m.key).sort(),
      [ctx.oldUid, ctx.newUid].sort(),
      q,
    );
  }
  const none = await twopassAsync(['explain', 'danm-endpoints', 'no/such eth0', ...ctx.base]);
  assert.is(none.code, 0);
  assert.match(none.out, /nothing called `no\/such eth0`/);
});

test('--apply against a function the configuration keeps dry (apply: false): a dry run, said in one warning', async (ctx) => {
  const base = [
    ...cliFiles(
      join(ctx.dir, 'dry'),
      ctx.t.kubeconfig(),
      `functions:\n  danm-endpoints:\n    apply: false\n    settings: { namespaces: [${ctx.ns}] }\n`,
    ),
    '--state',
    `file:${join(ctx.dir, 'dry-state')}`,
  ];
  const r = await twopassAsync(['run', 'danm-endpoints', ...base, '--apply', '--output', 'json']);
  assert.is(r.code, 0, r.err);
  const dry = r.json().find((e) => e.event === 'run.dry');
  assert.match(String(dry?.reason), /--apply was given, but functions\.danm-endpoints\.apply is false/);
  assert.is(r.json().find((e) => e.event === 'run.finished')?.dryRun, true);
});

test('--output json: functions, state show and diff print JSON that parses', async (ctx) => {
  const fns = (await twopassAsync(['functions', '--output', 'json'])).json();
  assert.equal(
    fns.map((f) => f.name),
    ['danm-endpoints', 'whereabouts-ips', 'lbaas-ports'],
  );
  assert.ok((fns[0]!.settings as { key: string }[]).some((s) => s.key === 'namespaces'));
  const state = (
    await twopassAsync(['state', 'show', 'danm-endpoints', ...ctx.base, '--output', 'json'])
  ).json();
  assert.is(state.length, 1);
  const keys = (state[0]!.candidates as { key: string }[]).map((c) => c.key);
  assert.ok(keys.includes(ctx.oldUid));
  assert.not.ok(keys.includes(ctx.newUid));
  const snaps = readdirSync(join(ctx.dir, 'snaps')).sort();
  const d = await twopassAsync(['diff', ...snaps.map((s) => join(ctx.dir, 'snaps', s)), '--output', 'json']);
  assert.is(d.code, 0, d.err);
  const diff = d.json()[0] as { function: string; appeared: unknown[]; vanished: unknown[] };
  assert.is(diff.function, 'danm-endpoints');
  assert.ok(Array.isArray(diff.appeared) && Array.isArray(diff.vanished));
});

test.run();
