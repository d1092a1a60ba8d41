/**
 * lbaas-ports: reclaims the Neutron L3 ports (and their floating IPs) that
 * ch-k8s-lbaas created for Services that no longer exist. "In use" comes from
 * the Services themselves, listed after the ports, never from memory.
 */

import { z } from 'zod';
import type { Indeterminate, SourceMeta, Target } from '../../shared/engine/types.ts';
import type { KubeClient, KubeReader } from '../../shared/kube/ports.ts';
import { type KubeObject, SERVICES } from '../../shared/kube/resources.ts';
import { loadCloudConfig } from '../../shared/openstack/config.ts';
import { Http } from '../../shared/openstack/http.ts';
import { KeystoneAuth } from '../../shared/openstack/keystone.ts';
import { type FloatingIp, NeutronClient, type NeutronReader } from '../../shared/openstack/neutron.ts';
import { ConfigError } from '../../shared/runtime/errors.ts';
import {
  type ConnectContext,
  type FunctionContext,
  GUARD_DEFAULTS,
  type Observation,
  type Ports,
  type RecheckResult,
  type RemoveResult,
  type TwopassFunction,
} from '../../shared/runtime/function.ts';
import { makeHandler } from '../../shared/runtime/handler.ts';
import { describeValue, pageSizeSetting } from '../../shared/runtime/settings.ts';

export const NAME = 'lbaas-ports';
export const MANAGED_TAG = 'cah-loadbalancer.k8s.cloudandheat.com/managed';
export const PORT_ANNOTATION = 'cah-loadbalancer.k8s.cloudandheat.com/inbound-port';
export const MANAGED_ANNOTATION = 'cah-loadbalancer.k8s.cloudandheat.com/managed';
export const CONTROLLER_DESCRIPTION = 'Managed by cah-loadbalancer';
export const KEEP_TAG = 'twopass.io/keep';
const MIN = 60_000;

export type LbaasReader = Readonly<{
  kube: KubeReader;
  neutron: NeutronReader & { supports(alias: string, signal?: AbortSignal): Promise<boolean> };
}>;
export type LbaasWriter = Readonly<{ kube: KubeClient; neutron: NeutronClient }>;

type Settings = { projectId: string; scopeTag?: string };
type PortData = {
  portId: string;
  revision?: number;
  deviceId: string;
  fixedIps: string[];
  fip?: { id: string; address?: string; revision?: number };
};

function settingsOf(s: Readonly<Record<string, unknown>>): Settings {
  const projectId = s.projectId;
  if (typeof projectId !== 'string' || projectId === '') {
    throw new ConfigError(
      `${NAME}: \`functions.${NAME}.settings.projectId\` is required (the OpenStack project whose ports it may delete), got ${JSON.stringify(projectId)}`,
    );
  }
  if (s.scopeTag !== undefined && (typeof s.scopeTag !== 'string' || s.scopeTag === '')) {
    throw new ConfigError(
      `${NAME}: \`functions.${NAME}.settings.scopeTag\` must be a non-empty string, got ${JSON.stringify(s.scopeTag)}`,
    );
  }
  return { projectId, ...(typeof s.scopeTag === 'string' ? { scopeTag: s.scopeTag } : {}) };
}

type ServiceEvidence = { portIds: Set<string>; ips: Set<string>; placing: string[]; count: number };

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

async function observe(r: LbaasReader, ctx: FunctionContext): Promise<Observation> {
  const s = settingsOf(ctx.settings);
  const tags = [MANAGED_TAG, ...(s.scopeTag ? [s.scopeTag] : [])];
  // Targets first: tagged ports and floating IPs of the project; Services (the evidence) after.
  // A wrong project lists nothing: say so rather than see nothing to clean.
  await r.neutron.checkProject?.(s.projectId, ctx.signal);
  const ports = await r.neutron.listPorts({ tags, project_id: s.projectId }, ctx.signal);
  const fips = await r.neutron.listFloatingIps({ tags: [MANAGED_TAG], project_id: s.projectId }, ctx.signal);
  const all = await r.neutron.listPorts({ project_id: s.projectId }, ctx.signal);
  const services = await r.kube.listAll(SERVICES, { signal: ctx.signal });
  const sources: SourceMeta[] = [
    { name: 'ports', role: 'target', count: ports.items.length, pages: ports.pages, complete: true },
    { name: 'floatingips', role: 'target', count: fips.items.length, pages: fips.pages, complete: true },
    { name: 'project-ports', role: 'target', count: all.items.length, pages: all.pages, complete: true },
    {
      name: 'services',
      role: 'evidence',
      count: services.items.length,
      listVersion: services.resourceVersion,
      pages: services.pages,
      complete: true,
    },
  ];
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
  const targets: Target[] = [];
  const used: string[] = [];
  const indeterminate: Indeterminate[] = [];
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
    targets.push({
      key: p.id,
      kind: 'Port',
      fingerprint: [p.id, p.revision_number ?? '?', d.deviceId, d.fixedIps.join(','), fip?.id ?? '-'].join(
        '|',
      ),
      name: `${p.name || p.id}${d.fixedIps.length ? ` ${d.fixedIps.join(',')}` : ''}${fip?.floating_ip_address ? ` (FIP ${fip.floating_ip_address})` : ''}`,
      keep: (p.tags ?? []).includes(KEEP_TAG) || (fip?.tags ?? []).includes(KEEP_TAG),
      ...(Number.isFinite(created) ? { createdAt: created } : {}),
      data: d,
    });
    if (p.revision_number === undefined)
      indeterminate.push({
        key: p.id,
        reason: 'port has no revision_number (standard-attr-revisions missing)',
      });
    else if (usedBy(ev, d)) used.push(p.id);
  }
  const blockers = ev.placing.map(
    (svc) =>
      `Service ${svc} is managed and of type LoadBalancer but has no inbound-port yet: it is being placed and may take any free port`,
  );
  return { sources, targets, used, indeterminate, ...(blockers.length ? { blockers } : {}) };
}

