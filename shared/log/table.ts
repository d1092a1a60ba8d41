/** Renders one diff-log JSON line as a row of a readable table. */
import { formatDuration } from '../engine/duration.ts';

/** Wide enough for the longest event and kind names (IPPoolAllocationNotListed); names vary, keys follow. */
const WIDTH = { event: 21, kind: 25, name: 40 };

/** Pads to the column; a longer value is printed whole (the row shifts, nothing is hidden). */
function pad(s: string, n: number): string {
  return s.length >= n ? s : s + ' '.repeat(n - s.length);
}

/** The table's first line. */
export const HEADER = `${pad('TIME', 8)}  ${pad('EVENT', WIDTH.event)} ${pad('KIND', WIDTH.kind)} ${pad('NAME', WIDTH.name)} DETAIL [KEY]`;

function detail(e: Record<string, unknown>): string {
  switch (e.event) {
    case 'snapshot.taken': {
      const sources = (e.sources as { name: string; count: number; pages?: number }[] | undefined) ?? [];
      return `${sources.map((s) => `${s.name}=${s.count}`).join(' ')} in ${formatDuration(Number(e.durationMs ?? 0))}`;
    }
    case 'candidate.new':
      return 'first unused observation';
    case 'candidate.pending':
      return `seen unused ${e.observations}x, ${formatDuration(Number(e.timeLeftMs))} left (${e.waitingFor})`;
    case 'candidate.rescued':
      return `in use again after ${formatDuration(Number(e.unusedForMs))} unused`;
    case 'candidate.reset':
    case 'target.indeterminate':
    case 'target.malformed':
    case 'network.unreadable':
    case 'networks.not-served':
    case 'run.refused':
    case 'run.aborted':
      return String(e.reason ?? '');
    case 'candidate.confirmed':
      return `unused for ${formatDuration(Number(e.unusedForMs))} over ${e.observations} observations${e.dryRun ? ' (dry run: would delete)' : ''}`;
    case 'resource.gone':
      return `not deleted by twopass: ${String(e.detail ?? 'already gone')}${typeof e.partOf === 'string' ? ` (part of ${e.partOf})` : ''}`;
    case 'resource.deleted':
      return `${String(e.detail ?? 'deleted, confirmed by a read')}${typeof e.partOf === 'string' ? ` (part of ${e.partOf})` : ''}`;
    case 'act.summary':
      return `confirmed=${e.actions} units=${e.units} shared-evidence-reads=${e.evidenceReads}`;
    case 'delete.failed':
      return String(e.error ?? '');
    case 'delete.skipped':
      return `${String(e.reason ?? '')}${typeof e.partOf === 'string' ? ` (part of ${e.partOf})` : ''}`;
    case 'run.finished': {
      const s = (e.summary as Record<string, number> | undefined) ?? {};
      return `targets=${s.targets ?? 0} used=${s.used ?? 0} pending=${s.pending ?? 0} new=${s.newCandidates ?? 0} rescued=${s.rescued ?? 0} indeterminate=${s.indeterminate ?? 0} deleted=${e.deleted ?? 0}${e.held ? ` held=${e.held}` : ''} exit=${e.exitCode}${e.dryRun ? ' (dry run)' : ''}`;
    }
    case 'report.written':
      return `${e.entries} entries -> ${String(e.path)} (${String(e.why ?? '')})`;
    case 'snapshot.saved':
      return `-> ${String(e.path)}`;
    default:
      // Every other event says why in one of these (approval.*, notify.failed,
      // metrics.push-failed, state.*): the table shows what JSON shows.
      for (const f of ['reason', 'error', 'detail'] as const)
        if (typeof e[f] === 'string' && e[f] !== '') return e[f] as string;
      return typeof e.msg === 'string' && e.msg !== e.event ? e.msg : '';
  }
}

/** One event (its structured values) as a row of the table. */
export function renderEvent(e: Readonly<Record<string, unknown>>): string {
  const time = typeof e.time === 'string' ? e.time.slice(11, 19) : '';
  const event = typeof e.event === 'string' ? e.event : String(e.msg ?? '');
  const kind =
    typeof e.kind === 'string' ? e.kind : typeof e.function === 'string' && !e.name ? e.function : '';
  const name = typeof e.name === 'string' ? e.name : '';
  // A display name is not an identity (a re-created pod's old and new DanmEp share it):
  // rows about one target carry its key.
  const key = typeof e.key === 'string' && e.key !== name ? ` [${e.key}]` : '';
  return `${pad(time, 8)}  ${pad(event, WIDTH.event)} ${pad(kind, WIDTH.kind)} ${pad(name, WIDTH.name)} ${detail(e)}${key}`.trimEnd();
}
