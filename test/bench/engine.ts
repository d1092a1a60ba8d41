/** Benchmark 1: decide() against the floor (a Set and a difference) at 10k, 100k, 1M targets. */
import { mdTable, measure, ms } from './common.ts';

export function engineBench(sizes = [10_000, 100_000, 1_000_000]): string {
  const rows: (string | number)[][] = [];
  for (const n of sizes) {
    const d = measure('./engine-one.ts', ['--n', String(n), '--what', 'decide']);
    const f = measure('./engine-one.ts', ['--n', String(n), '--what', 'floor']);
    rows.push([
      n.toLocaleString('en'),
      ms(Number(d.ms)),
      ms(Number(f.ms)),
      `${(Number(d.ms) / Number(f.ms)).toFixed(2)}x`,
      `${d.peakRssMiB} MiB`,
      `${f.peakRssMiB} MiB`,
      String(d.result),
    ]);
  }
  return mdTable(
    'Engine: decide() vs the floor (1% candidates, confirmed)',
    [
      'targets',
      'decide()',
      'floor (Set + difference)',
      'ratio',
      'peak RSS decide',
      'peak RSS floor',
      'confirmed',
    ],
    rows,
    'Each cell is a fresh process; peak RSS includes building the snapshot. Goal: within 2x of the floor at 1M.',
  );
}

if (import.meta.main) console.log(engineBench());
