/**
 * decide(): the two-observation rule (safety laws 3, 4, 5 and 7). Pure: no I/O,
 * no clock, no mutation of its inputs; the same inputs give the same output.
 */

import { formatDuration } from './duration.ts';
import {
  type Candidate,
  type Decision,
  type DeleteAction,
  type DiffEvent,
  type DiffSummary,
  type EvidenceDrop,
  isComplete,
  type LastSnapshot,
  type Policy,
  type RefusalGuard,
  type Snapshot,
  STATE_SCHEMA_VERSION,
  type State,
  type Target,
} from './types.ts';

const EMPTY_SUMMARY = {
  targets: 0,
  used: 0,
  kept: 0,
  indeterminate: 0,
  newCandidates: 0,
  pending: 0,
  rescued: 0,
  reset: 0,
  confirmed: 0,
};

export function graceFor(policy: Policy, kind: string): number {
  return policy.kindGraceMs?.[kind] ?? policy.graceMs;
}

function abort(previous: State, snapshot: Snapshot, reason: string): Decision {
  return {
    actions: [],
    nextState: previous,
    diff: {
      events: [{ event: 'run.aborted', reason }],
      summary: { ...EMPTY_SUMMARY, targets: targetCount(snapshot) },
      outcome: 'aborted',
    },
  };
}

/** Every target the snapshot saw: those it holds and those it only counted. */
export function targetCount(snapshot: Snapshot): number {
  return snapshot.targets.length + (snapshot.counted ?? 0);
}

function incompleteReason(snapshot: Snapshot): string {
  if (snapshot.sources.length === 0) return 'snapshot has no sources, so it cannot be proven complete';
  const bad = snapshot.sources.filter((s) => !s.complete);
  return `snapshot incomplete: ${bad.map((s) => `${s.name}: ${s.reason ?? 'incomplete'}`).join('; ')}`;
}

export type DecideOptions = Readonly<{
  /** The operator accepts the current evidence counts as the new baseline (`state accept-evidence`). */
  acceptEvidence?: boolean;
}>;

/** The evidence guard: each sharp drop of an evidence count refuses the run (a reason), unless accepted; the drop still pending, if any. */
function evidenceVerdict(
  previous: State,
  lastSnapshot: NonNullable<State['lastSnapshot']>,
  policy: Policy,
  now: number,
  options: DecideOptions,
  events: DiffEvent[],
): { reasons: string[]; pending: EvidenceDrop | undefined } {
  const drops = evidenceDrops(previous.lastSnapshot, lastSnapshot, policy);
  const reasons: string[] = [];
  let pending: EvidenceDrop | undefined;
  if (drops.length > 0) {
    const counts = Object.fromEntries(drops.map((d) => [d.name, { was: d.was, now: d.now }]));
    const what = drops.map((d) => `${d.name} ${d.was} -> ${d.now}`).join(', ');
    if (options.acceptEvidence) {
      events.push({
        event: 'evidence.accepted',
        how: 'command',
        counts,
        reason: `accepted by command: ${what}`,
      });
    } else {
      pending = nextEvidenceDrop(previous.evidenceDrop, drops, now, policy);
      const heldMs = now - pending.firstSeenAt;
      const toZero = drops.some((d) => d.now === 0);
      const after = policy.acceptEvidenceDropAfterMs;
      if (after !== undefined && !toZero && pending.snapshots >= 2 && heldMs >= after) {
        events.push({
          event: 'evidence.accepted',
          how: 'automatic',
          counts,
          reason: `${what} held in ${pending.snapshots} consecutive complete snapshots over ${formatDuration(heldMs)} (acceptEvidenceDropAfter ${formatDuration(after)})`,
        });
        pending = undefined;
      } else {
        const need = Math.ceil(Math.max(...drops.map((d) => d.percent)));
        const auto =
          after === undefined
            ? 'automatic acceptance is off (acceptEvidenceDropAfter)'
            : toZero
              ? 'a drop to zero is never accepted on its own'
              : `it is accepted on its own once held for ${formatDuration(after)} in consecutive complete snapshots (held ${formatDuration(heldMs)}, ${pending.snapshots} snapshot${pending.snapshots === 1 ? '' : 's'} so far)`;
        reasons.push(
          `${drops.map((d) => `evidence ${d.name} shrank from ${d.was} to ${d.now} (${d.percent.toFixed(1)}% > maxEvidenceDropPercent ${policy.maxEvidenceDropPercent}%)`).join('; ')}. ` +
            `If the drop is real, accept the current counts with \`twopass state accept-evidence ${previous.function}\` (the candidates are kept), or raise maxEvidenceDropPercent to at least ${need}; ${auto}`,
        );
      }
    }
  }
  return { reasons, pending };
}

