/**
 * `npm run sim -- [--runs N] [--seed N] [--function NAME] [--verbose]`: more random
 * schedules than `npm test` runs, or one seed again (a failing seed reproduces).
 */
import { parseArgs } from 'node:util';
import { runSchedule } from './harness.ts';
import { randomSchedule, runRandom, runScripts, SIM_FUNCTIONS, scriptTable, table } from './suite.ts';

const { values } = parseArgs({
  options: {
    runs: { type: 'string' },
    seed: { type: 'string' },
    function: { type: 'string' },
    help: { type: 'boolean', short: 'h' },
  },
});
if (values.help) {
  console.log(
    'Usage: npm run sim -- [--runs N] [--seed N] [--function danm-endpoints|whereabouts-ips|lbaas-ports]\n  --seed alone replays that one schedule and prints what it found.',
  );
  process.exit(0);
}
const fns = SIM_FUNCTIONS.filter((f) => !values.function || f.name === values.function);
if (fns.length === 0) {
  console.error(`unknown function ${values.function}; known: ${SIM_FUNCTIONS.map((f) => f.name).join(', ')}`);
  process.exit(2);
}
const seed = Number(values.seed ?? 1);
if (values.seed !== undefined && values.runs === undefined) {
  let bad = 0;
  for (const f of fns) {
    const clock = { now: Date.parse('2026-01-01T00:00:00Z') };
    const w = f.world(() => clock.now, seed);
    const r = await runSchedule(
      w,
      f.twopass(w, () => clock.now),
      clock,
      randomSchedule(seed, f.bounds),
    );
    console.log(
      `${f.name} seed ${seed}: ${r.steps} steps, ${r.violations.length} violations, ${r.reclaimed}/${r.orphans} orphans reclaimed, worst latency ${r.worstLatencyMs / 60_000} min`,
    );
    for (const v of [...r.violations, ...r.unreclaimed]) console.log(`  ${v}`);
    bad += r.violations.length + r.unreclaimed.length;
  }
  process.exit(bad ? 1 : 0);
}
const runs = Number(values.runs ?? 20_000);
const t = Date.now();
console.log(scriptTable((await Promise.all(fns.map((f) => runScripts(f)))).flat()));
const rows = [];
for (const f of fns) {
  rows.push(await runRandom(f, 'twopass', runs, seed));
  for (let b = 0; b < f.baselines.length; b++) rows.push(await runRandom(f, b, Math.min(runs, 1000), seed));
}
console.log(`\nseeds ${seed}..${seed + runs - 1}, ${((Date.now() - t) / 1000).toFixed(1)} s\n${table(rows)}`);
process.exit(rows.some((r) => r.cleaner === 'twopass' && (r.violations || r.unreclaimed)) ? 1 : 0);
