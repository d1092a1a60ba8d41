/**
 * A cloud rule as a function: the targets are Neutron ports or floating IPs of one project,
 * listed completely (the client proves every page), filtered server-side by project and
 * tags, and listed before the evidence; each is the cluster's own only by the rule's
 * ownership (naming the cluster) and its project; its identity is its id and its
 * fingerprint its revision_number, and a delete carries `If-Match: revision_number=N` after
 * a re-check on a fresh read and fresh evidence. Neutron without revision-if-match: nothing
 * is deleted (the client refuses to send a conditional delete it cannot make conditional).
 */

import { z } from 'zod';
import {
  type AnyFunction,
  defineFunction,
  freshEvidence,
  type KindSpec,
  keepMarked,
  type ObserveContext,
  openStackObject,
  type RunContext,
} from '../contract/index.ts';
import { noRestoreFacts, openStackResourcePayload, readPayload } from '../contract/tombstone.ts';
import { CinderClient, type Volume } from '../openstack/cinder.ts';
import { loadCloudConfig } from '../openstack/config.ts';
import { Http } from '../openstack/http.ts';
import { KeystoneAuth } from '../openstack/keystone.ts';
import { NeutronClient } from '../openstack/neutron.ts';
import { type LoadBalancer, OctaviaClient } from '../openstack/octavia.ts';
import { ruleAccess } from './access.ts';
import { toCel } from './cel.ts';
import {
  CLOUD_COLLECTIONS,
  type CloudEvidenceCollection,
  type CloudReader,
  type CloudWriter,
  onePortAtATime,
  type Resource,
  targetOf,
} from './cloud-collections.ts';
import type { CloudRule } from './cloud-rule.ts';
import { cloudSettingsOf, type Settings } from './cloud-settings.ts';

export type { CloudReader, CloudWriter } from './cloud-collections.ts';
export { cloudRuleSettings, cloudSettingsOf, OCCM_DEFAULT_CLUSTER } from './cloud-settings.ts';

import { type EvidenceRead, indexEvidence, readEvidence, reportEvidence } from './evidence.ts';
import { judge, ruleDefaults } from './function.ts';

/** A cloud resource's tombstone: the resource as read just before its deletion. */
const CLOUD_TOMBSTONE = { object: openStackResourcePayload, restore: noRestoreFacts };

/** `revision`: Neutron's revision_number; `version`: what stands for it where there is none (a volume's updated_at). */
const data = z.object({
  id: z.string().min(1),
  revision: z.number().int().min(0),
  version: z.string().optional(),
  /** The project it is in (where the leak sits, for metrics). */
  project: z.string().optional(),
});
type Data = z.output<typeof data>;

/**
 * What changes with every change of a resource: Neutron's revision_number; a volume has
 * none, so its updated_at and status stand for it (undefined: it has neither).
 */
function versionOf(o: Resource): { revision: number; version?: string } | undefined {
  if ('revision_number' in o && typeof o.revision_number === 'number') return { revision: o.revision_number };
  const x = o as Volume & LoadBalancer;
  const status = x.status ?? x.provisioning_status;
  const at = x.updated_at ?? x.created_at;
  if (typeof at === 'string' && typeof status === 'string')
    return { revision: 0, version: `${at}/${status}` };
  return undefined;
}
const nameOf = (o: Resource) =>
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
const marksOf = (o: Resource) => ['tags' in o ? { tags: o.tags } : { annotations: (o as Volume).metadata }];

