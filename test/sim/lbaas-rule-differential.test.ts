/**
 * A cloud rule (test/sim/lbaas-ports.rule.yaml) against the built-in lbaas-ports in the race
 * simulator's ch-k8s-lbaas world. On random worlds (TWOPASS_RULE_DIFF_RUNS schedules,
 * default 1000): before every run, both functions observe the same settled world and must
 * make the same decision on every port (in use, indeterminate, or unused: whether it may be
 * deleted now; a port the built-in holds because the controller runs counts as
 * indeterminate, which is what the rule makes it by its controller evidence); the rule is the
 * cleaner of the schedule and must never delete a port a Service holds or is being placed
 * on, and must reclaim every orphan port within its bound.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { lbaasPorts } from '../../functions/lbaas-ports/index.ts';
import type { AnyFunction } from '../../shared/contract/index.ts';
import { cloudRuleFunction } from '../../shared/rules/cloud-function.ts';
import type { CloudRule } from '../../shared/rules/cloud-rule.ts';
import { loadAnyRuleFile } from '../../shared/rules/registry.ts';
import { parsed } from '../helpers/settings.ts';
import { type Cleaner, runSchedule, twopassCleaner } from './harness.ts';
import { LB_BOUNDS, LB_POLICY } from './sim-lbaas.ts';
import { randomSchedule } from './suite.ts';
import { LbaasWorld } from './worlds/lbaas.ts';

const RUNS = Number(process.env.TWOPASS_RULE_DIFF_RUNS ?? 1000);
const SEED = Number(process.env.TWOPASS_SIM_SEED ?? 1);
const CLUSTER = 'sim';
const SCOPE = `twopass.io/cluster=${CLUSTER}`;
const rule = cloudRuleFunction(
  loadAnyRuleFile(new URL('./lbaas-ports.rule.yaml', import.meta.url).pathname)[0] as CloudRule,
);
const RULE_SETTINGS = { projectId: 'p', cluster: CLUSTER, pageSize: 500 };
const BUILT_IN_SETTINGS = {
  projectId: 'p',
  scopeTag: SCOPE,
  pageSize: 500,
  concurrency: 8,
  unconditionalDeletes: false,
};

type Decision = 'in-use' | 'indeterminate' | 'unused';

async function decisions(
  fn: AnyFunction,
  w: LbaasWorld,
  now: number,
  settings: Record<string, unknown>,
): Promise<Map<string, Decision>> {
  const snap = await fn.observe(
    { kube: w.kube, neutron: w.neutron },
    { now, signal: new AbortController().signal, settings: parsed(fn, settings), note: () => {} },
  );
  const used = new Set(snap.used);
  const ind = new Set(snap.indeterminate.map((i) => i.key));
  const blocked = (snap.blockers ?? []).length > 0 || (snap.holds ?? []).length > 0;
  const out = new Map<string, Decision>();
  for (const t of snap.targets)
    if (t.kind === 'Port')
      out.set(t.key, used.has(t.key) ? 'in-use' : ind.has(t.key) || blocked ? 'indeterminate' : 'unused');
  return out;
}

type Tally = { compared: number; byDecision: Record<Decision, number>; differences: string[] };

function comparingCleaner(w: LbaasWorld, clock: () => number, tally: Tally, seed: number): Cleaner {
  const inner = twopassCleaner(
    rule,
    { kube: w.kube, neutron: w.neutron },
    { kube: w.kube, neutron: w.neutron },
    clock,
    LB_POLICY,
    RULE_SETTINGS,
  );
  return {
    name: 'lbaas-ports rule',
    run: async (now) => {
      // the same world for both: no faults, nothing moving between their lists
      const saved = [w.kube.faultRate, w.neutron.faultRate, w.kube.beforeList, w.neutron.beforeList] as const;
      w.kube.faultRate = 0;
      w.neutron.faultRate = 0;
      w.kube.beforeList = () => {};
      w.neutron.beforeList = () => {};
      try {
        const a = await decisions(lbaasPorts, w, now, BUILT_IN_SETTINGS);
        const b = await decisions(rule, w, now, RULE_SETTINGS);
        assert.equal([...a.keys()].sort(), [...b.keys()].sort(), `seed ${seed}: the same ports`);
        for (const [key, d] of a) {
          tally.compared++;
          tally.byDecision[d]++;
          if (b.get(key) !== d)
            tally.differences.push(
              `seed ${seed} at ${new Date(now).toISOString()}: port ${key} built-in ${d}, rule ${b.get(key)}`,
            );
        }
      } finally {
        [w.kube.faultRate, w.neutron.faultRate, w.kube.beforeList, w.neutron.beforeList] = saved;
      }
      await inner.run(now);
    },
  };
}

test(`a cloud rule and lbaas-ports decide every port alike on ${RUNS} random schedules; the rule never violates safety`, async () => {
  const tally: Tally = {
    compared: 0,
    byDecision: { 'in-use': 0, indeterminate: 0, unused: 0 },
    differences: [],
  };
  let violations = 0;
  let firstViolation = '';
  let orphans = 0;
  let unreclaimed: string[] = [];
  for (let seed = SEED; seed < SEED + RUNS; seed++) {
    const clock = { now: Date.parse('2026-01-01T00:00:00Z') };
    const w = new LbaasWorld(() => clock.now, SCOPE);
    const r = await runSchedule(
      w,
      comparingCleaner(w, () => clock.now, tally, seed),
      clock,
      randomSchedule(seed, LB_BOUNDS),
    );
    orphans += r.orphans;
    if (r.violations.length) {
      violations += r.violations.length;
      firstViolation ||= `seed ${seed}: ${r.violations[0]}`;
    }
    if (r.unreclaimed.length)
      unreclaimed = [...unreclaimed, ...r.unreclaimed.map((u) => `seed ${seed}: ${u}`)];
  }
  console.log(
    `\n| schedules | port decisions compared | in use | indeterminate | unused | differences | rule's safety violations | orphan ports | not reclaimed in bound |\n|---|---|---|---|---|---|---|---|---|\n| ${RUNS} | ${tally.compared} | ${tally.byDecision['in-use']} | ${tally.byDecision.indeterminate} | ${tally.byDecision.unused} | ${tally.differences.length} | ${violations} | ${orphans} | ${unreclaimed.length} |\n`,
  );
  assert.ok(
    tally.byDecision['in-use'] > 0 && tally.byDecision.unused > 0 && tally.byDecision.indeterminate > 0,
    'the worlds show every decision',
  );
  assert.equal(tally.differences.slice(0, 5), [], 'the same decisions');
  assert.is(violations, 0, firstViolation);
  assert.ok(orphans > 0, 'the worlds leak ports');
  assert.equal(unreclaimed.slice(0, 5), [], 'every orphan port reclaimed in bound');
});

test.run();
