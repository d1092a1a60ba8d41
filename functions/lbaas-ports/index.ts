/**
 * lbaas-ports: reclaims the Neutron L3 ports (and their floating IPs) that
 * ch-k8s-lbaas created for Services that no longer exist. "In use" comes from
 * the Services themselves, listed after the ports, never from memory.
 */

import { z } from 'zod';
import {
  ConfigError,
  type ConnectContext,
  defineFunction,
  GUARD_DEFAULTS,
  type KindSpec,
  MINUTE,
  nonEmpty,
  type ObserveContext,
  type Ports,
  pageSizeSetting,
} from '../../shared/contract/index.ts';
import type { KubeClient, KubeReader } from '../../shared/kube/ports.ts';
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
export type LbaasWriter = Readonly<{ kube: KubeClient; neutron: NeutronClient }>;

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
    };
    const created = p.created_at ? Date.parse(p.created_at) : Number.NaN;
    const v = ctx.target('Port', {
      key: p.id,
      fingerprint: [p.id, p.revision_number ?? '?', d.deviceId, d.fixedIps.join(','), fip?.id ?? '-'].join(
        '|',
      ),
      name: `${p.name || p.id}${d.fixedIps.length ? ` ${d.fixedIps.join(',')}` : ''}${fip?.floating_ip_address ? ` (FIP ${fip.floating_ip_address})` : ''}`,
      marks: [{ tags: p.tags }, { tags: fip?.tags }],
      ...(Number.isFinite(created) ? { createdAt: created } : {}),
      data: d,
    });
    if (p.revision_number === undefined)
      v.indeterminate('port has no revision_number (standard-attr-revisions missing)');
    else if (usedBy(ev, d)) v.used();
  }
  for (const svc of ev.placing)
    ctx.blocker(
      `Service ${svc} is managed and of type LoadBalancer but has no inbound-port yet: it is being placed and may take any free port`,
    );
}

const portKind: KindSpec<PortData, LbaasReader, LbaasWriter, Settings> = {
  data: portData,
  unused:
    'no Service names it in its inbound-port annotation or has one of its addresses (fixed or floating) as load-balancer ingress, and no Service is being placed',
  removal:
    'DELETE its floating IP, then the port, each with If-Match on the revision_number read (a changed one is skipped)',
  async recheck(r, { data: d }, ctx) {
    const scopeTag = ctx.settings.scopeTag;
    const p = await r.neutron.getPort(d.portId, ctx.signal);
    if (!p) return { ok: false, reason: 'port is already gone' };
    if (p.revision_number !== d.revision)
      return { ok: false, reason: `port changed (revision ${d.revision} -> ${p.revision_number})` };
    if (!p.tags?.includes(MANAGED_TAG) || (scopeTag && !p.tags.includes(scopeTag)))
      return { ok: false, reason: 'port lost its tags' };
    if ((p.device_id ?? '') !== d.deviceId) return { ok: false, reason: 'port has a new device' };
    if (d.fip) {
      const f = await r.neutron.getFloatingIp(d.fip.id, ctx.signal);
      if (f && (f.port_id !== d.portId || f.revision_number !== d.fip.revision))
        return { ok: false, reason: 'its floating IP changed' };
    }
    const services = await r.kube.listAll(SERVICES, { signal: ctx.signal, view: serviceView });
    const ev = serviceEvidence(services.items);
    const use = usedBy(ev, d);
    if (use) return { ok: false, reason: use };
    if (ev.placing.length) return { ok: false, reason: `Service ${ev.placing[0]} is being placed` };
    return { ok: true };
  },
  async remove(w, { data: d }, ctx) {
    // The port and its floating IP are one unit: the FIP recorded in the snapshot first, then the port.
    let fipNote = '';
    if (d.fip) {
      const out = await w.neutron.deleteFloatingIp(d.fip.id, d.fip.revision, ctx.signal);
      if (out === 'conflict')
        return { outcome: 'skipped', reason: 'precondition failed (412): the floating IP changed' };
      fipNote =
        out === 'gone'
          ? `floating IP ${d.fip.id} was already gone; `
          : `floating IP ${d.fip.address ?? d.fip.id} deleted; `;
    }
    const out = await w.neutron.deletePort(d.portId, d.revision, ctx.signal);
    if (out === 'conflict')
      return { outcome: 'skipped', reason: `${fipNote}precondition failed (412): the port changed` };
    if (out === 'gone') return { outcome: 'gone', detail: `${fipNote}port was already gone` };
    return { outcome: 'deleted', detail: `${fipNote}port ${d.portId} deleted` };
  },
  async confirmGone(r, { data: d }, ctx) {
    return (await r.neutron.getPort(d.portId, ctx.signal)) === undefined;
  },
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
  // One deletion at a time: each re-check lists the Services right before its own delete, so that no
  // other deletion's work widens the window in which the controller could take the port.
  maxConcurrency: 1,
  kinds: { Port: portKind },
  connect,
  observe,
});
