/** The rules benchmark: a CEL rule's observation against its hand-written floor, and the CEL evaluation cost per target. */
import { mdTable, measure, median, ms } from './common.ts';

export function rulesBench(sizes = [10_000, 150_000], rounds = 3): string {
  const rows: (string | number)[][] = [];
  for (const n of sizes) {
    const got: Record<string, { ms: number[]; rss: number[]; us: number[]; result: string }> = {};
    // interleaved rounds: each variant in a fresh process, min and median of `rounds`
    for (let r = 0; r < rounds; r++)
      for (const what of ['rule', 'floor', 'cel']) {
        const m = measure('./rules-one.ts', ['--n', String(n), '--what', what]);
        got[what] ??= { ms: [], rss: [], us: [], result: '' };
        const g = got[what];
        g.ms.push(Number(m.ms));
        g.rss.push(Number(m.peakRssMiB));
        if (m.perTargetUs !== undefined) g.us.push(Number(m.perTargetUs));
        g.result = String(m.result);
      }
    const [rule, floor, cel] = [got.rule!, got.floor!, got.cel!];
    rows.push([
      n.toLocaleString('en'),
      `${ms(Math.min(...rule.ms))} / ${ms(median(rule.ms))}`,
      `${ms(Math.min(...floor.ms))} / ${ms(median(floor.ms))}`,
      `${(median(rule.ms) / median(floor.ms)).toFixed(2)}x`,
      `${ms(Math.min(...cel.ms))} (${Math.min(...cel.us).toFixed(2)} µs a target)`,
      `${median(rule.rss)} MiB`,
      `${median(floor.rss)} MiB`,
      `${rule.result} / ${floor.result}`,
    ]);
  }
  return mdTable(
    'Rules: the cilium-endpoints rule (CEL) against its hand-written floor',
    [
      'endpoints (and pods)',
      'rule observe, min / median',
      'floor, min / median',
      'ratio (medians)',
      'CEL evaluation alone, min',
      'peak RSS rule',
      'peak RSS floor',
      'unused (rule / floor)',
    ],
    rows,
    'In-memory lists (no HTTP), 1% of endpoints orphaned. The rule converts each object for CEL, builds the evidence index, evaluates `inUse` and `indeterminate` and builds targets; the floor lists the same objects and does one Set lookup per endpoint. Each cell is a fresh process, rounds interleaved.',
  );
}

if (import.meta.main) console.log(rulesBench());
