/**
 * Properties of rules, on random worlds run through the real run loop: a rule whose
 * evidence list is incomplete (or not served) never confirms; a target whose expression
 * errors never confirms; a rule cannot target a forbidden kind, whatever else it says.
 */
import fc from 'fast-check';
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { MINUTE as MIN } from '../../shared/contract/index.ts';
import { ConfigError, ListIncompleteError } from '../../shared/errors.ts';
import type { KubeObject } from '../../shared/kube/resources.ts';
import { PODS } from '../../shared/kube/resources.ts';
import { ruleFunction } from '../../shared/rules/function.ts';
import { compileRule } from '../../shared/rules/rule.ts';
import { run } from '../../shared/runtime/run.ts';
import { instantTime } from '../../shared/time.ts';
import { MemStore, noLock, silent } from '../sim/harness.ts';
import { SimKube } from '../sim/simkube.ts';
import { WIDGETS, widgetsRule } from './widgets.ts';

const RULE = widgetsRule();

type WidgetSpec = { pod: number | null; live: boolean };
const worldArb = fc.array(fc.record({ pod: fc.option(fc.nat(20), { nil: null }), live: fc.boolean() }), {
  minLength: 1,
  maxLength: 25,
});

/** A world of widgets and pods; `failing` makes the pod list fail on the chosen runs. */
function world(specs: readonly WidgetSpec[], now: () => number) {
  const kube = new SimKube(now);
  kube.store.register(WIDGETS);
  const podUid = new Map<number, string>();
  for (const s of specs) {
    if (s.pod === null || podUid.has(s.pod)) continue;
    const p = kube.store.create(PODS, 'default', {
      metadata: { name: `pod-${s.pod}`, namespace: 'default' },
    });
    podUid.set(s.pod, p.metadata.uid);
  }
  specs.forEach((s, i) => {
    kube.store.create(WIDGETS, 'default', {
      metadata: { name: `w-${i}`, namespace: 'default' },
      // a live widget names an existing pod; others name a pod that never existed, or none at all
      spec: s.pod === null ? {} : { podUID: s.live ? podUid.get(s.pod) : `gone-${i}` },
    });
  });
  return kube;
}

async function runs(
  kube: SimKube,
  fn: ReturnType<typeof ruleFunction>,
  clock: { now: number },
  count: number,
  apply = true,
) {
  const store = new MemStore();
  const out = [];
  for (let i = 0; i < count; i++) {
    clock.now += 6 * MIN;
    out.push(
      await run(
        {
          fn,
          reader: kube,
          writer: kube,
          store,
          lock: noLock,
          time: instantTime(() => clock.now),
          log: silent,
          newId: () => `r${i}`,
        },
        {
          apply,
          record: !apply,
          policy: {
            graceMs: 5 * MIN,
            maxDeletions: 1000,
            maxDeletionPercent: 100,
            maxEvidenceDropPercent: 100,
          },
          deadlineMs: 60_000,
          concurrency: 2,
        },
      ),
    );
  }
  return out;
}

const widgetKeys = (kube: SimKube, pred: (o: KubeObject) => boolean) =>
  new Set((kube.store.list(WIDGETS, 'default') as KubeObject[]).filter(pred).map((o) => o.metadata.uid));

test('a rule whose evidence list is incomplete on a run confirms nothing on that run', async () => {
  await fc.assert(
    fc.asyncProperty(
      worldArb,
      fc.array(fc.boolean(), { minLength: 4, maxLength: 4 }),
      async (specs, failing) => {
        const clock = { now: Date.parse('2026-01-01T00:00:00Z') };
        const kube = world(specs, () => clock.now);
        let n = -1;
        const list = kube.listAll.bind(kube);
        kube.listAll = async (ref, o) => {
          if (ref.plural === 'widgets') n++;
          if (ref.plural === 'pods' && failing[n]) throw new ListIncompleteError('list pods', 'injected');
          return list(ref, o);
        };
        const results = await runs(kube, ruleFunction(compileRule(RULE, 'p')), clock, 4);
        results.forEach((r, i) => {
          if (failing[i]) {
            assert.equal(r.confirmed, [], `run ${i}: evidence incomplete, nothing confirmed`);
            assert.equal(r.deleted, []);
          }
        });
      },
    ),
    { numRuns: 150 },
  );
});

test('a rule whose evidence is not served confirms nothing, ever', async () => {
  const unserved = compileRule(
    { ...RULE, evidence: { pods: { ...RULE.evidence.pods, group: 'gone.example.com' } } },
    'p',
  );
  await fc.assert(
    fc.asyncProperty(worldArb, async (specs) => {
      const clock = { now: Date.parse('2026-01-01T00:00:00Z') };
      const kube = world(specs, () => clock.now);
      for (const r of await runs(kube, ruleFunction(unserved), clock, 3)) assert.equal(r.confirmed, []);
    }),
    { numRuns: 100 },
  );
});

test('a target whose expression errors is never confirmed; the others are decided as usual', async () => {
  await fc.assert(
    fc.asyncProperty(worldArb, async (specs) => {
      const clock = { now: Date.parse('2026-01-01T00:00:00Z') };
      const kube = world(specs, () => clock.now);
      const erroring = widgetKeys(kube, (o) => (o.spec as { podUID?: string }).podUID === undefined);
      const orphans = widgetKeys(kube, (o) =>
        String((o.spec as { podUID?: string }).podUID).startsWith('gone-'),
      );
      const results = await runs(kube, ruleFunction(compileRule(RULE, 'p')), clock, 3, false);
      const confirmed = new Set(results.flatMap((r) => r.confirmed));
      for (const k of erroring) assert.not.ok(confirmed.has(k), 'an expression error is not unused');
      for (const k of confirmed) assert.ok(orphans.has(k), 'only orphans are confirmed');
      assert.equal(new Set(results[2]!.confirmed), orphans, 'every orphan is confirmed by the third run');
    }),
    { numRuns: 150 },
  );
});

test('a rule cannot target a forbidden kind, whatever mark or opt-in it declares', () => {
  const forbidden = fc.constantFrom(
    ['', 'namespaces'],
    ['', 'nodes'],
    ['apiextensions.k8s.io', 'customresourcedefinitions'],
    ['apiregistration.k8s.io', 'apiservices'],
    ['admissionregistration.k8s.io', 'validatingwebhookconfigurations'],
    ['admissionregistration.k8s.io', 'mutatingwebhookconfigurations'],
    ['admissionregistration.k8s.io', 'validatingadmissionpolicies'],
    ['rbac.authorization.k8s.io', 'roles'],
    ['rbac.authorization.k8s.io', 'clusterrolebindings'],
  );
  const owner = fc.oneof(
    fc.constant({ label: 'app=x' }),
    fc.constant({ annotation: 'team' }),
    fc.constant({ ownerKind: 'Pod' }),
    fc.constantFrom('', 'rbac.authorization.k8s.io', 'apiextensions.k8s.io').map((group) => ({ group })),
  );
  fc.assert(
    fc.property(
      forbidden,
      owner,
      fc.boolean(),
      fc.boolean(),
      ([group, resource], mark, allowBuiltIn, namespaced) => {
        const doc = {
          ...RULE,
          target: { group, version: 'v1', resource, kind: 'X', namespaced },
          owner: mark,
          allowBuiltIn,
        };
        assert.throws(
          () => compileRule(doc, 'p'),
          (e: unknown) => e instanceof ConfigError && /never a target/.test((e as Error).message),
        );
      },
    ),
    { numRuns: 300 },
  );
});

test.run();
