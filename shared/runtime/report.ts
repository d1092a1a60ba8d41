/**
 * Reports for approval: what a run would delete, with everything a reviewer needs, written
 * by `twopass run <fn> --report FILE` (a dry run) or by a run whose deletions exceed
 * `approval.requiredAbove`. `twopass apply --from-report FILE` then deletes only entries
 * that are still confirmed now, with the same key and fingerprint, after the usual fresh
 * snapshot, re-check and precondition.
 */

import { readFileSync } from 'node:fs';
import { mkdir, rename, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { z } from 'zod';
import type { TwopassFunction } from '../contract/index.ts';
import { firstIssue } from '../contract/settings.ts';
import { formatDuration } from '../engine/duration.ts';
import type { DeleteAction, Snapshot } from '../engine/types.ts';
import { ConfigError } from '../errors.ts';

const entrySchema = z.object({
  key: z.string(),
  kind: z.string(),
  name: z.string(),
  namespace: z.string().optional(),
  fingerprint: z.string(),
  /** Why it counts as unused. */
  unused: z.string(),
  unusedSince: z.string(),
  observations: z.number(),
  /** What approving it does. */
  removal: z.string(),
});

export const reportSchema = z.object({
  twopassReport: z.literal(1),
  function: z.string(),
  /** The API server the report was made against: apply refuses another one. */
  cluster: z.string(),
  createdAt: z.string(),
  runId: z.string(),
  snapshotId: z.string(),
  entries: z.array(entrySchema),
});

export type Report = z.infer<typeof reportSchema>;

export function buildReport(
  fn: Pick<TwopassFunction<unknown, unknown>, 'name' | 'kindReport'>,
  ids: { runId: string; snapshot: Snapshot; cluster: string },
  actions: readonly DeleteAction[],
): Report {
  return {
    twopassReport: 1,
    function: fn.name,
    cluster: ids.cluster,
    createdAt: new Date(ids.snapshot.takenAt).toISOString(),
    runId: ids.runId,
    snapshotId: ids.snapshot.id,
    entries: actions.map(({ target: t, candidate: c }) => {
      const ns = (t.data as { namespace?: unknown } | undefined)?.namespace;
      const about = fn.kindReport[t.kind];
      return {
        key: t.key,
        kind: t.kind,
        name: t.name,
        ...(typeof ns === 'string' ? { namespace: ns } : {}),
        fingerprint: t.fingerprint,
        unused: about?.unused ?? 'no evidence of use',
        unusedSince: new Date(c.firstUnusedAt).toISOString(),
        observations: c.observations,
        removal: about?.removal ?? `remove the ${t.kind}`,
      };
    }),
  };
}

export async function writeReport(path: string, report: Report): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  await writeFile(`${path}.tmp`, `${JSON.stringify(report, null, 1)}\n`, { mode: 0o600 });
  await rename(`${path}.tmp`, path);
}

/** Reads a report file: not JSON, or not of the report's shape, is a usage error. */
export function loadReport(path: string): Report {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new ConfigError(`${path}: not a report: ${(err as Error).message}`);
  }
  const r = reportSchema.safeParse(raw);
  if (!r.success) {
    throw new ConfigError(
      `${path}: not a report (\`twopass run <function> --report FILE\` writes them): ${firstIssue(r.error)}`,
    );
  }
  return r.data;
}

/** Whether `apply` may act on a report of `fn`: its kinds are the function's, and it is not stale. */
export function checkReport(
  path: string,
  report: Report,
  fn: Pick<TwopassFunction<unknown, unknown>, 'name' | 'kindReport'>,
  now: number,
  maxAgeMs: number,
): void {
  const foreign = report.entries.find((e) => !(e.kind in fn.kindReport));
  if (foreign)
    throw new ConfigError(`${path}: an entry of kind ${foreign.kind}, which ${fn.name} does not remove`);
  const age = now - Date.parse(report.createdAt);
  if (!Number.isFinite(age))
    throw new ConfigError(
      `${path}: \`createdAt\`: expected a time like 2026-01-02T03:04:05Z, got \`${report.createdAt}\``,
    );
  // A report dated ahead of this clock is refused like a stale one: its age cannot be known
  // (a clock that was wrong, or an edited file), and a far-future date would never go stale.
  if (age < -REPORT_CLOCK_SKEW_MS)
    throw new ConfigError(
      `${path}: the report is from ${report.createdAt}, ${formatDuration(-age)} ahead of this clock (more than the ${formatDuration(REPORT_CLOCK_SKEW_MS)} of skew allowed): check the clocks, then make a fresh one with \`twopass run ${fn.name} --report FILE\``,
    );
  if (!(age <= maxAgeMs))
    throw new ConfigError(
      `${path}: the report is from ${report.createdAt}, older than approval.maxReportAge (${formatDuration(maxAgeMs)}): make a fresh one with \`twopass run ${fn.name} --report FILE\``,
    );
}

/** How far ahead of this clock a report's `createdAt` may be (clocks of two machines differ a little). */
export const REPORT_CLOCK_SKEW_MS = 5 * 60_000;

/** The readable summary of a report on a terminal. */
export function describeReport(report: Report, path: string): string {
  const lines = [
    `${report.function}: ${report.entries.length} confirmed for deletion, report ${path} (snapshot ${report.snapshotId} at ${report.createdAt})`,
  ];
  for (const e of report.entries)
    lines.push(
      `  ${e.kind} ${e.name} [${e.key}]\n    unused since ${e.unusedSince} (${e.observations} observations): ${e.unused}\n    approving it will: ${e.removal}`,
    );
  lines.push(
    report.entries.length > 0
      ? `Review, then: twopass apply --from-report ${path} (only entries still confirmed then, unchanged, are deleted)`
      : 'Nothing to approve.',
  );
  return `${lines.join('\n')}\n`;
}
