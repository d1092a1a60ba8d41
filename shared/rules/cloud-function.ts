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
  nonEmpty,
  type ObserveContext,
  openStackObject,
  pageSizeSetting,
  type RunContext,
} from '../contract/index.ts';
import { noRestoreFacts, openStackResourcePayload, readPayload } from '../contract/tombstone.ts';
import type { KubeReader } from '../kube/ports.ts';
import { CinderClient, type CinderReader, type Volume } from '../openstack/cinder.ts';
import { loadCloudConfig } from '../openstack/config.ts';
import { Http } from '../openstack/http.ts';
import { KeystoneAuth } from '../openstack/keystone.ts';
import {
  type FloatingIp,
  NeutronClient,
  type NeutronReader,
  type Port,
  type SecurityGroup,
} from '../openstack/neutron.ts';
import { type LoadBalancer, OctaviaClient, type OctaviaReader } from '../openstack/octavia.ts';
import { restoreFip, restorePort } from '../openstack/restore.ts';
import { toCel } from './cel.ts';
import { CLOUD_TARGETS, CLUSTER, type CloudEvidenceCollection, type CloudRule } from './cloud-rule.ts';
import { type EvidenceRead, indexEvidence, readEvidence, reportEvidence } from './evidence.ts';
import { judge, ruleDefaults } from './function.ts';

/** A cloud resource's tombstone: the resource as read just before its deletion. */
const CLOUD_TOMBSTONE = { object: openStackResourcePayload, restore: noRestoreFacts };

/**
 * cloud-provider-openstack's default `--cluster-name`: every cluster whose controller never
 * set it writes this same name, so it tells no cluster from another in a shared project.
 */
export const OCCM_DEFAULT_CLUSTER = 'kubernetes';

export const cloudRuleSettings = z
  .object({
    projectId: nonEmpty('a project ID').describe('the OpenStack project whose resources the rule judges'),
    cluster: nonEmpty('the cluster name').describe(
      `the cluster's name as the resources carry it (\`${CLUSTER}\` in the rule's ownership)`,
    ),
    cloud: nonEmpty('a cloud name').optional().describe('the clouds.yaml entry (default: $OS_CLOUD)'),
    pageSize: pageSizeSetting.default(500).describe('items per list page'),
    clusterNameIsUnique: z
      .boolean()
      .default(false)
      .describe(
        `set to true only when no other cluster in the project uses the cluster name \`${OCCM_DEFAULT_CLUSTER}\` (cloud-provider-openstack's default --cluster-name)`,
      ),
  })
  .strict();
type Settings = z.output<typeof cloudRuleSettings>;

/**
 * A rule's settings: the common ones and its acknowledgements (each `false` until the
 * operator sets it). A run refuses (exit 2) while one is missing, or while the cluster
 * name is cloud-provider-openstack's default and the operator has not said it is theirs alone.
 */
export function cloudSettingsOf(rule: Pick<CloudRule, 'acknowledgements'>) {
  const acks = Object.fromEntries(
    rule.acknowledgements.map((a) => [a.setting, z.boolean().default(false).describe(a.why)]),
  );
  // typed as the common settings: an acknowledgement is read by name, only here
  return cloudRuleSettings.extend(acks as Record<never, never>).superRefine((s, ctx) => {
    if (s.cluster === OCCM_DEFAULT_CLUSTER && !s.clusterNameIsUnique)
      ctx.addIssue({
        code: 'custom',
        path: ['cluster'],
        message: `\`${OCCM_DEFAULT_CLUSTER}\` is cloud-provider-openstack's default --cluster-name, which every cluster that never set it shares: another cluster's load balancers, floating IPs and security groups in project ${s.projectId} would carry the same names and be judged as this cluster's. Give the controller a --cluster-name of this cluster's own and set it here, or, if no other cluster in the project uses \`${OCCM_DEFAULT_CLUSTER}\`, say so with \`clusterNameIsUnique: true\``,
      });
    const given = s as Record<string, unknown>;
    for (const a of rule.acknowledgements)
      if (given[a.setting] !== true)
        ctx.addIssue({
          code: 'custom',
          path: [a.setting],
          message: `this rule runs only once \`${a.setting}: true\` is set: ${a.why}`,
        });
  });
}

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
 * One write of a port at a time in this process. Neutron checks If-Match before its update
 * commits: two writes of one port on the same revision at the same moment can both answer
 * 200, the later undoing the earlier (seen on the real Neutron: two groups taken off one
 * node port at once, one of them put back). A run's own writes of a port therefore queue;
 * each still carries its If-Match (decision 0013).
 */
