/**
 * Report -> approval -> apply, as an operator does it from the CLI, against a KubeTarget
 * (the real API server in approval.real.test.ts, the fake in approval.fake.test.ts).
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as assert from 'uvu/assert';
import { type KubeObject, NAMESPACES } from '../../shared/kube/resources.ts';
import type { Report } from '../../shared/runtime/report.ts';
import {
  createEndpoint,
  createNetwork,
  createPod,
  forceDeletePod,
  leakedEndpoint,
  R,
} from '../../shared/sandbox/scenarios/danm.ts';
import { cliFiles, twopassAsync } from '../helpers/cli.ts';
import type { KubeTarget } from '../helpers/kube-target.ts';
import { targetSuite } from '../helpers/target-suite.ts';

export function approvalScenarios(label: string, getTarget: () => Promise<KubeTarget | undefined>): void {
  const { it, run } = targetSuite(`report, approval, apply (${label})`, getTarget);

  it('more deletions than approval.requiredAbove wait (exit 6); the report is reviewed; apply deletes the rest and skips what was rescued', async (t, kube) => {
    const ns = await t.namespace();
    const ips = ['10.10.10.31', '10.10.10.32', '10.10.10.33'];
    await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', ips);
    const eps: KubeObject[] = [];
    for (const [i, ip] of ips.entries()) {
      eps.push(await createEndpoint(kube, await createPod(kube, ns, `gone-${i}`), 'test-net1', `${ip}/24`));
      await forceDeletePod(kube, ns, `gone-${i}`);
    }
    const dir = mkdtempSync(join(tmpdir(), 'twopass-approval-'));
    const base = [
      ...cliFiles(
        dir,
        t.kubeconfig(),
        `allowShortGrace: true\nfunctions:\n  danm-endpoints:\n    grace: 0s\n    minAge: 0s\n    maxDeletionPercent: 100\n    approval: { requiredAbove: 2 }\n    settings: { namespaces: [${ns}] }\n`,
      ),
      '--state',
      `file:${join(dir, 'state')}`,
    ];
    const present = async (ep: KubeObject) => (await kube.get(R.danmeps, ns, ep.metadata.name)) !== undefined;
    assert.is((await twopassAsync(['run', 'danm-endpoints', ...base, '--record'])).code, 0);

    // 1. Three confirmed, more than two: nothing deleted, exit 6.
    const waits = await twopassAsync(['run', 'danm-endpoints', ...base, '--apply']);
    assert.is(waits.code, 6, waits.err + waits.out.slice(-600));
    const required = waits.json().find((e) => e.event === 'approval.required');
    assert.ok(required);
    assert.match(
      String(required.reason),
      /3 deletions exceed approval\.requiredAbove \(2\): nothing deleted/,
    );
    for (const ep of eps) assert.ok(await present(ep), 'nothing deleted while approval is required');

    // 2. The report, for a human.
    const file = join(dir, 'report.json');
    const made = await twopassAsync(['run', 'danm-endpoints', ...base, '--report', file]);
    assert.is(made.code, 0, made.err);
    const report = JSON.parse(readFileSync(file, 'utf8')) as Report;
    assert.equal(report.entries.map((e) => e.key).sort(), eps.map((e) => e.metadata.uid).sort());
    for (const e of report.entries) {
      assert.is(e.kind, 'DanmEp');
      assert.is(e.namespace, ns);
      assert.match(e.unused, /Pod .* is gone/);
      assert.match(e.removal, /DELETE the DanmEp \(preconditions: uid, resourceVersion\)/);
      assert.ok(e.observations >= 2 && Date.parse(e.unusedSince) > 0 && e.fingerprint);
    }
    const table = await twopassAsync([
      'run',
      'danm-endpoints',
      ...base,
      '--report',
      file,
      '--output',
      'table',
    ]);
    assert.match(table.out, /3 confirmed for deletion, report .*report\.json/);
    assert.match(table.out, /Review, then: twopass apply --from-report/);

    // 3. While it is reviewed, one of them is in use again: its DanmEp now names a live pod.
    const live = await createPod(kube, ns, 'alive-0');
    const rescued = (await kube.get(R.danmeps, ns, eps[0]!.metadata.name))!;
    await kube.replace(R.danmeps, {
      ...rescued,
      spec: { ...(rescued.spec as object), Pod: 'alive-0', PodUID: live.metadata.uid },
    } as KubeObject);

    // 4. apply: the two still confirmed and unchanged go; the rescued one stays, and the log says why.
    const applied = await twopassAsync(['apply', '--from-report', file, ...base]);
    assert.is(applied.code, 0, applied.err + applied.out.slice(-600));
    assert.ok(await present(eps[0]!), 'the rescued DanmEp stays');
    assert.not.ok(await present(eps[1]!));
    assert.not.ok(await present(eps[2]!));
    const skipped = applied.json().find((e) => e.event === 'approval.skipped');
    assert.is(skipped?.key, eps[0]!.metadata.uid);
    assert.match(String(skipped?.reason), /in use again since the report|changed since the report/);
    assert.equal(
      applied
        .json()
        .filter((e) => e.event === 'resource.deleted')
        .map((e) => e.key)
        .sort(),
      [eps[1]!.metadata.uid, eps[2]!.metadata.uid].sort(),
    );
  });

  it("the review step never deletes: `run --report` with the install's config (apply: true) is a dry run; `run --apply --report` writes a record that apply --from-report refuses", async (t, kube) => {
    const ns = await t.namespace();
    const a = await leakedEndpoint(kube, ns, '10.10.10.51');
    const dir = mkdtempSync(join(tmpdir(), 'twopass-approval-'));
    const base = [
      ...cliFiles(
        dir,
        t.kubeconfig(),
        `apply: true\nallowShortGrace: true\nfunctions:\n  danm-endpoints:\n    grace: 0s\n    minAge: 0s\n    maxDeletionPercent: 100\n    settings: { namespaces: [${ns}] }\n`,
      ),
      '--state',
      `file:${join(dir, 'state')}`,
    ];
    const present = async () => (await kube.get(R.danmeps, ns, a.metadata.name)) !== undefined;
    assert.is((await twopassAsync(['run', 'danm-endpoints', ...base, '--record'])).code, 0);
    const file = join(dir, 'review.json');
    const review = await twopassAsync([
      'run',
      'danm-endpoints',
      ...base,
      '--report',
      file,
      '--output',
      'table',
    ]);
    assert.is(review.code, 0, review.err);
    assert.ok(await present(), 'the review step deleted nothing, though the config says apply: true');
    assert.match(review.out, /\(dry run\)/);
    assert.match(review.out, /Review, then: twopass apply --from-report/);
    const r = JSON.parse(readFileSync(file, 'utf8')) as Report;
    assert.is(r.purpose, 'review');
    assert.is(r.entries.length, 1);
    const recordFile = join(dir, 'record.json');
    const deleting = await twopassAsync([
      'run',
      'danm-endpoints',
      ...base,
      '--apply',
      '--report',
      recordFile,
      '--output',
      'table',
    ]);
    assert.is(deleting.code, 0, deleting.err);
    assert.not.ok(await present(), '--apply deletes');
    assert.not.ok(deleting.out.includes('Review, then'), 'no review asked of what is already deleted');
    assert.match(deleting.out, /A record of what this run set out to delete/);
    assert.is((JSON.parse(readFileSync(recordFile, 'utf8')) as Report).purpose, 'record');
    const refused = await twopassAsync(['apply', '--from-report', recordFile, ...base]);
    assert.is(refused.code, 2);
    assert.match(refused.err, /not a report for review/);
  });

  it("a stale report, another function's, or a file that is not a report is refused (exit 2), and nothing is deleted", async (t, kube) => {
    const ns = await t.namespace();
    const ep = await leakedEndpoint(kube, ns, '10.10.10.41');
    const dir = mkdtempSync(join(tmpdir(), 'twopass-approval-'));
    const base = [
      ...cliFiles(
        dir,
        t.kubeconfig(),
        `allowShortGrace: true\nfunctions:\n  danm-endpoints:\n    grace: 0s\n    minAge: 0s\n    maxDeletionPercent: 100\n    approval: { maxReportAge: 1h }\n    settings: { namespaces: [${ns}] }\n`,
      ),
      '--state',
      `file:${join(dir, 'state')}`,
    ];
    assert.is((await twopassAsync(['run', 'danm-endpoints', ...base, '--record'])).code, 0);
    const file = join(dir, 'report.json');
    assert.is((await twopassAsync(['run', 'danm-endpoints', ...base, '--report', file])).code, 0);
    const report = JSON.parse(readFileSync(file, 'utf8')) as Report;
    assert.is(report.entries.length, 1);
    // the report names its cluster by kube-system's UID as well as by URL
    const kubeSystem = await kube.get(NAMESPACES, undefined, 'kube-system');
    assert.ok(kubeSystem?.metadata.uid);
    assert.is(report.clusterUid, kubeSystem?.metadata.uid);
    const variant = (name: string, change: Partial<Report>) => {
      const p = join(dir, name);
      writeFileSync(p, JSON.stringify({ ...report, ...change }));
      return p;
    };
    const cases: [string, RegExp][] = [
      [
        variant('stale.json', { createdAt: new Date(Date.now() - 2 * 3_600_000).toISOString() }),
        /older than approval\.maxReportAge \(1h\)/,
      ],
      [
        // a date ahead of the clock would never go stale: refused beyond the skew allowed
        variant('future.json', { createdAt: new Date(Date.now() + 365 * 24 * 3_600_000).toISOString() }),
        /ahead of this clock \(more than the 5m of skew allowed\)/,
      ],
      [variant('undated.json', { createdAt: 'yesterday' }), /`createdAt`: expected a time/],
      [
        variant('other.json', { function: 'whereabouts-ips' }),
        /an entry of kind DanmEp, which whereabouts-ips does not remove/,
      ],
      [
        variant('elsewhere.json', { cluster: 'https://10.0.0.1:6443' }),
        /the report is of the cluster at https:\/\/10\.0\.0\.1:6443/,
      ],
      [
        // every in-cluster run knows its server by the same Service address: the UID tells them apart
        variant('twin.json', { clusterUid: '0f6e7d2c-0000-4000-8000-000000000001' }),
        /kube-system namespace has UID 0f6e7d2c-0000-4000-8000-000000000001, this one's is .*another cluster/,
      ],
      [variant('unnamed.json', { clusterUid: undefined as never }), /not a report|clusterUid/],
      [variant('broken.json', { entries: 'all' as never }), /not a report/],
    ];
    for (const [path, says] of cases) {
      const r = await twopassAsync(['apply', '--from-report', path, ...base]);
      assert.is(r.code, 2, `${path}: ${r.err}${r.out.slice(-300)}`);
      assert.match(r.err, says);
    }
    assert.ok(await kube.get(R.danmeps, ns, ep.metadata.name), 'nothing deleted');
    // the fresh report itself is accepted
    const ok = await twopassAsync(['apply', '--from-report', file, ...base]);
    assert.is(ok.code, 0, ok.err);
    assert.is(await kube.get(R.danmeps, ns, ep.metadata.name), undefined);
  });

  it('reports agreed across time: only entries in every report with the same fingerprint are applied, the reports an hour apart; closer ones are refused', async (t, kube) => {
    const ns = await t.namespace();
    const ips = ['10.10.10.51', '10.10.10.52', '10.10.10.53'];
    await createNetwork(kube, ns, 'test-net1', '10.10.10.0/24', ips);
    const eps: KubeObject[] = [];
    for (const [i, ip] of ips.entries()) {
      eps.push(await createEndpoint(kube, await createPod(kube, ns, `gone-${i}`), 'test-net1', `${ip}/24`));
      await forceDeletePod(kube, ns, `gone-${i}`);
    }
    const dir = mkdtempSync(join(tmpdir(), 'twopass-agreed-'));
    const base = [
      ...cliFiles(
        dir,
        t.kubeconfig(),
        `allowShortGrace: true\nfunctions:\n  danm-endpoints:\n    grace: 0s\n    minAge: 0s\n    maxDeletionPercent: 100\n    settings: { namespaces: [${ns}] }\n`,
      ),
      '--state',
      `file:${join(dir, 'state')}`,
    ];
    assert.is((await twopassAsync(['run', 'danm-endpoints', ...base, '--record'])).code, 0);
    const late = join(dir, 'late.json');
    assert.is((await twopassAsync(['run', 'danm-endpoints', ...base, '--report', late])).code, 0);
    const report = JSON.parse(readFileSync(late, 'utf8')) as Report;
    assert.is(report.entries.length, 3);
    const [a, b, c] = eps.map((ep) => report.entries.find((e) => e.key === ep.metadata.uid)!);
    // the report an operator took an hour before: c was not confirmed yet, b was another object then
    const early = join(dir, 'early.json');
    writeFileSync(
      early,
      JSON.stringify({
        ...report,
        createdAt: new Date(Date.parse(report.createdAt) - 61 * 60_000).toISOString(),
        entries: [a, { ...b!, fingerprint: `${b!.fingerprint}-then` }],
      }),
    );
    const close = join(dir, 'close.json');
    writeFileSync(
      close,
      JSON.stringify({
        ...report,
        createdAt: new Date(Date.parse(report.createdAt) - 10 * 60_000).toISOString(),
      }),
    );
    const tooClose = await twopassAsync(['apply', '--from-report', close, late, ...base]);
    assert.is(tooClose.code, 2, tooClose.err);
    assert.match(tooClose.err, /less than the 1h they must be apart/);
    // and --apart cannot switch the check off
    const zero = await twopassAsync(['apply', '--from-report', close, late, ...base, '--apart', '0s']);
    assert.is(zero.code, 2, zero.err);
    assert.match(zero.err, /--apart: `0s` is below the floor of `10m`/);
    for (const ep of eps) assert.ok(await kube.get(R.danmeps, ns, ep.metadata.name), 'nothing deleted');
    const applied = await twopassAsync(['apply', '--from-report', early, late, ...base]);
    assert.is(applied.code, 0, applied.err + applied.out.slice(-600));
    const left = applied.json().filter((e) => e.event === 'approval.not-agreed');
    assert.equal(left.map((e) => e.key).sort(), [b!.key, c!.key].sort());
    assert.match(String(left.find((e) => e.key === b!.key)?.reason), /fingerprint differs/);
    assert.match(String(left.find((e) => e.key === c!.key)?.reason), /not in .*early\.json/);
    assert.is(await kube.get(R.danmeps, ns, eps[0]!.metadata.name), undefined, 'the agreed entry is deleted');
    assert.ok(
      await kube.get(R.danmeps, ns, eps[1]!.metadata.name),
      'the one that changed between the reports stays',
    );
    assert.ok(await kube.get(R.danmeps, ns, eps[2]!.metadata.name), 'the one in one report only stays');
  });

  run();
}
