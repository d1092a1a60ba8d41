/**
 * `rules test` for a cloud rule: the world file holds Kubernetes objects (the evidence) and
 * OpenStack resources, written as objects of `apiVersion: openstack.twopass.io/v1`:
 *
 *   kind: Project       metadata.name: the project ID; spec.cluster: the cluster's name
 *   kind: FloatingIP | Port | SecurityGroup | Volume | LoadBalancer | Member
 *                       metadata.name: the resource's id; metadata.annotations
 *                       twopass.io/expect as for any target; spec: its fields (a Member's
 *                       spec names its pool_id and loadbalancer_id, as the client adds them)
 *
 * Served read-only as the Neutron the rule lists (by project and tags, as the server does).
 */
import { ConfigError } from '../errors.ts';
import type { KubeObject } from '../kube/resources.ts';
import type { Volume } from '../openstack/cinder.ts';
import type { Filters, FloatingIp, Port, SecurityGroup } from '../openstack/neutron.ts';
import type { LoadBalancer, Member } from '../openstack/octavia.ts';
import type { CloudReader } from './cloud-function.ts';

export const OPENSTACK_API = 'openstack.twopass.io/v1';
const NEUTRON_KINDS = new Set(['Port', 'FloatingIP', 'SecurityGroup']);

type Any = { id: string; project_id?: string; tags?: string[] };

export class WorldNeutron {
  readonly projectId: string;
  readonly cluster: string;
  private readonly items: { kind: string; o: Any }[];
  constructor(objects: readonly KubeObject[], source: string) {
    const projects = objects.filter((o) => o.apiVersion === OPENSTACK_API && o.kind === 'Project');
    if (projects.length !== 1)
      throw new ConfigError(
        `world ${source}: a cloud rule's world needs one \`kind: Project\` (apiVersion ${OPENSTACK_API}; metadata.name the project ID, spec.cluster the cluster's name)`,
      );
    const p = projects[0]!;
    const cluster = (p.spec as { cluster?: unknown } | undefined)?.cluster;
    if (typeof cluster !== 'string' || cluster === '')
      throw new ConfigError(`world ${source}: the Project needs spec.cluster (the cluster's name)`);
    this.projectId = p.metadata.name;
    this.cluster = cluster;
    this.items = objects
      .filter((o) => o.apiVersion === OPENSTACK_API && o.kind !== 'Project')
      .map((o) => ({
        kind: o.kind ?? '',
        o: {
          project_id: this.projectId,
          // Neutron's resources have tags and a revision; Cinder's and Octavia's their own fields
          ...(NEUTRON_KINDS.has(o.kind ?? '') ? { tags: [], revision_number: 1 } : {}),
          ...((o.spec as Record<string, unknown> | undefined) ?? {}),
          id: o.metadata.name,
        } as Any,
      }));
  }
  /** What each resource must be decided as, by id. */
  expectations(objects: readonly KubeObject[]): Map<string, string> {
    const m = new Map<string, string>();
    for (const o of objects)
      if (o.apiVersion === OPENSTACK_API && o.metadata.annotations?.['twopass.io/expect'])
        m.set(o.metadata.name, o.metadata.annotations['twopass.io/expect']);
    return m;
  }
  private list<T>(kind: string, f: Filters): Promise<{ items: T[]; pages: number }> {
    const items = this.items
      .filter((x) => x.kind === kind)
      .map((x) => x.o)
      .filter(
        (o) =>
          (!f.project_id || o.project_id === f.project_id) &&
          (f.tags ?? []).every((t) => o.tags?.includes(t)),
      );
    return Promise.resolve({ items: items as T[], pages: 1 });
  }
  private get<T>(kind: string, id: string): Promise<T | undefined> {
    return Promise.resolve(this.items.find((x) => x.kind === kind && x.o.id === id)?.o as T | undefined);
  }
  reader(kube: CloudReader['kube']): CloudReader {
    return {
      kube,
      neutron: {
        listPorts: (f) => this.list<Port>('Port', f),
        listFloatingIps: (f) => this.list<FloatingIp>('FloatingIP', f),
        listSecurityGroups: (f) => this.list<SecurityGroup>('SecurityGroup', f),
        getPort: (id) => this.get<Port>('Port', id),
        getFloatingIp: (id) => this.get<FloatingIp>('FloatingIP', id),
        getSecurityGroup: (id) => this.get<SecurityGroup>('SecurityGroup', id),
      },
      octavia: {
        listLoadBalancers: (f) => this.list<LoadBalancer>('LoadBalancer', f),
        getLoadBalancer: (id) => this.get<LoadBalancer>('LoadBalancer', id),
        // a world file names a load balancer's children by id, as Octavia's load balancer does
        loadBalancerTree: (lb) =>
          Promise.resolve({
            listeners: (lb.listeners ?? []).map((l) => ({ ...l })),
            pools: (lb.pools ?? []).map((p) => ({ ...p, members: [] })),
          }),
        listMembers: (f) => this.list<Member>('Member', f),
      },
      cinder: {
        listVolumes: (f) => this.list<Volume>('Volume', f),
        getVolume: (id) => this.get<Volume>('Volume', id),
      },
    };
  }
}
