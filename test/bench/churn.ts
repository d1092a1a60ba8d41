/**
 * Liveness under churn (decision 0016): one leaked DANM bit on a network that a writer in the
 * background keeps writing (an address set and cleared, as pods come and go), from every few
 * seconds to without pause, during the runs too. Runs every 4 simulated minutes (the bit's
 * grace is 10: the third run is the first that may reclaim it), paced in real time so that
 * the writer writes between them. For each pace: the run that reclaimed it, the writes, the
 * history replays the runs made, those that could not be read, and the runs held back.
 */
import { MINUTE as MIN } from '../../shared/contract/index.ts';
import { allocated, createNetwork, R } from '../../shared/sandbox/scenarios/danm.ts';
import { backgroundWriter, danmRunner } from '../helpers/danm.ts';
import { intercept } from '../helpers/intercept.ts';
import { fakeTarget, type KubeTarget, realTarget } from '../helpers/kube-target.ts';
import { mdTable } from './common.ts';

const MAX_RUNS = 10;

type Row = (string | number)[];

async function one(t: KubeTarget, pauseMs: number): Promise<Row> {
  const kube = t.client();
  const ns = await t.namespace();
  await createNetwork(kube, ns, 'net', '10.10.10.0/24', ['10.10.10.70']);
  const r = danmRunner(t.options, [ns], Date.now() + MIN);
  let replays = 0;
  r.intercept = (k) =>
    intercept(k, (call, next) => {
      if (call.verb === 'history') replays++;
      return next();
    });
  const began = Date.now();
  const writer = backgroundWriter(kube, ns, 'net', pauseMs, 20);
  let reclaimedAt: number | undefined;
  let broken = 0;
  let held = 0;
  try {
    await r.run();
    for (let run = 1; run <= MAX_RUNS && reclaimedAt === undefined; run++) {
      r.now += 4 * MIN;
      await writer.written(); // written since the last run
      const m = r.mark();
      if ((await r.run()).deleted.length > 0) reclaimedAt = run;
      broken += r.events('bits.history', m).length;
      held += r.events('delete.skipped', m).length > 0 ? 1 : 0;
    }
  } finally {
    await writer.stop();
  }
  const secs = (Date.now() - began) / 1000;
  const gone = !allocated((await kube.get(R.DanmNet, ns, 'net'))!).includes('10.10.10.70');
  await kube.close();
  return [
    t.name,
    pauseMs === 0 ? 'none' : `${pauseMs} ms`,
    (writer.writes / secs).toFixed(1),
    reclaimedAt !== undefined && gone ? reclaimedAt : `not in ${MAX_RUNS}`,
    writer.writes,
    replays,
    broken,
    held,
  ];
}

export async function churnBench(pauses: readonly number[], real: boolean): Promise<string> {
  const rows: Row[] = [];
  for (const make of [fakeTarget, ...(real ? [realTarget] : [])]) {
    const t = await make();
    if (!t) continue;
    try {
      for (const p of pauses) rows.push(await one(t, p));
    } finally {
      await t.close();
    }
  }
  return mdTable(
    'Liveness under churn: a leaked DANM bit on a network written in the background (decision 0016)',
    [
      'API server',
      'pause between writes',
      'network writes / s',
      'reclaimed at run',
      'writes',
      'history replays',
      'replays broken',
      'runs held back',
    ],
    rows,
    `Runs every 4 simulated minutes, the bit's grace 10 minutes: run 3 is the first that may reclaim it. The writer sets and clears another address of the network (two writes, each a GET and a PUT) and pauses; each run waits for two writes since the last. A run is held back when its act phase skipped the bit (its write lost ${5} attempts to the writer, or the history could not speak for it). Before decision 0016 every write restarted the grace: no row would have been reclaimed.`,
  );
}
