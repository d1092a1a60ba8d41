/**
 * The race simulator in `npm test`: every incident script for twopass and the
 * baselines (each baseline must violate safety where it is prone: proof the
 * simulator sees the bugs), then random schedules (TWOPASS_SIM_RUNS, default
 * 20000 per function). A failing seed reproduces with `npm run sim -- --seed N`.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { runRandom, runScripts, SIM_FUNCTIONS, scriptTable, table } from './suite.ts';

const RUNS = Number(process.env.TWOPASS_SIM_RUNS ?? 20_000);
const SEED = Number(process.env.TWOPASS_SIM_SEED ?? 1);

test('incident scripts: baselines violate safety where they are prone; twopass never, and reclaims', async () => {
  const rows = (await Promise.all(SIM_FUNCTIONS.map((f) => runScripts(f)))).flat();
  console.log(`\n${scriptTable(rows)}\n`);
  for (const r of rows) {
    if (r.cleaner === 'twopass') {
      assert.equal(r.violations, [], `twopass on "${r.script}"`);
      assert.is(r.orphansLeft, 0, `twopass left orphans on "${r.script}"`);
    } else if (r.prone) {
      assert.ok(r.violations.length > 0, `baseline "${r.cleaner}" should violate safety on "${r.script}"`);
    }
  }
});

test(`random schedules: ${RUNS} per function, zero violations, every orphan reclaimed in bound`, async () => {
  const rows = [];
  for (const f of SIM_FUNCTIONS) {
    const tp = await runRandom(f, 'twopass', RUNS, SEED);
    rows.push(tp);
    for (let b = 0; b < f.baselines.length; b++) rows.push(await runRandom(f, b, Math.min(RUNS, 500), SEED));
  }
  console.log(`\nseeds ${SEED}..${SEED + RUNS - 1}\n${table(rows)}\n`);
  for (const r of rows.filter((x) => x.cleaner === 'twopass')) {
    assert.is(
      r.violations,
      0,
      `${r.fn}: ${r.firstViolation?.what} (reproduce: npm run sim -- --function ${r.fn} --seed ${r.firstViolation?.seed})`,
    );
    assert.is(
      r.unreclaimed,
      0,
      `${r.fn}: ${r.firstUnreclaimed?.what} (reproduce: npm run sim -- --function ${r.fn} --seed ${r.firstUnreclaimed?.seed})`,
    );
    assert.ok(r.reclaimed > 0);
  }
  for (const r of rows.filter((x) => x.cleaner !== 'twopass'))
    assert.ok(r.violations > 0, `baseline ${r.cleaner} should violate safety in random schedules`);
});

test.run();
