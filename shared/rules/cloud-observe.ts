/**
 * What a cloud rule reads and how it judges: its targets (one collection of the project,
 * listed completely, filtered server-side by project and tags) before its evidence (the
 * Kubernetes lists, then the OpenStack ones of the project); each target the cluster's own
 * only by the rule's ownership and its project; its identity its id, its fingerprint its
 * revision (or what stands for one) and the rule's fingerprint expressions.
 */
import { z } from 'zod';
import type { ObserveContext } from '../contract/index.ts';
import type { Volume } from '../openstack/cinder.ts';
import type { LoadBalancer } from '../openstack/octavia.ts';
import { toCel } from './cel.ts';
import {
  CLOUD_COLLECTIONS,
  type CloudEvidenceCollection,
  type CloudReader,
  type Resource,
  targetOf,
} from './cloud-collections.ts';
import type { CloudRule } from './cloud-rule.ts';
import type { Settings } from './cloud-settings.ts';
import { type EvidenceRead, indexEvidence, readEvidence, reportEvidence } from './evidence.ts';
import { judge } from './function.ts';

/** `revision`: Neutron's revision_number; `version`: what stands for it where there is none (a volume's updated_at). */
export const data = z.object({
  id: z.string().min(1),
  revision: z.number().int().min(0),
  version: z.string().optional(),
  /** The project it is in (where the leak sits, for metrics). */
  project: z.string().optional(),
});
export type Data = z.output<typeof data>;

/**
 * What changes with every change of a resource: Neutron's revision_number; a volume has
 * none, so its updated_at and status stand for it (undefined: it has neither).
 */
export function versionOf(o: Resource): { revision: number; version?: string } | undefined {
  if ('revision_number' in o && typeof o.revision_number === 'number') return { revision: o.revision_number };
  const x = o as Volume & LoadBalancer;
  const status = x.status ?? x.provisioning_status;
  const at = x.updated_at ?? x.created_at;
  if (typeof at === 'string' && typeof status === 'string')
    return { revision: 0, version: `${at}/${status}` };
  return undefined;
}
export const nameOf = (o: Resource) =>
  'floating_ip_address' in o && o.floating_ip_address
    ? `${o.floating_ip_address} (${o.id})`
    : o.name
      ? `${o.name} (${o.id})`
      : o.id;

/** One collection of a project, every page (the client proves the list complete). */
const listCollection = (
  r: CloudReader,
  c: CloudEvidenceCollection,
  f: { project_id: string; tags: string[] },
  signal: AbortSignal,
) => CLOUD_COLLECTIONS[c].list(r, f, signal);

/** The keep-mark's places: Neutron's tags, a volume's metadata (as an annotation would carry it). */
export const marksOf = (o: Resource) => [
  'tags' in o ? { tags: o.tags } : { annotations: (o as Volume).metadata },
];

/** The rule's targets: its collection, by project and the rule's tags (and its owner's server-side tag). */
export function listTargets(rule: CloudRule, r: CloudReader, s: Settings, signal: AbortSignal) {
  const tag = rule.owner.serverTag(s.cluster);
  return listCollection(
    r,
    rule.collection,
    { project_id: s.projectId, tags: [...rule.tags, ...(tag ? [tag] : [])] },
    signal,
  );
}

/** The object the conditions read: the resource, and `owner` (the named groups of its ownership); null when not the cluster's. */
export function ownedBy(rule: CloudRule, o: Resource, s: Settings) {
  if (o.project_id !== s.projectId) return null; // an admin's token sees every project
  const groups = rule.owner.owns(o, s.cluster);
  return groups ? toCel({ ...o, owner: groups }) : null;
}

