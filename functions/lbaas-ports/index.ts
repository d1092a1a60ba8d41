/**
 * lbaas-ports: reclaims the Neutron L3 ports (and their floating IPs) that
 * ch-k8s-lbaas created for Services that no longer exist. "In use" comes from
 * the Services themselves, listed after the ports, never from memory.
 */

import { z } from 'zod';
import {
  type BatchItemResult,
  BatchResults,
  ConfigError,
  type ConnectContext,
  defineFunction,
  describeValue,
  GUARD_DEFAULTS,
  type KindSpec,
  keepMarked,
  MINUTE,
  nonEmpty,
  type ObserveContext,
  type Ports,
  pageSizeSetting,
  type RecheckResult,
  type RemovedPart,
  type RemoveResult,
  type RunContext,
  type Typed,
} from '../../shared/contract/index.ts';
import type { KubeReader, KubeReadWriter } from '../../shared/kube/ports.ts';
import { type KubeObject, SERVICES } from '../../shared/kube/resources.ts';
import { loadCloudConfig } from '../../shared/openstack/config.ts';
import { Http } from '../../shared/openstack/http.ts';
import { KeystoneAuth } from '../../shared/openstack/keystone.ts';
import { type FloatingIp, NeutronClient, type NeutronReader } from '../../shared/openstack/neutron.ts';

export const NAME = 'lbaas-ports';
export const MANAGED_TAG = 'cah-loadbalancer.k8s.cloudandheat.com/managed';
export const PORT_ANNOTATION = 'cah-loadbalancer.k8s.cloudandheat.com/inbound-port';
export const MANAGED_ANNOTATION = 'cah-loadbalancer.k8s.cloudandheat.com/managed';
export const CONTROLLER_DESCRIPTION = 'Managed by cah-loadbalancer';

export type LbaasReader = Readonly<{
  kube: KubeReader;
  neutron: NeutronReader & { supports(alias: string, signal?: AbortSignal): Promise<boolean> };
}>;
export type LbaasWriter = Readonly<{ kube: KubeReadWriter; neutron: NeutronClient }>;

export const lbaasPortsSettings = z
  .object({
    projectId: nonEmpty('a project ID')
      .optional()
      .describe('the OpenStack project whose ports may be deleted (required to run)'),
    scopeTag: nonEmpty('a tag')
      .optional()
      .describe('an extra tag a port must carry (narrows the ownership mark)'),
    cloud: nonEmpty('a cloud name').optional().describe('the clouds.yaml entry (default: $OS_CLOUD)'),
    pageSize: pageSizeSetting.default(500).describe('items per list page'),
    concurrency: z
      .number({
        error: (i) => `expected a whole number of deletions from 1 to 32, got ${describeValue(i.input)}`,
      })
      .int()
      .min(1)
      .max(32)
      .default(8)
      .describe(
        'ports deleted at once; each group of this many is re-checked against one fresh list of Services taken just before its deletes',
      ),
    unconditionalDeletes: z
      .boolean()
      .default(false)
      .describe(
        'RISK: where Neutron lacks the revision-if-match extension (or a port or floating IP has no revision_number), delete without a precondition; a port changed between the re-check and the delete is then deleted anyway (default: such ports are indeterminate, never deleted)',
      ),
  })
  .strict();
type Settings = z.output<typeof lbaasPortsSettings>;

const portData = z.object({
  portId: z.string().min(1),
  revision: z.number().int().optional(),
  deviceId: z.string(),
  fixedIps: z.array(z.string()),
  fip: z
    .object({ id: z.string().min(1), address: z.string().optional(), revision: z.number().int().optional() })
    .optional(),
  /** Deletes carry If-Match (false only where the operator accepted unconditional deletes). */
  conditional: z.boolean(),
});
type PortData = z.output<typeof portData>;

/** The project a run may delete in: required to run, so checked before anything connects. */
function projectOf(s: Settings): string {
  if (s.projectId === undefined)
    throw new ConfigError(
      `${NAME}: \`functions.${NAME}.settings.projectId\` is required (the OpenStack project whose ports it may delete)`,
    );
  return s.projectId;
}

const PORT_FIELDS = ['id', 'name', 'revision_number', 'device_id', 'fixed_ips', 'tags', 'created_at'];
const FIP_FIELDS = ['id', 'floating_ip_address', 'port_id', 'revision_number', 'tags'];

