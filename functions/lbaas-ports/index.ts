/**
 * lbaas-ports: reclaims the Neutron L3 ports (and their floating IPs) that
 * ch-k8s-lbaas created for Services that no longer exist. "In use" comes from
 * the Services themselves, listed after the ports, never from memory.
 */

import {
  type ConnectContext,
  defineFunction,
  GUARD_DEFAULTS,
  MINUTE,
  type ObserveContext,
  type Ports,
} from '../../shared/contract/index.ts';
import { SERVICES } from '../../shared/kube/resources.ts';
import { loadCloudConfig } from '../../shared/openstack/config.ts';
import { Http } from '../../shared/openstack/http.ts';
import { KeystoneAuth } from '../../shared/openstack/keystone.ts';
import { type FloatingIp, NeutronClient, type Port } from '../../shared/openstack/neutron.ts';
import { controllerState, RUNNING_LINE } from './controller.ts';
import {
  CONTROLLER_DESCRIPTION,
  FIP_FIELDS,
  type LbaasReader,
  type LbaasWriter,
  lbaasPortsSettings,
  MANAGED_TAG,
  NAME,
  PORT_FIELDS,
  type PortData,
  projectOf,
  type Settings,
  serviceEvidence,
  serviceView,
  usedBy,
} from './model.ts';
import { portKind } from './remove.ts';

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
  // The controller is evidence too (law 13), read after the targets: while it runs, every free
  // port it loaded may be handed to a new Service from its memory, with nothing written to
  // Neutron. Confirmed deletions are then held; one that cannot be read is doubt (exit 3).
  const controller = await controllerState(r.kube, s.controller, ctx.signal);
  if (controller.running) {
    ctx.hold(`${RUNNING_LINE} (${controller.detail})`);
    ctx.note('controller.running', { reason: `${RUNNING_LINE} (${controller.detail})` }, 'warn');
  } else ctx.note('controller.stopped', { reason: controller.detail });
  ctx.source('ports', 'target', ports);
  ctx.source('floatingips', 'target', fips);
  ctx.source('project-ports', 'target', all);
  ctx.source('services', 'evidence', services);
  const ev = serviceEvidence(services.items);
  const fipByPort = new Map<string, FloatingIp>();
  for (const f of fips.items) if (f.port_id) fipByPort.set(f.port_id, f);
  noteStrays(ctx, fips.items, ports.items, all.items);
  judgePorts(ctx, ports.items, fipByPort, ev, conditional, s);
  // A decommissioned controller places nothing: a Service without a port waits for no one.
  if (s.controller !== 'none')
    for (const svc of ev.placing)
      ctx.blocker(
        `Service ${svc} is of type LoadBalancer, not managed: "false", and has no inbound-port yet: the controller is placing it and may give it any free port`,
      );
}

type Ctx = ObserveContext<Settings, { Port: PortData }>;
type Listed<T> = readonly T[];

/** What is tagged but not a target: floating IPs on no managed port, and the controller's untagged ports (reported, never deleted). */
function noteStrays(
  ctx: Ctx,
  fips: Listed<FloatingIp>,
  ports: Listed<{ id: string }>,
  all: Listed<{ id: string; name?: string; tags?: string[]; description?: string }>,
): void {
  const portIds = new Set(ports.map((p) => p.id));
  const projectPorts = new Map(all.map((p) => [p.id, p]));
  for (const f of fips) {
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
  for (const p of all) {
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
}

/** Each managed port: in use by a Service, or undecided when its delete could not carry a precondition. */
function judgePorts(
  ctx: Ctx,
  ports: Listed<Port>,
  fipByPort: ReadonlyMap<string, FloatingIp>,
  ev: ReturnType<typeof serviceEvidence>,
  conditional: boolean,
  s: Settings & { unconditionalDeletes?: boolean },
): void {
  for (const p of ports) {
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
}

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
  access: {
    // its targets are in OpenStack: in the cluster it reads the Services that hold ports
    cluster: [{ apiGroups: [''], resources: ['services'], verbs: ['list', 'get'] }],
    namespaced: [
      {
        role: 'controller',
        why: 'The ch-k8s-lbaas controller is evidence: ports are deleted only while its Deployment is scaled to 0 and no pod of it exists. Read where it runs (settings.controller.namespace; none with `controller: none`).',
        setting: 'controller',
        defaultNamespace: 'kube-system',
        rules: [
          { apiGroups: ['apps'], resources: ['deployments'], verbs: ['get', 'list'] },
          { apiGroups: [''], resources: ['pods'], verbs: ['list'] },
        ],
      },
    ],
    openstack: true,
  },
  kinds: { Port: portKind },
  connect,
  observe,
});

export {
  CONTROLLER_DESCRIPTION,
  type LbaasReader,
  type LbaasWriter,
  lbaasPortsSettings,
  MANAGED_ANNOTATION,
  MANAGED_TAG,
  NAME,
  PORT_ANNOTATION,
  serviceEvidence,
  serviceView,
} from './model.ts';
