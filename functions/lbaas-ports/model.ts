/**
 * lbaas-ports' model: its settings, the data of a port target, and what the Services say
 * is in use (by port ID, by address, and the Services still being placed).
 */

import { z } from 'zod';
import { ConfigError, describeValue, nonEmpty, pageSizeSetting } from '../../shared/contract/index.ts';
import type { KubeReader, KubeReadWriter } from '../../shared/kube/ports.ts';
import type { KubeObject } from '../../shared/kube/resources.ts';
import type { NeutronClient, NeutronReader } from '../../shared/openstack/neutron.ts';
import { controllerSetting } from './controller.ts';

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
    controller: controllerSetting,
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
export type Settings = z.output<typeof lbaasPortsSettings>;

export const portData = z.object({
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
export type PortData = z.output<typeof portData>;

/** The project a run may delete in: required to run, so checked before anything connects. */
export function projectOf(s: Settings): string {
  if (s.projectId === undefined)
    throw new ConfigError(
      `${NAME}: \`functions.${NAME}.settings.projectId\` is required (the OpenStack project whose ports it may delete)`,
    );
  return s.projectId;
}

export const PORT_FIELDS = ['id', 'name', 'revision_number', 'device_id', 'fixed_ips', 'tags', 'created_at'];
export const FIP_FIELDS = ['id', 'floating_ip_address', 'port_id', 'revision_number', 'tags'];

export type ServiceEvidence = { portIds: Set<string>; ips: Set<string>; placing: string[]; count: number };

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
    // As the controller takes them: every LoadBalancer Service whose `managed` annotation is
    // absent or not "false"; it writes `managed: "true"`, then the port annotation, later.
    if (type === 'LoadBalancer' && ann[MANAGED_ANNOTATION] !== 'false' && !port)
      ev.placing.push(`${svc.metadata.namespace}/${svc.metadata.name}`);
  }
  return ev;
}

export function usedBy(ev: ServiceEvidence, d: PortData): string | undefined {
  if (ev.portIds.has(d.portId)) return 'a Service names it in its inbound-port annotation';
  const ip =
    d.fixedIps.find((x) => ev.ips.has(x)) ??
    (d.fip?.address && ev.ips.has(d.fip.address) ? d.fip.address : undefined);
  return ip ? `a Service's load balancer ingress is ${ip}` : undefined;
}
