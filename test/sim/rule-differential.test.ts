/**
 * The DanmEp rule (functions/rules/danm-eps) against the built-in danm-endpoints in the
 * race simulator. On random worlds (TWOPASS_RULE_DIFF_RUNS schedules, default 3000):
 * before every run, both functions observe the same settled world and must make the
 * same decision on every DanmEp (in use, indeterminate, or unused); the rule is the
 * cleaner of the schedule and must never violate safety, and must reclaim every orphan
 * DanmEp within its bound (the bits are the built-in function's, not the rule's).
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { danmEndpoints } from '../../functions/danm-endpoints/index.ts';
import { packageRoot } from '../../shared/paths.ts';
import { ruleFunction } from '../../shared/rules/function.ts';
import { loadRuleFile } from '../../shared/rules/rule.ts';
import { parsed } from '../helpers/settings.ts';
import { type Cleaner, MIN, runSchedule, twopassCleaner } from './harness.ts';
import { DANM_POLICY, danmWorld } from './sim-danm.ts';
import { randomSchedule } from './suite.ts';
import type { DanmWorld } from './worlds/danm.ts';

const RUNS = Number(process.env.TWOPASS_RULE_DIFF_RUNS ?? 3000);
const SEED = Number(process.env.TWOPASS_SIM_SEED ?? 1);
const rule = ruleFunction(loadRuleFile(`${packageRoot()}/functions/rules/danm-eps/rule.yaml`)[0]!);

type Decision = 'in-use' | 'indeterminate' | 'unused';

/** Each DanmEp's decision in one observation of a function. */
async function decisions(fn: typeof rule, w: DanmWorld, now: number): Promise<Map<string, Decision>> {
  const snap = await fn.observe(w.kube, {
    now,
    signal: new AbortController().signal,
    settings: parsed(fn),
    note: () => {},
  });
  const used = new Set(snap.used);
  const ind = new Set(snap.indeterminate.map((i) => i.key));
  const blocked = (snap.blockers ?? []).length > 0;
  const out = new Map<string, Decision>();
  for (const t of snap.targets)
    if (t.kind === 'DanmEp')
      out.set(t.key, used.has(t.key) ? 'in-use' : ind.has(t.key) || blocked ? 'indeterminate' : 'unused');
  return out;
}

type Tally = { compared: number; byDecision: Record<Decision, number>; differences: string[] };

/** The rule as the schedule's cleaner; before each run, both functions judge the same world. */
function comparingCleaner(w: DanmWorld, clock: () => number, tally: Tally, seed: number): Cleaner {
  const inner = twopassCleaner(rule, w.kube, w.kube, clock, DANM_POLICY);
  return {
    name: 'danm-eps rule',
    run: async (now) => {
      // the same world for both: no faults, nothing moving between their lists
      const [rate, before] = [w.kube.faultRate, w.kube.beforeList];
      w.kube.faultRate = 0;
      w.kube.beforeList = () => {};
      try {
        const [a, b] = [await decisions(danmEndpoints, w, now), await decisions(rule, w, now)];
        assert.equal([...a.keys()].sort(), [...b.keys()].sort(), `seed ${seed}: the same DanmEps`);
        for (const [key, d] of a) {
          tally.compared++;
          tally.byDecision[d]++;
          if (b.get(key) !== d)
            tally.differences.push(
              `seed ${seed} at ${new Date(now).toISOString()}: DanmEp ${key} built-in ${d}, rule ${b.get(key)}`,
            );
        }
      } finally {
        w.kube.faultRate = rate;
        w.kube.beforeList = before;
      }
      await inner.run(now);
    },
  };
}

test(`the danm-eps rule and danm-endpoints decide every DanmEp alike on ${RUNS} random schedules; the rule never violates safety`, async () => {
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
    const w = danmWorld(() => clock.now, seed);
    // the rule reclaims DanmEps; leaked bits are the built-in function's to reclaim
    const all = w.orphans.bind(w);
    w.orphans = () => new Map([...all()].filter(([, kind]) => kind === 'DanmEp'));
    const r = await runSchedule(
      w,
      comparingCleaner(w, () => clock.now, tally, seed),
      clock,
      randomSchedule(seed, { DanmEp: 15 * MIN }),
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
    `\n| schedules | DanmEp decisions compared | in use | indeterminate | unused | differences | rule's safety violations | orphan DanmEps | not reclaimed in bound |\n|---|---|---|---|---|---|---|---|---|\n| ${RUNS} | ${tally.compared} | ${tally.byDecision['in-use']} | ${tally.byDecision.indeterminate} | ${tally.byDecision.unused} | ${tally.differences.length} | ${violations} | ${orphans} | ${unreclaimed.length} |\n`,
  );
  assert.ok(tally.byDecision['in-use'] > 0 && tally.byDecision.unused > 0, 'the worlds show both decisions');
  assert.equal(tally.differences.slice(0, 5), [], 'the same decisions');
  assert.is(violations, 0, firstViolation);
  assert.equal(unreclaimed.slice(0, 5), [], 'every orphan DanmEp reclaimed in bound');
});

test.run();
