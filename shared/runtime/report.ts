/**
 * Reports for approval: what a run would delete, with everything a reviewer needs, written
 * by `twopass run <fn> --report FILE` (a dry run) or by a run whose deletions exceed
 * `approval.requiredAbove`. `twopass apply --from-report FILE` then deletes only entries
 * that are still confirmed now, with the same key and fingerprint, after the usual fresh
 * snapshot, re-check and precondition.
 */

import { readFileSync } from 'node:fs';
import { rename, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { z } from 'zod';
import type { TwopassFunction } from '../contract/index.ts';
import { formatDuration } from '../engine/duration.ts';
import type { DeleteAction, Snapshot } from '../engine/types.ts';
import { ConfigError, issuesText } from '../errors.ts';
import { ensureDir } from '../paths.ts';

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
  /**
   * The UID of the cluster's `kube-system` namespace: what tells one cluster from another
   * where the URL does not (every in-cluster run knows its API server as the `kubernetes`
   * Service's address). Apply refuses a report of another cluster.
   */
  clusterUid: z.string().min(1),
  createdAt: z.string(),
  runId: z.string(),
  snapshotId: z.string(),
  /**
   * `review`: made for a human to approve (a dry run, or a run held for approval); `record`:
   * what a deleting run set out to delete, written before it did (never approved from).
   */
  purpose: z.enum(['review', 'record']).default('review'),
  entries: z.array(entrySchema),
});

export type Report = z.infer<typeof reportSchema>;

export function buildReport(
  fn: Pick<TwopassFunction<unknown, unknown>, 'name' | 'kindReport'>,
  ids: { runId: string; snapshot: Snapshot; cluster: string; clusterUid?: string },
  actions: readonly DeleteAction[],
  purpose: Report['purpose'] = 'review',
): Report {
  return {
    twopassReport: 1,
    function: fn.name,
    cluster: ids.cluster,
    clusterUid: ids.clusterUid ?? 'unknown',
    createdAt: new Date(ids.snapshot.takenAt).toISOString(),
    runId: ids.runId,
    snapshotId: ids.snapshot.id,
    purpose,
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
  ensureDir(dirname(path));
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
      `${path}: not a report (\`twopass run <function> --report FILE\` writes them): ${issuesText(r.error, { first: true })}`,
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
  if (report.purpose === 'record')
    throw new ConfigError(
      `${path}: the record of what run ${report.runId} set out to delete (\`run --apply --report\`: it deleted them), not a report for review: make one with \`twopass run ${fn.name} --report FILE\` (a dry run)`,
    );
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
    report.purpose === 'record'
      ? 'A record of what this run set out to delete (it deleted them, as its diff log says): not a report for review.'
      : report.entries.length > 0
        ? `Review, then: twopass apply --from-report ${path} (only entries still confirmed then, unchanged, are deleted)`
        : 'Nothing to approve.',
  );
  return `${lines.join('\n')}\n`;
}

/** Why an entry of the first report was left out of the agreed one. */
export type Disagreement = Readonly<{ key: string; name: string; reason: string }>;

/**
 * Reports agreed across time (calicoctl's "reports separated by an hour"): one function, one
 * cluster, the oldest and the newest at least `apartMs` apart; an entry is kept only when
 * every report has it with the same fingerprint. The result is the newest report with the
 * agreed entries; what was left out, and why, is returned beside it.
 */
export function agreeReports(
  reports: readonly { path: string; report: Report }[],
  apartMs: number,
): { report: Report; left: Disagreement[] } {
  const sorted = [...reports].sort((a, b) => Date.parse(a.report.createdAt) - Date.parse(b.report.createdAt));
  const first = sorted[0]!;
  const last = sorted.at(-1)!;
  for (const r of sorted) {
    if (r.report.function !== first.report.function)
      throw new ConfigError(
        `${r.path}: a report of ${r.report.function}, ${first.path} is of ${first.report.function}`,
      );
    if (r.report.cluster !== first.report.cluster || r.report.clusterUid !== first.report.clusterUid)
      throw new ConfigError(
        `${r.path}: a report of the cluster at ${r.report.cluster} (kube-system ${r.report.clusterUid}), ${first.path} is of ${first.report.cluster} (kube-system ${first.report.clusterUid})`,
      );
  }
  const span = Date.parse(last.report.createdAt) - Date.parse(first.report.createdAt);
  if (span < apartMs)
    throw new ConfigError(
      `the reports span ${formatDuration(span)} (${first.report.createdAt} to ${last.report.createdAt}), less than the ${formatDuration(apartMs)} they must be apart (--apart): take the next one later`,
    );
  const left: Disagreement[] = [];
  const agreed = last.report.entries.filter((e) => {
    for (const r of sorted) {
      const mine = r.report.entries.find((x) => x.key === e.key);
      const why = !mine
        ? `not in ${r.path} (${r.report.createdAt})`
        : mine.fingerprint !== e.fingerprint
          ? `its fingerprint differs in ${r.path} (${r.report.createdAt}): it changed between the reports`
          : undefined;
      if (why) {
        left.push({ key: e.key, name: e.name, reason: why });
        return false;
      }
    }
    return true;
  });
  for (const r of sorted.slice(0, -1))
    for (const e of r.report.entries)
      if (!last.report.entries.some((x) => x.key === e.key))
        left.push({ key: e.key, name: e.name, reason: `not in the newest report ${last.path}` });
  const seen = new Set<string>();
  return {
    report: { ...last.report, entries: agreed },
    left: left.filter((l) => !seen.has(l.key) && seen.add(l.key)),
  };
}