/**
 * The keys in use that name a target of the snapshot: the only keys decide() asks about.
 * After 0017 a run holds ~1% of 300,000 targets and lists the keys of the rest as used;
 * copying all of them into a Set took a tenth of a second and 10 MiB.
 */
function usedTargetKeys(snapshot: Snapshot): Set<string> {
  if (snapshot.targets.length >= snapshot.used.length) return new Set(snapshot.used);
  const held = new Set<string>();
  for (const t of snapshot.targets) held.add(t.key);
  const used = new Set<string>();
  for (const k of snapshot.used) if (held.has(k)) used.add(k);
  return used;
}

/** The summary's counts, as decide() adds to them. */
type Counts = { -readonly [K in keyof DiffSummary]: DiffSummary[K] };

/** A target kept, undecided or in use: counted and said (and its candidate reset or rescued); true when it is one of those. */
function settledAsNotUnused(
  t: Target,
  prev: Candidate | undefined,
  base: { key: string; kind: string; name: string },
  used: ReadonlySet<string>,
  indeterminate: ReadonlyMap<string, string>,
  blocker: string | undefined,
  now: number,
  summary: Counts,
  events: DiffEvent[],
): boolean {
  if (t.keep) {
    summary.kept++;
    if (prev) {
      summary.reset++;
      events.push({ event: 'candidate.reset', ...base, reason: 'keep-mark set' });
    }
    return true;
  }
  const why = indeterminate.get(t.key) ?? blocker;
  if (why !== undefined) {
    summary.indeterminate++;
    events.push({ event: 'target.indeterminate', ...base, reason: why });
    if (prev) {
      summary.reset++;
      events.push({ event: 'candidate.reset', ...base, reason: `indeterminate: ${why}` });
    }
    return true;
  }
  if (used.has(t.key)) {
    summary.used++;
    if (prev) {
      summary.rescued++;
      events.push({
        event: 'candidate.rescued',
        ...base,
        unusedForMs: Math.max(0, now - prev.firstUnusedAt),
      });
    }
    return true;
  }
  return false;
}

/** The stored candidates this snapshot does not list: reset (the target vanished). */
function resetVanished(
  prevCandidates: State['candidates'],
  seen: ReadonlySet<string>,
  summary: Counts,
  events: DiffEvent[],
): void {
  for (const key of Object.keys(prevCandidates).sort()) {
    if (!seen.has(key)) {
      const c = prevCandidates[key]!;
      summary.reset++;
      events.push({ event: 'candidate.reset', key, kind: c.kind, name: c.name, reason: 'target vanished' });
    }
  }
}

/** The state a refused run keeps: as it was, but for the lower evidence counts still pending acceptance. */
function refusedState(previous: State, pending: EvidenceDrop | undefined): State {
  const { evidenceDrop: _old, ...rest } = previous;
  const held: State = pending ? { ...rest, evidenceDrop: pending } : previous.evidenceDrop ? rest : previous;
  return held;
}

/** A candidate seen unused again, unchanged: its next record, how long it has been unused, and what it still waits for. */
function observedAgain(t: Target, prev: Candidate, now: number, policy: Policy) {
  const next: Candidate = {
    kind: t.kind,
    name: t.name,
    fingerprint: t.fingerprint,
    firstUnusedAt: prev.firstUnusedAt,
    lastUnusedAt: now,
    observations: prev.observations + 1,
    ...(t.note !== undefined ? { note: t.note } : {}),
  };
  const unusedFor = now - next.firstUnusedAt;
  const grace = graceFor(policy, t.kind);
  // Age: from createdAt when known; otherwise the target has existed at least since firstUnusedAt.
  const age = t.createdAt !== undefined ? now - t.createdAt : unusedFor;
  const graceLeft = grace - unusedFor;
  const ageLeft = (policy.minAgeMs ?? grace) - age;
  return { next, unusedFor, graceLeft, ageLeft };
}

/** An incomplete snapshot, or another function's state: nothing is decided (the run aborts). */
function cannotDecide(previous: State, snapshot: Snapshot): Decision | undefined {
  if (!isComplete(snapshot)) return abort(previous, snapshot, incompleteReason(snapshot));
  if (previous.function !== snapshot.function) {
    return abort(
      previous,
      snapshot,
      `state belongs to ${previous.function}, snapshot to ${snapshot.function}`,
    );
  }
  return undefined;
}

