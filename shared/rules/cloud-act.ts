/**
 * What a cloud rule does to a confirmed target: a re-check on a fresh read and fresh
 * evidence (still there, unchanged, still the cluster's, not keep-marked, still unused; for a
 * security group, every port it is still on one it may be taken off), then the delete with
 * `If-Match: revision_number=N` where the service offers it, a security group first taken off
 * its ports (each write on the port's revision).
 */
import { freshEvidence, keepMarked, type RunContext } from '../contract/index.ts';
import { toCel } from './cel.ts';
import { type CloudReader, type CloudWriter, onePortAtATime, targetOf } from './cloud-collections.ts';
import { type Data, fingerprintOf, marksOf, ownedBy, readAll, versionOf } from './cloud-observe.ts';
import type { CloudRule } from './cloud-rule.ts';
import type { Settings } from './cloud-settings.ts';
import type { EvidenceRead } from './evidence.ts';
import { judge } from './function.ts';

type RecheckResult = { ok: false; reason: string } | { ok: true; before: unknown };
type RemoveResult =
  | { outcome: 'skipped'; reason: string }
  | { outcome: 'gone'; detail: string }
  | { outcome: 'deleted'; detail: string };

/** The run's fresh evidence lists (shared by its re-checks, read again when older than the bound). */
const freshLists = (rule: CloudRule, r: CloudReader, ctx: RunContext<Settings>) =>
  freshEvidence(ctx, `rule:${rule.name}`, () => readAll(rule, r, ctx.settings, ctx.signal));

/**
 * The ports still in security group `id` (from the rule's `release.evidence`), when
 * `release.when` allows taking it off every one of them; else why not.
 */
export const releasable = (
  rule: CloudRule,
  indexes: EvidenceRead['indexes'],
  id: string,
): { ports: { id: string; security_groups: string[]; revision_number: number }[] } | { refused: string } => {
  const r = rule.release!;
  const ports: { id: string; security_groups: string[]; revision_number: number }[] = [];
  for (const p of (indexes[r.evidence]?.get(id) ?? []) as Record<string, unknown>[]) {
    const ok = r.when.evaluate({ object: p, evidence: indexes });
    if (!ok.ok || ok.value !== true)
      return {
        refused: `port ${String(p.id)} is in the group and is not one it may be taken off (release.when${ok.ok ? '' : `: ${ok.error}`})`,
      };
    const groups = p.security_groups;
    const revision = typeof p.revision_number === 'bigint' ? Number(p.revision_number) : p.revision_number;
    if (typeof p.id !== 'string' || !Array.isArray(groups) || typeof revision !== 'number')
      return { refused: `port ${String(p.id)}: its security groups or revision cannot be read` };
    ports.push({ id: p.id, security_groups: groups.map(String), revision_number: revision });
  }
  return { ports };
};

export async function recheck(
  rule: CloudRule,
  r: CloudReader,
  { key, data: d }: { key: string; data: Data },
  ctx: RunContext<Settings>,
): Promise<RecheckResult> {
  const kind = rule.kind;
  const target = targetOf(rule.collection);
  const o = await target.get(r, d.id, ctx.signal);
  if (!o) return { ok: false, reason: `${kind} is already gone` };
  const now = versionOf(o);
  if (now?.revision !== d.revision || now?.version !== d.version)
    return {
      ok: false,
      reason: `${kind} changed (${d.version ?? `revision ${d.revision}`} -> ${now?.version ?? (now ? `revision ${now.revision}` : 'none')})`,
    };
  const object = ownedBy(rule, o, ctx.settings);
  if (!object) return { ok: false, reason: `${kind} is no longer the cluster's (${rule.owner.describe})` };
  if (keepMarked(marksOf(o))) return { ok: false, reason: `${kind} carries the keep-mark` };
  const fp = fingerprintOf(rule, o, object);
  if (typeof fp !== 'string' || o.id !== key) return { ok: false, reason: `${kind}'s identity changed` };
  const ev = (await freshLists(rule, r, ctx)).value;
  if (ev.blockers.length > 0) return { ok: false, reason: `fresh evidence: ${ev.blockers.join('; ')}` };
  const verdict = judge(rule, object, ev.indexes);
  if ('used' in verdict) return { ok: false, reason: 'fresh evidence shows it in use' };
  if ('indeterminate' in verdict) return { ok: false, reason: `fresh evidence: ${verdict.indeterminate}` };
  if (rule.release) {
    // the ports it is taken off before its delete, as they were: the tombstone holds them
    const ports = releasable(rule, ev.indexes, d.id);
    if ('refused' in ports) return { ok: false, reason: ports.refused };
    return { ok: true, before: { ...o, released_from: ports.ports } };
  }
  // what goes with it (a load balancer's cascade): the tombstone holds it whole
  return { ok: true, before: target.tree ? { ...o, ...(await target.tree(r, o, ctx.signal)) } : o };
}