const portWrites = new Map<string, Promise<unknown>>();
async function onePortAtATime<T>(id: string, work: () => Promise<T>): Promise<T> {
  const before = portWrites.get(id) ?? Promise.resolve();
  const mine = before.then(work, work);
  const tail = mine.then(
    () => undefined,
    () => undefined,
  );
  portWrites.set(id, tail);
  try {
    return await mine;
  } finally {
    if (portWrites.get(id) === tail) portWrites.delete(id);
  }
}

type Resource = (Port | FloatingIp | SecurityGroup | Volume | LoadBalancer) & {
  name?: string | null;
  description?: string | null;
};
export type CloudReader = Readonly<{
  kube: KubeReader;
  neutron: NeutronReader & Pick<NeutronClient, 'listSecurityGroups' | 'getSecurityGroup'>;
  /** Cinder, where the rule targets or reads volumes. */
  cinder?: CinderReader | undefined;
  /** Octavia, where the rule targets or reads load balancers. */
  octavia?: OctaviaReader | undefined;
}>;

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
export type CloudWriter = Readonly<{
  kube: KubeReader;
  neutron: NeutronClient;
  octavia?: Pick<OctaviaClient, 'deleteLoadBalancer'> | undefined;
}>;

const nameOf = (o: Resource) =>
  'floating_ip_address' in o && o.floating_ip_address
    ? `${o.floating_ip_address} (${o.id})`
    : o.name
      ? `${o.name} (${o.id})`
      : o.id;

/** One Neutron, Cinder or Octavia collection of a project, every page (the client proves the list complete). */
function listCollection(
  r: CloudReader,
  c: CloudEvidenceCollection,
  f: { project_id: string; tags: string[] },
  signal: AbortSignal,
): Promise<{ items: readonly unknown[]; pages: number }> {
  if (c === 'members') return octaviaOf(r).listMembers({ project_id: f.project_id }, signal);
  if (c === 'volumes') return cinderOf(r).listVolumes({ project_id: f.project_id }, signal);
  if (c === 'loadbalancers') return octaviaOf(r).listLoadBalancers({ project_id: f.project_id }, signal);
  return c === 'ports'
    ? r.neutron.listPorts(f, signal)
    : c === 'floatingips'
      ? r.neutron.listFloatingIps(f, signal)
      : r.neutron.listSecurityGroups(f, signal);
}

/** The keep-mark's places: Neutron's tags, a volume's metadata (as an annotation would carry it). */
const marksOf = (o: Resource) => ['tags' in o ? { tags: o.tags } : { annotations: (o as Volume).metadata }];

function octaviaOf<T>(r: { octavia?: T | undefined }): T {
  if (!r.octavia)
    throw new Error('the rule reads Octavia load balancers, but no Octavia client was connected');
  return r.octavia;
}