export function decide(
  previous: State,
  snapshot: Snapshot,
  policy: Policy,
  now: number,
  options: DecideOptions = {},
): Decision {
  const unfit = cannotDecide(previous, snapshot);
  if (unfit) return unfit;
  const events: DiffEvent[] = [];
  // Time that goes backwards confirms nothing: observation restarts from now.
  const last = previous.lastSnapshot;
  const clockWentBack = last !== undefined && now < last.takenAt;
  const prevCandidates = previous.candidates;
  const used = usedTargetKeys(snapshot);
  const indeterminate = new Map<string, string>();
  for (const i of snapshot.indeterminate) if (!indeterminate.has(i.key)) indeterminate.set(i.key, i.reason);
  const blocker =
    snapshot.blockers && snapshot.blockers.length > 0 ? snapshot.blockers.join('; ') : undefined;

  const candidates: Record<string, Candidate> = {};
  const confirmed: DeleteAction[] = [];
  const summary = { ...EMPTY_SUMMARY, targets: targetCount(snapshot) };
  const seen = new Set<string>();
  // Counted targets are in use; under a snapshot-wide blocker every target is undecided, and
  // these are counted so (without an event each: none of them could have become a candidate).
  if (blocker === undefined) summary.used += snapshot.counted ?? 0;
  else summary.indeterminate += snapshot.counted ?? 0;

  for (const t of snapshot.targets) {
    const prev = Object.hasOwn(prevCandidates, t.key) ? prevCandidates[t.key] : undefined;
    // The common case first (in use, nothing stored): no state, no event, nothing to remember.
    if (
      prev === undefined &&
      !t.keep &&
      blocker === undefined &&
      used.has(t.key) &&
      !indeterminate.has(t.key)
    ) {
      summary.used++;
      continue;
    }
    if (seen.has(t.key)) continue; // a duplicate key in one snapshot counts once
    seen.add(t.key);
    const base = { key: t.key, kind: t.kind, name: t.name };
    if (settledAsNotUnused(t, prev, base, used, indeterminate, blocker, now, summary, events)) continue;
    // Unused in this complete snapshot.
    const backwards = prev !== undefined && (clockWentBack || now < prev.lastUnusedAt);
    if (!prev || backwards || prev.fingerprint !== t.fingerprint || prev.kind !== t.kind) {
      if (prev) {
        summary.reset++;
        const reason = backwards ? 'clock went backwards: observation restarts' : 'fingerprint changed';
        events.push({ event: 'candidate.reset', ...base, reason });
      }
      summary.newCandidates++;
      candidates[t.key] = firstObservation(t, now);
      events.push({ event: 'candidate.new', ...base });
      continue;
    }
    const { next, unusedFor, graceLeft, ageLeft } = observedAgain(t, prev, now, policy);
    if (graceLeft <= 0 && ageLeft <= 0) {
      summary.confirmed++;
      candidates[t.key] = next;
      confirmed.push({ type: 'delete', target: t, candidate: next });
      events.push({
        event: 'candidate.confirmed',
        ...base,
        unusedForMs: unusedFor,
        observations: next.observations,
      });
    } else {
      summary.pending++;
      candidates[t.key] = next;
      events.push({
        event: 'candidate.pending',
        ...base,
        observations: next.observations,
        timeLeftMs: Math.max(graceLeft, ageLeft),
        waitingFor: graceLeft >= ageLeft ? 'grace window' : 'minimum age',
      });
    }
  }
  resetVanished(prevCandidates, seen, summary, events);
  confirmed.sort((a, b) => (a.target.key < b.target.key ? -1 : a.target.key > b.target.key ? 1 : 0));

  const lastSnapshot = carryBaseline(previous.lastSnapshot, summarize(snapshot));
  // Law 7, evidence: a sharp drop refuses, unless accepted (by the operator, or on its own
  // once the lower counts held in consecutive complete snapshots for long enough).
  const { reasons, pending } = evidenceVerdict(previous, lastSnapshot, policy, now, options, events);
  const guards: RefusalGuard[] = reasons.length > 0 ? ['evidence-drop'] : [];
  const deletionRefusal = deletionGuards(confirmed.length, summary.targets, policy);
  for (const [guard, why] of deletionRefusal) {
    guards.push(guard);
    reasons.push(why);
  }
  if (reasons.length > 0) {
    // The state is not advanced: a broken lister must not become the new baseline. Only the
    // lower counts are remembered, so that a real drop can be accepted once it held.
    events.push({ event: 'run.refused', reason: reasons.join('; '), guards });
    const held = refusedState(previous, pending);
    return { actions: [], nextState: held, diff: { events, summary, outcome: 'refused' } };
  }
  const nextState: State = {
    schemaVersion: STATE_SCHEMA_VERSION,
    function: previous.function,
    lastSnapshot,
    candidates,
  };
  return { actions: confirmed, nextState, diff: { events, summary, outcome: 'ok' } };
}

type Drop = { name: string; was: number; now: number; percent: number };