type ServiceEvidence = { portIds: Set<string>; ips: Set<string>; placing: string[]; count: number };

/**
 * What lbaas-ports reads of a Service, kept page by page instead of the whole object: its
 * name, the two annotations, its type and its load-balancer ingress addresses.
 */
export function serviceView(svc: KubeObject): KubeObject {
  const ann = svc.metadata.annotations;
  const kept: Record<string, string> = {};
  for (const k of [PORT_ANNOTATION, MANAGED_ANNOTATION]) if (ann?.[k] !== undefined) kept[k] = ann[k];
  const type = (svc.spec as { type?: unknown } | undefined)?.type;
  const ingress = (svc.status as { loadBalancer?: { ingress?: unknown } } | undefined)?.loadBalancer?.ingress;
  return {
    metadata: {
      name: svc.metadata.name,
      ...(svc.metadata.namespace !== undefined ? { namespace: svc.metadata.namespace } : {}),
      uid: svc.metadata.uid,
      resourceVersion: svc.metadata.resourceVersion,
      annotations: kept,
    },
    spec: { type },
    status: {
      loadBalancer: {
        ingress: Array.isArray(ingress)
          ? ingress.map((i) => ({ ip: (i as { ip?: unknown } | null)?.ip }))
          : [],
      },
    },
  };
}

export function serviceEvidence(services: readonly KubeObject[]): ServiceEvidence {
  const ev: ServiceEvidence = { portIds: new Set(), ips: new Set(), placing: [], count: services.length };
  for (const svc of services) {
    const ann = svc.metadata.annotations ?? {};
    const port = ann[PORT_ANNOTATION];
    if (port) ev.portIds.add(port);
    const ingress = ((svc.status as { loadBalancer?: { ingress?: { ip?: string }[] } } | undefined)
      ?.loadBalancer?.ingress ?? []) as { ip?: string }[];
    for (const i of ingress) if (typeof i?.ip === 'string') ev.ips.add(i.ip);
    const type = (svc.spec as { type?: string } | undefined)?.type;
    if (ann[MANAGED_ANNOTATION] === 'true' && type === 'LoadBalancer' && !port)
      ev.placing.push(`${svc.metadata.namespace}/${svc.metadata.name}`);
  }
  return ev;
}

function usedBy(ev: ServiceEvidence, d: PortData): string | undefined {
  if (ev.portIds.has(d.portId)) return 'a Service names it in its inbound-port annotation';
  const ip =
    d.fixedIps.find((x) => ev.ips.has(x)) ??
    (d.fip?.address && ev.ips.has(d.fip.address) ? d.fip.address : undefined);
  return ip ? `a Service's load balancer ingress is ${ip}` : undefined;
}