function cinderOf(r: CloudReader): CinderReader {
  if (!r.cinder) throw new Error('the rule reads Cinder volumes, but no Cinder client was connected');
  return r.cinder;
}

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
  const get = (r: CloudReader, id: string, signal: AbortSignal): Promise<Resource | undefined> =>
    c === 'volumes'
      ? cinderOf(r).getVolume(id, signal)
      : c === 'loadbalancers'
        ? octaviaOf(r).getLoadBalancer(id, signal)
        : c === 'ports'
          ? r.neutron.getPort(id, signal)
          : c === 'floatingips'
            ? r.neutron.getFloatingIp(id, signal)
            : r.neutron.getSecurityGroup(id, signal);
  const del = (w: CloudWriter, d: Data, signal: AbortSignal) =>
    c === 'volumes'
      ? Promise.reject(new Error(`a ${kind} is never deleted (report-only)`))
      : c === 'loadbalancers'
        ? octaviaOf(w).deleteLoadBalancer(d.id, signal)
        : c === 'ports'
          ? w.neutron.deletePort(d.id, d.revision, signal)
          : c === 'floatingips'
            ? w.neutron.deleteFloatingIp(d.id, d.revision, signal)
            : w.neutron.deleteSecurityGroup(d.id, d.revision, signal);
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
          c === 'volumes'
            ? 'no status or updated_at: a change between the observations could not be seen'
            : 'no revision_number: its delete could not carry a precondition',
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
    removal: !CLOUD_TARGETS[c].deletes
      ? `never: a ${kind} is only reported`
      : rule.release
        ? `PUT each port still in the group without it (If-Match: the port's revision_number; only ports release.when allows), then DELETE the ${kind} with If-Match: revision_number=<the revision observed>`
        : CLOUD_TARGETS[c].ifMatch
          ? `DELETE the ${kind} with If-Match: revision_number=<the revision observed> (Neutron's revision-if-match: a changed ${kind} answers 412 and is skipped)`
          : `DELETE the ${kind} (cascade) without a precondition, which ${CLOUD_TARGETS[c].service} does not offer: the re-check on a fresh read just before is the last guard; one being changed (PENDING_*) answers 409 and is skipped`,
    touches: (d) =>
      !CLOUD_TARGETS[c].deletes
        ? []
        : [
            c === 'loadbalancers'
              ? {
                  object: openStackObject('octavia', c, d.id),
                  unconditional: 'Octavia offers no precondition on a DELETE',
                }
              : { object: openStackObject('neutron', c, d.id) },
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
      // the cascade takes its listeners, pools and members: the tombstone holds them whole
      if (c === 'loadbalancers')
        return {
          ok: true,
          before: { ...o, ...(await octaviaOf(r).loadBalancerTree(o as LoadBalancer, ctx.signal)) },
        };
      return { ok: true, before: o };
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
          reason: CLOUD_TARGETS[c].ifMatch
            ? `precondition failed (412): the ${kind} changed`
            : `409: the ${kind} is being changed (immutable now)`,
        };
      if (out === 'gone') return { outcome: 'gone', detail: `${kind} was already gone` };
      return {
        outcome: 'deleted',
        detail: CLOUD_TARGETS[c].ifMatch
          ? `${kind} ${d.id} deleted (If-Match: revision_number=${d.revision})`
          : `${kind} ${d.id} deleted (cascade; ${CLOUD_TARGETS[c].service} offers no precondition)`,
      };
    },
    place: (d) => d.project ?? '',
    async restore(_r, w, tomb, ctx) {
      const read = readPayload(tomb, CLOUD_TOMBSTONE);
      if (!read.ok) return { outcome: 'refused', reason: read.reason };
      const o = read.object as Resource;
      if (c === 'ports') return restorePort(w.neutron, o as Port, undefined, ctx);
      if (c === 'floatingips') return restoreFip(w.neutron, { ...(o as FloatingIp), port_id: null }, ctx);
      return {
        outcome: 'refused',
        reason:
          c === 'loadbalancers'
            ? 'an Octavia load balancer cannot be restored by twopass: its listeners, pools and members went with it (cascade); the tombstone holds each of them whole (twopass restore --output json shows them) to make it again by hand'
            : `a ${kind} cannot be restored by twopass (its rules are not re-created): make it again from its tombstone (twopass restore --output json shows it)`,
      };
    },
    async confirmGone(r, { data: d }, ctx) {
      const o = await get(r, d.id, ctx.signal);
      // Octavia deletes in the background: PENDING_DELETE is its provider at work
      return o === undefined || (o as LoadBalancer).provisioning_status === 'PENDING_DELETE';
    },
  };

  const settings = cloudSettingsOf(rule);
  return defineFunction<typeof settings, CloudReader, CloudWriter, Record<string, Data>>({
    name: rule.name,
    description: rule.description,
    settings,
    defaults: { ...ruleDefaults(rule), enabled: false },
    ...(rule.reportOnly ? { reportOnly: true } : {}),
    kinds: { [kind]: spec },
    async connect(c) {
      const cloud = loadCloudConfig(c.env, c.settings.cloud !== undefined ? { cloud: c.settings.cloud } : {});
      const http = new Http({ timeoutMs: c.callTimeoutMs, time: c.time });
      const auth = new KeystoneAuth(cloud, http, c.time.now);
      const neutron = new NeutronClient(auth, http, c.settings.pageSize);
      const readsVolumes =
        rule.collection === 'volumes' || rule.cloudEvidence.some((e) => e.collection === 'volumes');
      const cinder = readsVolumes ? new CinderClient(auth, http, c.settings.pageSize) : undefined;
      const readsLbs =
        rule.collection === 'loadbalancers' ||
        rule.cloudEvidence.some((e) => e.collection === 'loadbalancers' || e.collection === 'members');
      const octavia = readsLbs ? new OctaviaClient(auth, http, c.settings.pageSize) : undefined;
      return {
        reader: { kube: c.kube, neutron, cinder, octavia },
        writer: { kube: c.kube, neutron, octavia },
        close: () => http.close(),
      };
    },
    observe,
  });
}
