/** The faults every fault matrix injects into every call of a run. */
import type { Fault } from '../../shared/sandbox/kube/faults.ts';

export type MatrixFault = {
  name: string;
  fault: Omit<Fault, 'path' | 'method' | 'nth'>;
  pagedOnly?: boolean;
};

export const FAULTS: readonly MatrixFault[] = [
  { name: '500', fault: { status: 500 } },
  { name: '503', fault: { status: 503 } },
  { name: '429+RA', fault: { status: 429, retryAfterSeconds: 1 } },
  { name: 'timeout', fault: { delayMs: 700 } },
  { name: 'reset', fault: { reset: true } },
  { name: 'truncated', fault: { truncate: true } },
  { name: '403', fault: { status: 403 } },
  { name: '410', fault: { expireContinue: true }, pagedOnly: true },
  { name: 'empty page', fault: { emptyPage: true }, pagedOnly: true },
];

/** The cells of a printed matrix (`| call | a | b |` rows), by call and fault name. */
function cellsOf(table: string): Map<string, string> {
  const rows = table
    .trim()
    .split('\n')
    .map((l) =>
      l
        .trim()
        .replace(/^\||\|$/g, '')
        .split('|')
        .map((c) => c.trim()),
    );
  const faults = rows[0]!.slice(1);
  const out = new Map<string, string>();
  for (const row of rows.slice(1)) {
    if (row.every((c) => /^-*$/.test(c))) continue;
    for (const [i, f] of faults.entries()) out.set(`${row[0]} x ${f}`, row[i + 1] ?? '(missing)');
  }
  return out;
}

/**
 * Each cell of a matrix as run against the table it is expected to print: a cell that moves
 * (from "ok" to "abort", from "delete failed" to "deleted, unconfirmed") is a change of
 * behaviour to look at, never a silent pass. Returns the differing cells, one line each.
 */
export function tableDiff(actual: string, expected: string): string[] {
  const a = cellsOf(actual);
  const e = cellsOf(expected);
  const out: string[] = [];
  for (const [k, v] of e)
    if (a.get(k) !== v) out.push(`${k}: expected "${v}", got "${a.get(k) ?? '(no such cell)'}"`);
  for (const k of a.keys()) if (!e.has(k)) out.push(`${k}: not in the expected table (got "${a.get(k)}")`);
  return out;
}