/** The target's fingerprint: its id, its version, and what the rule's fingerprint expressions say. */
export function fingerprintOf(rule: CloudRule, o: Resource, object: unknown): string | { error: string } {
  const v = versionOf(o);
  const parts = [o.id, v?.version ?? String(v?.revision)];
  for (const f of rule.fingerprint) {
    const r = f.evaluate({ object });
    if (!r.ok) return { error: `${f.where.replace(/^rule [^:]+: /, '')}: ${r.error}` };
    parts.push(JSON.stringify(r.value, (_k, v) => (typeof v === 'bigint' ? v.toString() : v)));
  }
  return parts.join('|');
}

/** Every evidence list: the Kubernetes ones, then the OpenStack ones of the project. */
export async function readAll(
  rule: CloudRule,
  r: CloudReader,
  s: Settings,
  signal: AbortSignal,
): Promise<EvidenceRead> {
  const ev = await readEvidence(rule, r.kube, s.pageSize, signal);
  for (const e of rule.cloudEvidence) {
    const l = await listCollection(
      r,
      e.collection as CloudEvidenceCollection,
      { project_id: s.projectId, tags: [...e.tags] },
      signal,
    );
    // an admin's token may see other projects: only the project's own resources are evidence
    const items = (l.items as Resource[]).filter((o) => o.project_id === s.projectId);
    const index = new Map<string, unknown[]>();
    ev.indexes[e.name] = index;
    ev.counts[e.name] = { count: items.length, pages: l.pages };
    const bad = await indexEvidence(e, items, index, signal, nameOf);
    if (bad.length > 0)
      ev.blockers.push(
        `evidence ${e.name}: the key of ${bad.length} ${e.collection} cannot be read, so what they hold is unknown: ${bad.slice(0, 3).join('; ')}`,
      );
  }
  return ev;
}

export function observeOf(rule: CloudRule) {
  const kind = rule.kind;
  const target = targetOf(rule.collection);
  const allEvidence = { evidence: [...rule.evidence, ...rule.cloudEvidence] };
  return async (r: CloudReader, ctx: ObserveContext<Settings, Record<string, Data>>): Promise<void> => {
    const s = ctx.settings;
    await r.neutron.checkProject?.(s.projectId, ctx.signal);
    // Targets first: evidence listed after can only add holders.
    const targets = await listTargets(rule, r, s, ctx.signal);
    ctx.source(rule.collection, 'target', targets);
    const ev = await readAll(rule, r, s, ctx.signal);
    reportEvidence(ctx, allEvidence, ev);
    let foreign = 0;
    for (const o of targets.items as Resource[]) {
      const object = ownedBy(rule, o, s);
      if (!object) {
        foreign++;
        continue;
      }
      const created = o.created_at ? Date.parse(o.created_at) : Number.NaN;
      const init = {
        name: nameOf(o),
        marks: marksOf(o),
        ...(Number.isNaN(created) ? {} : { createdAt: created }),
      };
      const version = versionOf(o);
      if (!version) {
        ctx.unreadable(
          kind,
          { ...init, key: o.id, fingerprint: o.id },
          target.ifMatch
            ? 'no revision_number: its delete could not carry a precondition'
            : 'no status or updated_at: a change between the observations could not be seen',
        );
        continue;
      }
      const fp = fingerprintOf(rule, o, object);
      if (typeof fp !== 'string') {
        ctx.unreadable(kind, { ...init, key: o.id, fingerprint: o.id }, fp.error);
        continue;
      }
      const v = ctx.target(kind, {
        ...init,
        key: o.id,
        fingerprint: fp,
        data: { id: o.id, ...version, project: s.projectId },
      });
      const verdict = judge(rule, object, ev.indexes);
      if ('used' in verdict) v.used();
      else if ('indeterminate' in verdict) v.indeterminate(verdict.indeterminate);
    }
    if (foreign > 0)
      ctx.note('targets.not-owned', {
        rule: rule.name,
        count: foreign,
        reason: `listed, but not of project ${s.projectId} with ${rule.owner.describe} for cluster ${s.cluster}: not this rule's to judge`,
      });
  };
}