async function observe(r: LbaasReader, ctx: ObserveContext<Settings, { Port: PortData }>): Promise<void> {
  const s = { ...ctx.settings, projectId: projectOf(ctx.settings) };
  const tags = [MANAGED_TAG, ...(s.scopeTag ? [s.scopeTag] : [])];
  // Targets first: tagged ports and floating IPs of the project; Services (the evidence) after.
  // A wrong project lists nothing: say so rather than see nothing to clean.
  await r.neutron.checkProject?.(s.projectId, ctx.signal);
  // Without revision-if-match no delete can carry its precondition: such ports are not decided
  // unless the operator accepted unconditional deletes.
  const conditional = await r.neutron.supports('revision-if-match', ctx.signal);
  if (!conditional)
    ctx.note(
      'neutron.no-if-match',
      {
        reason: s.unconditionalDeletes
          ? 'Neutron does not offer revision-if-match: deletes go WITHOUT a precondition (unconditionalDeletes: true)'
          : 'Neutron does not offer revision-if-match: no delete could carry its precondition, so every port is indeterminate (set unconditionalDeletes: true to accept the risk)',
      },
      'warn',
    );
  // Only the fields a decision reads (Neutron's `fields`): a port has some 25 others.
  const ports = await r.neutron.listPorts({ tags, project_id: s.projectId, fields: PORT_FIELDS }, ctx.signal);
  const fips = await r.neutron.listFloatingIps(
    { tags: [MANAGED_TAG], project_id: s.projectId, fields: FIP_FIELDS },
    ctx.signal,
  );
  // All ports of the project, for the two checks below: only the fields they read.
  const all = await r.neutron.listPorts(
    { project_id: s.projectId, fields: ['id', 'name', 'tags', 'description'] },
    ctx.signal,
  );
  const services = await r.kube.listAll(SERVICES, { signal: ctx.signal, view: serviceView });
  ctx.source('ports', 'target', ports);
  ctx.source('floatingips', 'target', fips);
  ctx.source('project-ports', 'target', all);
  ctx.source('services', 'evidence', services);
  const ev = serviceEvidence(services.items);
  const fipByPort = new Map<string, FloatingIp>();
  for (const f of fips.items) if (f.port_id) fipByPort.set(f.port_id, f);
  const portIds = new Set(ports.items.map((p) => p.id));
  const projectPorts = new Map(all.items.map((p) => [p.id, p]));
  for (const f of fips.items) {
    if (f.port_id && portIds.has(f.port_id)) continue;
    const on = f.port_id ? projectPorts.get(f.port_id) : undefined;
    // On a managed port outside this run's scopeTag: another cluster's, not ours to report.
    if (on?.tags?.includes(MANAGED_TAG)) continue;
    const name = `${f.floating_ip_address ?? '?'} (${f.id})`;
    if (on)
      ctx.note('fip.on-unmanaged-port', {
        kind: 'FloatingIP',
        name,
        reason: `tagged, but on port ${on.id}, which does not carry the managed tag: reported, never deleted`,
      });
    else
      ctx.note('fip.unassociated', {
        kind: 'FloatingIP',
        name,
        reason: 'tagged but on no port of the project: reported, never deleted alone',
      });
  }
  for (const p of all.items) {
    if (!p.tags?.includes(MANAGED_TAG) && p.description === CONTROLLER_DESCRIPTION) {
      ctx.note('port.untagged', {
        kind: 'Port',
        name: `${p.name || p.id}`,
        key: p.id,
        reason:
          "the controller's description but not its tag (a crash between create and tag?): a possible leak, never deleted",
      });
    }
  }
  for (const p of ports.items) {
    const fip = fipByPort.get(p.id);
    const d: PortData = {
      portId: p.id,
      ...(p.revision_number !== undefined ? { revision: p.revision_number } : {}),
      deviceId: p.device_id ?? '',
      fixedIps: (p.fixed_ips ?? []).map((f) => f.ip_address),
      ...(fip
        ? {
            fip: {
              id: fip.id,
              ...(fip.floating_ip_address ? { address: fip.floating_ip_address } : {}),
              ...(fip.revision_number !== undefined ? { revision: fip.revision_number } : {}),
            },
          }
        : {}),
      conditional: conditional && !s.unconditionalDeletes,
    };
    const created = p.created_at ? Date.parse(p.created_at) : Number.NaN;
    const v = ctx.target('Port', {
      key: p.id,
      // The unit's fingerprint: the port's revision and its floating IP's (a FIP whose tags or
      // description changed between the two observations resets the unit).
      fingerprint: [
        p.id,
        p.revision_number ?? '?',
        d.deviceId,
        d.fixedIps.join(','),
        fip ? `${fip.id}@${fip.revision_number ?? '?'}` : '-',
      ].join('|'),
      name: `${p.name || p.id}${d.fixedIps.length ? ` ${d.fixedIps.join(',')}` : ''}${fip?.floating_ip_address ? ` (FIP ${fip.floating_ip_address})` : ''}`,
      marks: [{ tags: p.tags }, { tags: fip?.tags }],
      ...(Number.isFinite(created) ? { createdAt: created } : {}),
      data: d,
    });
    if (p.revision_number === undefined && !s.unconditionalDeletes)
      v.indeterminate('port has no revision_number (standard-attr-revisions missing)');
    else if (usedBy(ev, d)) v.used();
    else if (!conditional && !s.unconditionalDeletes)
      v.indeterminate(
        'Neutron does not offer revision-if-match: its delete could not carry a precondition (unconditionalDeletes: true accepts the risk)',
      );
    else if (fip && fip.revision_number === undefined && !s.unconditionalDeletes)
      v.indeterminate(
        `its floating IP ${fip.id} has no revision_number: its delete could not carry a precondition`,
      );
  }
  for (const svc of ev.placing)
    ctx.blocker(
      `Service ${svc} is managed and of type LoadBalancer but has no inbound-port yet: it is being placed and may take any free port`,
    );
}

type Ctx = RunContext<Settings>;