/** Builds the function of a compiled cloud rule. */
export function cloudRuleFunction(rule: CloudRule): AnyFunction {
  const kind = rule.kind;
  const c = rule.collection;
  const list = (r: CloudReader, s: Settings, signal: AbortSignal) => {
    const tag = rule.owner.serverTag(s.cluster);
    return listCollection(
      r,
      c,
      { project_id: s.projectId, tags: [...rule.tags, ...(tag ? [tag] : [])] },
      signal,
    );
  };
  const target = targetOf(c);
  const get = (r: CloudReader, id: string, signal: AbortSignal) => target.get(r, id, signal);
  const del = (w: CloudWriter, d: Data, signal: AbortSignal) =>
    target.delete
      ? target.delete(w, d, signal)
      : Promise.reject(new Error(`a ${kind} is never deleted (report-only)`));
  /** The object the conditions read: the resource, and `owner` (the named groups of its ownership). */
  const owned = (o: Resource, s: Settings) => {
    if (o.project_id !== s.projectId) return null; // an admin's token sees every project
    const groups = rule.owner.owns(o, s.cluster);
    return groups ? toCel({ ...o, owner: groups }) : null;
  };
  const fingerprintOf = (o: Resource, object: unknown): string | { error: string } => {
    const v = versionOf(o);
    const parts = [o.id, v?.version ?? String(v?.revision)];
    for (const f of rule.fingerprint) {
      const r = f.evaluate({ object });
      if (!r.ok) return { error: `${f.where.replace(/^rule [^:]+: /, '')}: ${r.error}` };
      parts.push(JSON.stringify(r.value, (_k, v) => (typeof v === 'bigint' ? v.toString() : v)));
    }
    return parts.join('|');
  };
  /** Every evidence list: the Kubernetes ones, then the OpenStack ones of the project. */
  async function readAll(r: CloudReader, s: Settings, signal: AbortSignal): Promise<EvidenceRead> {
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
  const allEvidence = { evidence: [...rule.evidence, ...rule.cloudEvidence] };
  /**
   * The ports still in security group `id` (from the rule's `release.evidence`), when
   * `release.when` allows taking it off every one of them; else why not.
   */
  const releasable = (
    indexes: EvidenceRead['indexes'],
    id: string,
  ):
    | { ports: { id: string; security_groups: string[]; revision_number: number }[] }
    | { refused: string } => {
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
  const freshLists = (r: CloudReader, ctx: RunContext<Settings>) =>
    freshEvidence(ctx, `rule:${rule.name}`, () => readAll(r, ctx.settings, ctx.signal));

  async function observe(r: CloudReader, ctx: ObserveContext<Settings, Record<string, Data>>): Promise<void> {
    const s = ctx.settings;
    await r.neutron.checkProject?.(s.projectId, ctx.signal);
    // Targets first: evidence listed after can only add holders.
    const targets = await list(r, s, ctx.signal);
    ctx.source(rule.collection, 'target', targets);
    const ev = await readAll(r, s, ctx.signal);
    reportEvidence(ctx, allEvidence, ev);
    let foreign = 0;
    for (const o of targets.items as Resource[]) {
      const object = owned(o, s);
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
      const fp = fingerprintOf(o, object);
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
  }

  const spec: KindSpec<Data, CloudReader, CloudWriter, Settings> = {
    data,
    note: `decided by rule ${rule.name} (${rule.source}): in use when ${rule.inUse.source.trim()}`,
    unused: rule.unused,
    removal: !target.deletes
      ? `never: a ${kind} is only reported`
      : rule.release
        ? `PUT each port still in the group without it (If-Match: the port's revision_number; only ports release.when allows), then DELETE the ${kind} with If-Match: revision_number=<the revision observed>`
        : target.ifMatch
          ? `DELETE the ${kind} with If-Match: revision_number=<the revision observed> (Neutron's revision-if-match: a changed ${kind} answers 412 and is skipped)`
          : `DELETE the ${kind} (cascade) without a precondition, which ${target.service} does not offer: the re-check on a fresh read just before is the last guard; one being changed (PENDING_*) answers 409 and is skipped`,
    touches: (d) =>
      !target.deletes || !target.touch
        ? []
        : [
            target.touch(d.id),
            // released from the ports it is still on: any port, each write on its revision
            ...(rule.release ? [{ object: openStackObject('neutron', 'ports', '*') }] : []),
          ],
    async recheck(r, { key, data: d }, ctx) {
      const o = await get(r, d.id, ctx.signal);
      if (!o) return { ok: false, reason: `${kind} is already gone` };
      const now = versionOf(o);
      if (now?.revision !== d.revision || now?.version !== d.version)
        return {
          ok: false,
          reason: `${kind} changed (${d.version ?? `revision ${d.revision}`} -> ${now?.version ?? (now ? `revision ${now.revision}` : 'none')})`,
        };
      const object = owned(o, ctx.settings);
      if (!object)
        return { ok: false, reason: `${kind} is no longer the cluster's (${rule.owner.describe})` };
      if (keepMarked(marksOf(o))) return { ok: false, reason: `${kind} carries the keep-mark` };
      const fp = fingerprintOf(o, object);
      if (typeof fp !== 'string' || o.id !== key) return { ok: false, reason: `${kind}'s identity changed` };
      const ev = (await freshLists(r, ctx)).value;
      if (ev.blockers.length > 0) return { ok: false, reason: `fresh evidence: ${ev.blockers.join('; ')}` };
      const verdict = judge(rule, object, ev.indexes);
      if ('used' in verdict) return { ok: false, reason: 'fresh evidence shows it in use' };
      if ('indeterminate' in verdict)
        return { ok: false, reason: `fresh evidence: ${verdict.indeterminate}` };
      if (rule.release) {
        // the ports it is taken off before its delete, as they were: the tombstone holds them
        const ports = releasable(ev.indexes, d.id);
        if ('refused' in ports) return { ok: false, reason: ports.refused };
        return { ok: true, before: { ...o, released_from: ports.ports } };
      }
      // what goes with it (a load balancer's cascade): the tombstone holds it whole
      return { ok: true, before: target.tree ? { ...o, ...(await target.tree(r, o, ctx.signal)) } : o };
    },
    async remove(w, { data: d }, ctx) {
      if (rule.release) {
        // Off its ports first, each write conditional on the port's revision; the evidence is
        // the run's fresh read (the re-check's, while young enough), read again if older.
        const ev = (await freshLists({ kube: w.kube, neutron: w.neutron } as CloudReader, ctx)).value;
        if (ev.blockers.length > 0)
          return { outcome: 'skipped', reason: `fresh evidence: ${ev.blockers.join('; ')}` };
        const ports = releasable(ev.indexes, d.id);
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
      const out = await del(w, d, ctx.signal);
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
    },
    place: (d) => d.project ?? '',
    async restore(_r, w, tomb, ctx) {
      const read = readPayload(tomb, CLOUD_TOMBSTONE);
      if (!read.ok) return { outcome: 'refused', reason: read.reason };
      const o = read.object as Resource;
      if (target.restore) return target.restore(w, o, ctx);
      return { outcome: 'refused', reason: target.noRestore ?? `a ${kind} cannot be restored by twopass` };
    },
    async confirmGone(r, { data: d }, ctx) {
      const o = await get(r, d.id, ctx.signal);
      // Octavia deletes in the background: PENDING_DELETE is its provider at work
      return o === undefined || target.gone?.(o) === true;
    },
  };

  const settings = cloudSettingsOf(rule);
  return defineFunction<typeof settings, CloudReader, CloudWriter, Record<string, Data>>({
    name: rule.name,
    description: rule.description,
    settings,
    defaults: { ...ruleDefaults(rule), enabled: false },
    access: ruleAccess(rule),
    ...(rule.reportOnly ? { reportOnly: true } : {}),
    kinds: { [kind]: spec },
    async connect(c) {
      const cloud = loadCloudConfig(c.env, c.settings.cloud !== undefined ? { cloud: c.settings.cloud } : {});
      const http = new Http({ timeoutMs: c.callTimeoutMs, time: c.time });
      const auth = new KeystoneAuth(cloud, http, c.time.now);
      const neutron = new NeutronClient(auth, http, c.settings.pageSize);
      // a client for each service the rule reads (its targets' and its evidence's)
      const services = new Set(
        [rule.collection, ...rule.cloudEvidence.map((e) => e.collection as CloudEvidenceCollection)].map(
          (x) => CLOUD_COLLECTIONS[x].service,
        ),
      );
      const cinder = services.has('Cinder') ? new CinderClient(auth, http, c.settings.pageSize) : undefined;
      const octavia = services.has('Octavia')
        ? new OctaviaClient(auth, http, c.settings.pageSize)
        : undefined;
      return {
        reader: { kube: c.kube, neutron, cinder, octavia },
        writer: { kube: c.kube, neutron, octavia },
        close: () => http.close(),
      };
    },
    observe,
  });
}