/** Evidence sources that shrank by more than maxEvidenceDropPercent since the baseline. */
export function evidenceDrops(before: LastSnapshot | undefined, now: LastSnapshot, policy: Policy): Drop[] {
  const out: Drop[] = [];
  if (before === undefined) return out;
  // Per evidence source: one lister that broke must not hide behind the others.
  for (const [name, count] of Object.entries(now.counts)) {
    if (!Object.hasOwn(now.evidence ?? {}, name)) continue;
    const was = before.counts[name];
    if (was === undefined || was === 0) continue;
    const percent = ((was - count) / was) * 100;
    if (percent > policy.maxEvidenceDropPercent) out.push({ name, was, now: count, percent });
  }
  return out;
}

/** The drop continues when every source stays within maxEvidenceDropPercent of the counts first seen low. */
function nextEvidenceDrop(
  prev: EvidenceDrop | undefined,
  drops: Drop[],
  now: number,
  policy: Policy,
): EvidenceDrop {
  const counts = Object.fromEntries(drops.map((d) => [d.name, d.now]));
  const same =
    prev !== undefined &&
    now >= prev.lastSeenAt &&
    Object.keys(prev.counts).length === drops.length &&
    drops.every((d) => {
      const p = prev.counts[d.name];
      if (p === undefined) return false;
      if (p === 0) return d.now === 0;
      return (Math.abs(d.now - p) / p) * 100 <= policy.maxEvidenceDropPercent;
    });
  return same
    ? { ...prev!, lastSeenAt: now, snapshots: prev!.snapshots + 1 }
    : { firstSeenAt: now, lastSeenAt: now, counts, snapshots: 1 };
}

/** Law 7, deletions: a count and a percentage limit; every refusal says which limit to raise and to what. */
export function deletionGuard(confirmed: number, targets: number, policy: Policy): string | undefined {
  const refused = deletionGuards(confirmed, targets, policy);
  return refused.length > 0 ? refused.map(([, why]) => why).join('; ') : undefined;
}

/** The deletion guards that refuse `confirmed` deletions of `targets`, each with its reason. */
function deletionGuards(confirmed: number, targets: number, policy: Policy): [RefusalGuard, string][] {
  const out: [RefusalGuard, string][] = [];
  if (confirmed === 0) return out;
  if (confirmed > policy.maxDeletions)
    out.push([
      'max-deletions',
      `${confirmed} confirmed deletions exceed maxDeletions ${policy.maxDeletions}: if they are expected, raise maxDeletions to at least ${confirmed}`,
    ]);
  const floor = policy.minDeletionsForPercent ?? 0;
  const percent = targets === 0 ? 100 : (confirmed / targets) * 100;
  if (confirmed > floor && percent > policy.maxDeletionPercent)
    out.push([
      'max-deletion-percent',
      `${confirmed} of ${targets} targets (${percent.toFixed(1)}%) exceed maxDeletionPercent ${policy.maxDeletionPercent}%${floor > 0 ? ` (applied above ${floor} deletions)` : ''}: if they are expected, raise maxDeletionPercent to at least ${Math.ceil(percent)}`,
    ]);
  return out;
}

function firstObservation(t: Target, now: number): Candidate {
  return {
    kind: t.kind,
    name: t.name,
    fingerprint: t.fingerprint,
    firstUnusedAt: now,
    lastUnusedAt: now,
    observations: 1,
    ...(t.note !== undefined ? { note: t.note } : {}),
  };
}

/**
 * The baseline is never lost because one run did not list a source: an evidence source of the
 * previous baseline that this snapshot lacks keeps its count (so that the next run that lists
 * it again, broken, is still held to it).
 */
function carryBaseline(before: LastSnapshot | undefined, now: LastSnapshot): LastSnapshot {
  if (!before?.evidence) return now;
  const missing = Object.keys(before.evidence).filter(
    (n) => !Object.hasOwn(now.counts, n) && before.counts[n] !== undefined,
  );
  if (missing.length === 0) return now;
  const counts = { ...now.counts };
  const evidence = { ...now.evidence };
  for (const n of missing) {
    counts[n] = before.counts[n]!;
    evidence[n] = true;
  }
  return { ...now, counts, evidence };
}

export function summarize(snapshot: Snapshot): LastSnapshot {
  const counts: Record<string, number> = {};
  const evidence: Record<string, true> = {};
  for (const s of snapshot.sources) {
    counts[s.name] = s.count;
    // Only pure evidence is guarded: a source that also lists targets shrinks when twopass works.
    if (s.role === 'evidence') evidence[s.name] = true;
  }
  return {
    id: snapshot.id,
    takenAt: snapshot.takenAt,
    counts,
    evidence,
  };
}