/** Re-reads the port and its floating IP and judges them against `ev` (a fresh list of Services). */
async function recheckPort(
  r: LbaasReader,
  d: PortData,
  ev: ServiceEvidence,
  ctx: Ctx,
): Promise<RecheckResult> {
  const scopeTag = ctx.settings.scopeTag;
  const p = await r.neutron.getPort(d.portId, ctx.signal);
  if (!p) return { ok: false, reason: 'port is already gone' };
  if (p.revision_number !== d.revision)
    return { ok: false, reason: `port changed (revision ${d.revision} -> ${p.revision_number})` };
  if (!p.tags?.includes(MANAGED_TAG) || (scopeTag && !p.tags.includes(scopeTag)))
    return { ok: false, reason: 'port lost its tags' };
  if (keepMarked([{ tags: p.tags }])) return { ok: false, reason: 'port carries the keep-mark' };
  if ((p.device_id ?? '') !== d.deviceId) return { ok: false, reason: 'port has a new device' };
  if (d.fip) {
    const f = await r.neutron.getFloatingIp(d.fip.id, ctx.signal);
    if (f && (f.port_id !== d.portId || f.revision_number !== d.fip.revision))
      return { ok: false, reason: 'its floating IP changed' };
  }
  const use = usedBy(ev, d);
  if (use) return { ok: false, reason: use };
  if (ev.placing.length) return { ok: false, reason: `Service ${ev.placing[0]} is being placed` };
  return { ok: true };
}

/**
 * The floating IP of a deleted port: re-read, and deleted only if it is now unassociated,
 * still managed and not keep-marked, with If-Match on the revision just read (deleting the
 * port disassociated it, which gave it a new revision).
 */
async function removeFip(unit: LbaasUnit, fip: NonNullable<PortData['fip']>, ctx: Ctx): Promise<RemovedPart> {
  const part = { kind: 'FloatingIP', key: fip.id, name: `${fip.address ?? '?'} (${fip.id})` };
  const left = (why: string): RemovedPart => ({
    ...part,
    outcome: 'left',
    detail: `floating IP left: ${why} (its port was deleted; later runs report it as unassociated)`,
  });
  try {
    const f = await unit.r.neutron.getFloatingIp(fip.id, ctx.signal);
    if (!f) return { ...part, outcome: 'gone', detail: 'floating IP was already gone' };
    if (f.port_id) return left(`it is on port ${f.port_id} now`);
    if (!f.tags?.includes(MANAGED_TAG)) return left('it lost the managed tag');
    if (keepMarked([{ tags: f.tags }])) return left('it carries the keep-mark');
    if ((f.floating_ip_address ?? undefined) !== fip.address) return left('its address changed');
    if (unit.conditional && f.revision_number === undefined) return left('it has no revision_number');
    const out = await unit.w.neutron.deleteFloatingIp(
      fip.id,
      unit.conditional ? f.revision_number : undefined,
      ctx.signal,
    );
    if (out === 'conflict') return left('it changed between its read and its delete (412)');
    if (out === 'gone') return { ...part, outcome: 'gone', detail: 'floating IP was already gone' };
    return {
      ...part,
      outcome: 'deleted',
      detail: `floating IP ${fip.address ?? fip.id} deleted (unassociated since its port was deleted)`,
    };
  } catch (err) {
    return {
      ...part,
      outcome: 'failed',
      detail: `floating IP left: ${(err as Error).message} (its port was deleted; later runs report it as unassociated, delete it by hand)`,
    };
  }
}

type LbaasUnit = Readonly<{ r: LbaasReader; w: LbaasWriter; conditional: boolean }>;

/**
 * One unit: the port first, under its If-Match (a port changed since the re-check is skipped
 * and keeps its floating IP), then, once a read shows the port gone, its floating IP.
 */
