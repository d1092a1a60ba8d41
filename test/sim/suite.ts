/** Runs the simulator for every function: scripts for twopass and its baselines, then random schedules. */
import { type Cleaner, MIN, runSchedule, type World } from './harness.ts';
import { runScript, type Script } from './scripts.ts';
import { DANM_BOUNDS, DANM_POLICY, DANM_SCRIPTS, danmBaseline, danmTwopass, danmWorld } from './sim-danm.ts';
import { LB_BOUNDS, LB_SCRIPTS, lbBaseline, lbTwopass, lbWorld } from './sim-lbaas.ts';
import { WB_BOUNDS, WB_SCRIPTS, wbBaseline, wbTwopass, wbWorld } from './sim-whereabouts.ts';

export type SimFunction<W extends World> = Readonly<{
  name: string;
  /** A world; `variant` (the seed in random schedules) may pick its layout. */
  world: (clock: () => number, variant?: number) => W;
  twopass: (w: W, clock: () => number, policy?: import('../../shared/engine/types.ts').Policy) => Cleaner;
  baselines: readonly Readonly<{
    name: string;
    make: (w: W, clock: () => number) => Cleaner;
    prone: readonly string[];
  }>[];
  scripts: readonly Script<W>[];
  bounds: Readonly<Record<string, number>>;
}>;

export const SIM_FUNCTIONS: SimFunction<World>[] = [
  {
    name: 'danm-endpoints',
    world: danmWorld,
    twopass: danmTwopass as never,
    baselines: [
      {
        name: 'name-matching, single snapshot (DANM cleaner)',
        make: danmBaseline as never,
        prone: [
          DANM_SCRIPTS[0]!.name,
          DANM_SCRIPTS[2]!.name,
          DANM_SCRIPTS[3]!.name,
          DANM_SCRIPTS[5]!.name,
          DANM_SCRIPTS[7]!.name,
          DANM_SCRIPTS[8]!.name,
          DANM_SCRIPTS[9]!.name,
        ],
      },
    ],
    scripts: DANM_SCRIPTS as never,
    bounds: DANM_BOUNDS,
  },
  {
    name: 'whereabouts-ips',
    world: wbWorld,
    twopass: wbTwopass as never,
    baselines: [
      {
        name: 'pods before pools, by podref (early whereabouts)',
        make: wbBaseline as never,
        prone: [WB_SCRIPTS[1]!.name],
      },
    ],
    scripts: WB_SCRIPTS as never,
    bounds: WB_BOUNDS,
  },
  {
    name: 'lbaas-ports',
    world: lbWorld,
    twopass: lbTwopass as never,
    baselines: [
      {
        name: 'in-memory port map with a start-up barrier (ch-k8s-lbaas)',
        make: lbBaseline as never,
        prone: [LB_SCRIPTS[0]!.name],
      },
    ],
    scripts: LB_SCRIPTS as never,
    bounds: LB_BOUNDS,
  },
];
void DANM_POLICY;

export type ScriptRow = {
  fn: string;
  script: string;
  incident: string;
  cleaner: string;
  violations: string[];
  orphansLeft: number;
  prone: boolean;
};

export async function runScripts(f: SimFunction<World>): Promise<ScriptRow[]> {
  const rows: ScriptRow[] = [];
  for (const s of f.scripts) {
    const tp = await runScript(f.world, (w, c) => f.twopass(w, c, s.policy), s);
    rows.push({
      fn: f.name,
      script: s.name,
      incident: s.incident,
      cleaner: 'twopass',
      violations: tp.violations,
      orphansLeft: s.mustReclaim ? tp.orphansLeft : 0,
      prone: false,
    });
    for (const b of f.baselines) {
      const r = await runScript(f.world, b.make, s);
      rows.push({
        fn: f.name,
        script: s.name,
        incident: s.incident,
        cleaner: b.name,
        violations: r.violations,
        orphansLeft: 0,
        prone: b.prone.includes(s.name),
      });
    }
  }
  return rows;
}

export type RandomSummary = {
  fn: string;
  cleaner: string;
  schedules: number;
  steps: number;
  violations: number;
  firstViolation?: { seed: number; what: string };
  orphans: number;
  reclaimed: number;
  unreclaimed: number;
  firstUnreclaimed?: { seed: number; what: string };
  worstLatencyMin: number;
};

export async function runRandom(
  f: SimFunction<World>,
  cleaner: 'twopass' | number,
  runs: number,
  firstSeed: number,
): Promise<RandomSummary> {
  const sum: RandomSummary = {
    fn: f.name,
    cleaner: cleaner === 'twopass' ? 'twopass' : f.baselines[cleaner]!.name,
    schedules: 0,
    steps: 0,
    violations: 0,
    orphans: 0,
    reclaimed: 0,
    unreclaimed: 0,
    worstLatencyMin: 0,
  };
  for (let seed = firstSeed; seed < firstSeed + runs; seed++) {
    const clock = { now: Date.parse('2026-01-01T00:00:00Z') };
    const w = f.world(() => clock.now, seed);
    const c =
      cleaner === 'twopass' ? f.twopass(w, () => clock.now) : f.baselines[cleaner]!.make(w, () => clock.now);
    const r = await runSchedule(w, c, clock, randomSchedule(seed, f.bounds));
    sum.schedules++;
    sum.steps += r.steps;
    if (r.violations.length) {
      sum.violations += r.violations.length;
      sum.firstViolation ??= { seed, what: r.violations[0]! };
    }
    sum.orphans += r.orphans;
    sum.reclaimed += r.reclaimed;
    if (r.unreclaimed.length) {
      sum.unreclaimed += r.unreclaimed.length;
      sum.firstUnreclaimed ??= { seed, what: r.unreclaimed[0]! };
    }
    sum.worstLatencyMin = Math.max(sum.worstLatencyMin, r.worstLatencyMs / MIN);
  }
  return sum;
}

export function table(rows: RandomSummary[]): string {
  const head =
    '| function | cleaner | schedules | steps | safety violations | orphans | reclaimed | not reclaimed in bound | worst reclaim latency |\n|---|---|---|---|---|---|---|---|---|';
  return `${head}\n${rows.map((r) => `| ${r.fn} | ${r.cleaner} | ${r.schedules} | ${r.steps} | ${r.violations}${r.firstViolation ? ` (seed ${r.firstViolation.seed})` : ''} | ${r.orphans} | ${r.reclaimed} | ${r.unreclaimed}${r.firstUnreclaimed ? ` (seed ${r.firstUnreclaimed.seed})` : ''} | ${r.worstLatencyMin} min |`).join('\n')}`;
}

export function scriptTable(rows: ScriptRow[]): string {
  const head =
    '| function | scenario (incident) | cleaner | safety violations | expected |\n|---|---|---|---|---|';
  return `${head}\n${rows.map((r) => `| ${r.fn} | ${r.script} (${r.incident}) | ${r.cleaner} | ${r.violations.length} | ${r.cleaner === 'twopass' ? '0' : r.prone ? '> 0' : 'any'} |`).join('\n')}`;
}

/** The options of one random schedule: 20 active minutes, a run every 5, faults and interleaving. */
export function randomSchedule(seed: number, boundByKind: Readonly<Record<string, number>>) {
  return {
    seed,
    activeMinutes: 20,
    intervalMinutes: 5,
    eventsPerMinute: 2,
    faultRate: 0.03,
    interleave: 0.3,
    boundByKind,
  };
}