export async function remove(
  rule: CloudRule,
  w: CloudWriter,
  { data: d }: { data: Data },
  ctx: RunContext<Settings>,
): Promise<RemoveResult> {
  const kind = rule.kind;
  const target = targetOf(rule.collection);
  if (rule.release) {
    // Off its ports first, each write conditional on the port's revision; the evidence is
    // the run's fresh read (the re-check's, while young enough), read again if older.
    const ev = (await freshLists(rule, { kube: w.kube, neutron: w.neutron } as CloudReader, ctx)).value;
    if (ev.blockers.length > 0)
      return { outcome: 'skipped', reason: `fresh evidence: ${ev.blockers.join('; ')}` };
    const ports = releasable(rule, ev.indexes, d.id);
    if ('refused' in ports) return { outcome: 'skipped', reason: ports.refused };
    // One port, in its queue: read as it is now (a write of this run may have changed it,
    // and the list sent must name only groups that still exist), judged again, and written
    // without the group on the revision just read. A 412, or a group of the list deleted
    // meanwhile, reads it once more; a second leaves it. The reason it stays, or undefined
    // when the group is off it.
    const release = rule.release;
    const releasePort = async (id: string): Promise<string | undefined> => {
      for (let attempt = 1; ; attempt++) {
        const now = await w.neutron.getPort(id, ctx.signal);
        if (!now || !(now.security_groups ?? []).includes(d.id)) return undefined;
        const may = release.when.evaluate({ object: toCel(now), evidence: ev.indexes });
        if (!may.ok || may.value !== true)
          return `port ${id} changed and is no longer one it may be taken off`;
        const out = await w.neutron.setPortSecurityGroups(
          id,
          (now.security_groups ?? []).filter((g) => g !== d.id),
          now.revision_number ?? -1,
          ctx.signal,
        );
        if (out !== 'conflict') return undefined;
        if (attempt >= 2)
          return `precondition failed (412): port ${id} changed twice while being written; the group stays on the ports not yet released`;
      }
    };
    // each port's writes queue behind any other write of it in this process (Neutron's
    // If-Match is not atomic under concurrent updates)
    for (const p of ports.ports) {
      const stays = await onePortAtATime(p.id, () => releasePort(p.id));
      if (stays !== undefined) return { outcome: 'skipped', reason: stays };
    }
  }
  const out = target.delete
    ? await target.delete(w, d, ctx.signal)
    : await Promise.reject(new Error(`a ${kind} is never deleted (report-only)`));
  if (out === 'conflict')
    return {
      outcome: 'skipped',
      reason: target.ifMatch
        ? `precondition failed (412): the ${kind} changed`
        : `409: the ${kind} is being changed (immutable now)`,
    };
  if (out === 'gone') return { outcome: 'gone', detail: `${kind} was already gone` };
  return {
    outcome: 'deleted',
    detail: target.ifMatch
      ? `${kind} ${d.id} deleted (If-Match: revision_number=${d.revision})`
      : `${kind} ${d.id} deleted (cascade; ${target.service} offers no precondition)`,
  };
}