async function removeUnit(r: LbaasReader, w: LbaasWriter, d: PortData, ctx: Ctx): Promise<RemoveResult> {
  const unit: LbaasUnit = { r, w, conditional: d.conditional };
  const out = await w.neutron.deletePort(d.portId, d.conditional ? d.revision : undefined, ctx.signal);
  if (out === 'conflict')
    return {
      outcome: 'skipped',
      reason: `precondition failed (412): the port changed${d.fip ? '; its floating IP was not touched' : ''}`,
    };
  if (out === 'gone')
    return {
      outcome: 'gone',
      detail: 'port was already gone',
      ...(d.fip
        ? {
            parts: [
              {
                kind: 'FloatingIP',
                key: d.fip.id,
                name: `${d.fip.address ?? '?'} (${d.fip.id})`,
                outcome: 'left' as const,
                detail: 'floating IP left: its port was deleted by someone else, who owns it',
              },
            ],
          }
        : {}),
    };
  if (await r.neutron.getPort(d.portId, ctx.signal))
    throw new Error(
      'the server answered deleted but a read still finds the port; its floating IP was not touched',
    );
  const parts = d.fip ? [await removeFip(unit, d.fip, ctx)] : [];
  return { outcome: 'deleted', detail: `port ${d.portId} deleted`, parts };
}

/** Fresh Services, listed just before a group's deletes: the controller may hand a cached port to a new Service at any time. */
async function freshServices(r: LbaasReader, ctx: Ctx): Promise<ServiceEvidence> {
  return serviceEvidence((await r.kube.listAll(SERVICES, { signal: ctx.signal, view: serviceView })).items);
}

/**
 * Every confirmed port of the run, in groups of `concurrency`: each group is re-checked
 * against one fresh list of Services (never older than the group) and its units removed
 * in parallel.
 */
async function removePorts(
  r: LbaasReader,
  w: LbaasWriter,
  targets: readonly Typed<PortData>[],
  ctx: Ctx,
): Promise<BatchItemResult[]> {
  const results = new BatchResults(targets);
  const n = ctx.settings.concurrency;
  for (let i = 0; i < targets.length && !ctx.signal.aborted; i += n) {
    const group = targets.slice(i, i + n);
    const ev = await freshServices(r, ctx);
    await Promise.all(
      group.map(async (t) => {
        try {
          const check = await recheckPort(r, t.data, ev, ctx);
          if (!check.ok) return results.skip(t.key, `re-check: ${check.reason}`);
          results.set({ key: t.key, ...(await removeUnit(r, w, t.data, ctx)) });
        } catch (err) {
          results.set({ key: t.key, outcome: 'failed', error: (err as Error).message });
        }
      }),
    );
  }
  return results.all('not attempted: the run was stopped');
}

const portKind: KindSpec<PortData, LbaasReader, LbaasWriter, Settings> = {
  data: portData,
  unused:
    'no Service names it in its inbound-port annotation or has one of its addresses (fixed or floating) as load-balancer ingress, and no Service is being placed',
  removal:
    'DELETE the port with If-Match on the revision_number read (a changed port is skipped and keeps its floating IP); then re-read its floating IP and DELETE it, with If-Match, only if it is unassociated and still managed',
  async recheck(r, { data: d }, ctx) {
    return recheckPort(r, d, await freshServices(r, ctx), ctx);
  },
  remove: (w, { data: d }, ctx) => removeUnit(w, w, d, ctx),
  async confirmGone(r, { data: d }, ctx) {
    return (await r.neutron.getPort(d.portId, ctx.signal)) === undefined;
  },
  // Every port of a run in one batch: it deletes them in groups, each on fresh Services.
  batch: { key: () => 'ports', remove: removePorts },
};

async function connect(c: ConnectContext<Settings>): Promise<Ports<LbaasReader, LbaasWriter>> {
  projectOf(c.settings);
  const cloud = loadCloudConfig(c.env, c.settings.cloud !== undefined ? { cloud: c.settings.cloud } : {});
  const http = new Http({ timeoutMs: c.callTimeoutMs, time: c.time });
  const auth = new KeystoneAuth(cloud, http, c.time.now);
  const neutron = new NeutronClient(auth, http, c.settings.pageSize);
  return { reader: { kube: c.kube, neutron }, writer: { kube: c.kube, neutron }, close: () => http.close() };
}

export const lbaasPorts = defineFunction<
  typeof lbaasPortsSettings,
  LbaasReader,
  LbaasWriter,
  { Port: PortData }
>({
  name: NAME,
  description:
    'Neutron L3 ports and their floating IPs that ch-k8s-lbaas created for Services that no longer exist',
  settings: lbaasPortsSettings,
  defaults: {
    schedule: '*/10 * * * *',
    enabled: false,
    graceMs: 30 * MINUTE,
    ...GUARD_DEFAULTS,
    // a cloud's ports cost money and time to re-create: a tighter count than the cluster functions
    maxDeletions: 10,
  },
  kinds: { Port: portKind },
  connect,
  observe,
});