async function recheck(r: LbaasReader, t: Target, ctx: FunctionContext): Promise<RecheckResult> {
  const d = t.data as PortData;
  const s = settingsOf(ctx.settings);
  const p = await r.neutron.getPort(d.portId, ctx.signal);
  if (!p) return { ok: false, reason: 'port is already gone' };
  if (p.revision_number !== d.revision)
    return { ok: false, reason: `port changed (revision ${d.revision} -> ${p.revision_number})` };
  if (!p.tags?.includes(MANAGED_TAG) || (s.scopeTag && !p.tags.includes(s.scopeTag)))
    return { ok: false, reason: 'port lost its tags' };
  if ((p.device_id ?? '') !== d.deviceId) return { ok: false, reason: 'port has a new device' };
  if (d.fip) {
    const f = await r.neutron.getFloatingIp(d.fip.id, ctx.signal);
    if (f && (f.port_id !== d.portId || f.revision_number !== d.fip.revision))
      return { ok: false, reason: 'its floating IP changed' };
  }
  const services = await r.kube.listAll(SERVICES, { signal: ctx.signal });
  const ev = serviceEvidence(services.items);
  const use = usedBy(ev, d);
  if (use) return { ok: false, reason: use };
  if (ev.placing.length) return { ok: false, reason: `Service ${ev.placing[0]} is being placed` };
  return { ok: true };
}

async function remove(w: LbaasWriter, t: Target, ctx: FunctionContext): Promise<RemoveResult> {
  const d = t.data as PortData;
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
}

async function confirmGone(r: LbaasReader, t: Target, ctx: FunctionContext): Promise<boolean> {
  return (await r.neutron.getPort((t.data as PortData).portId, ctx.signal)) === undefined;
}

async function connect(c: ConnectContext): Promise<Ports<LbaasReader, LbaasWriter>> {
  settingsOf(c.settings);
  const cloud = loadCloudConfig(c.env, {
    ...(typeof c.settings.cloud === 'string' ? { cloud: c.settings.cloud } : {}),
  });
  const http = new Http({ timeoutMs: c.callTimeoutMs });
  const auth = new KeystoneAuth(cloud, http, c.clock);
  const neutron = new NeutronClient(auth, http, c.pageSize);
  return { reader: { kube: c.kube, neutron }, writer: { kube: c.kube, neutron }, close: () => http.close() };
}

const nonEmpty = (what: string) =>
  z
    .string({ error: (i) => `expected ${what}, got ${describeValue(i.input)}` })
    .min(1, { error: `expected ${what}, got an empty string` });

export const lbaasPortsSettings = z
  .object({
    /** The OpenStack project whose ports may be deleted (required to run). */
    projectId: nonEmpty('a project ID').optional(),
    /** An extra tag a port must carry (narrows the ownership mark). */
    scopeTag: nonEmpty('a tag').optional(),
    /** The clouds.yaml entry (default $OS_CLOUD). */
    cloud: nonEmpty('a cloud name').optional(),
    pageSize: pageSizeSetting.optional(),
  })
  .strict();

export const lbaasPorts: TwopassFunction<LbaasReader, LbaasWriter> = {
  name: NAME,
  settingsSchema: lbaasPortsSettings,
  description:
    'Neutron L3 ports and their floating IPs that ch-k8s-lbaas created for Services that no longer exist',
  defaults: {
    schedule: '*/10 * * * *',
    enabled: false,
    graceMs: 30 * MIN,
    ...GUARD_DEFAULTS,
    // a cloud's ports cost money and time to re-create: a tighter count than the cluster functions
    maxDeletions: 10,
  },
  // One deletion at a time: each re-check lists the Services right before its own delete, so that no
  // other deletion's work widens the window in which the controller could take the port.
  maxConcurrency: 1,
  connect,
  observe,
  recheck,
  remove,
  confirmGone,
};

export default lbaasPorts;

/** For FaaS runtimes: `handler({ apply, dryRun, record, config })` returns the run summary. */
export const handler = makeHandler(lbaasPorts);
