/**
 * The OpenStack collections a cloud rule may target or read, one record each: its kind and
 * service, what its delete can carry, and how it is listed, read, deleted and restored.
 * Adding a collection is one record here (and its client's calls); the rule compiler, the
 * function, `rules check` and the deployment read everything from this table.
 */
import type { RestoreResult, RunContext, Touch } from '../contract/index.ts';
import { openStackObject } from '../contract/touch.ts';
import type { KubeReader } from '../kube/ports.ts';
import type { CinderReader, Volume } from '../openstack/cinder.ts';
import type { FloatingIp, NeutronClient, NeutronReader, Port, SecurityGroup } from '../openstack/neutron.ts';
import type { LoadBalancer, OctaviaClient, OctaviaReader } from '../openstack/octavia.ts';
import { restoreFip, restorePort } from '../openstack/restore.ts';

export type Resource = (Port | FloatingIp | SecurityGroup | Volume | LoadBalancer) & {
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

export type CloudWriter = Readonly<{
  kube: KubeReader;
  neutron: NeutronClient;
  octavia?: Pick<OctaviaClient, 'deleteLoadBalancer'> | undefined;
}>;

type Filter = { project_id: string; tags: string[] };
type Listed = Promise<{ items: readonly unknown[]; pages: number }>;
type DeleteOutcome = 'deleted' | 'gone' | 'conflict';

/** One collection. `target`: a rule may target it; `deletes`: its targets are deleted (else only reported). */
type Collection = Readonly<{
  kind: string;
  service: 'Neutron' | 'Cinder' | 'Octavia';
  list(r: CloudReader, f: Filter, signal: AbortSignal): Listed;
}> &
  (
    | Readonly<{ target?: false }>
    | Readonly<{
        target: true;
        /** Its delete carries If-Match on the revision observed. */
        ifMatch: boolean;
        deletes: boolean;
        get(r: CloudReader, id: string, signal: AbortSignal): Promise<Resource | undefined>;
        delete?(
          w: CloudWriter,
          d: { id: string; revision: number },
          signal: AbortSignal,
        ): Promise<DeleteOutcome>;
        /** What its delete writes (its removal's declaration for the guard). */
        touch?(id: string): Touch;
        /** What its tombstone holds besides the resource (a load balancer's listeners, pools, members). */
        tree?(r: CloudReader, o: Resource, signal: AbortSignal): Promise<Record<string, unknown>>;
        /** Gone, or going by itself (Octavia's PENDING_DELETE). */
        gone?(o: Resource): boolean;
        restore?(
          w: CloudWriter,
          o: Resource,
          ctx: RunContext<unknown> & { apply: boolean },
        ): Promise<RestoreResult>;
        /** Why a restore is refused when it has none. */
        noRestore?: string;
      }>
  );

function octaviaOf<T>(r: { octavia?: T | undefined }): T {
  if (!r.octavia)
    throw new Error('the rule reads Octavia load balancers, but no Octavia client was connected');
  return r.octavia;
}

function cinderOf(r: CloudReader): CinderReader {
  if (!r.cinder) throw new Error('the rule reads Cinder volumes, but no Cinder client was connected');
  return r.cinder;
}

const neutron = (collection: string) => (id: string) => ({
  object: openStackObject('neutron', collection, id),
});

export const CLOUD_COLLECTIONS = {
  ports: {
    kind: 'Port',
    service: 'Neutron',
    target: true,
    ifMatch: true,
    deletes: true,
    list: (r, f, signal) => r.neutron.listPorts(f, signal),
    get: (r, id, signal) => r.neutron.getPort(id, signal),
    delete: (w, d, signal) => w.neutron.deletePort(d.id, d.revision, signal),
    touch: neutron('ports'),
    restore: (w, o, ctx) => restorePort(w.neutron, o as Port, undefined, ctx),
  },
  floatingips: {
    kind: 'FloatingIP',
    service: 'Neutron',
    target: true,
    ifMatch: true,
    deletes: true,
    list: (r, f, signal) => r.neutron.listFloatingIps(f, signal),
    get: (r, id, signal) => r.neutron.getFloatingIp(id, signal),
    delete: (w, d, signal) => w.neutron.deleteFloatingIp(d.id, d.revision, signal),
    touch: neutron('floatingips'),
    restore: (w, o, ctx) => restoreFip(w.neutron, { ...(o as FloatingIp), port_id: null }, ctx),
  },
  'security-groups': {
    kind: 'SecurityGroup',
    service: 'Neutron',
    target: true,
    ifMatch: true,
    deletes: true,
    list: (r, f, signal) => r.neutron.listSecurityGroups(f, signal),
    get: (r, id, signal) => r.neutron.getSecurityGroup(id, signal),
    delete: (w, d, signal) => w.neutron.deleteSecurityGroup(d.id, d.revision, signal),
    touch: neutron('security-groups'),
    noRestore:
      'a SecurityGroup cannot be restored by twopass (its rules are not re-created): make it again from its tombstone (twopass restore --output json shows it)',
  },
  /** Only ever reported: a volume's data cannot be had back once deleted. */
  volumes: {
    kind: 'Volume',
    service: 'Cinder',
    target: true,
    ifMatch: false,
    deletes: false,
    list: (r, f, signal) => cinderOf(r).listVolumes({ project_id: f.project_id }, signal),
    get: (r, id, signal) => cinderOf(r).getVolume(id, signal),
    noRestore: 'a Volume is never deleted by twopass (report-only)',
  },
  /** Octavia offers no precondition: the re-check on a fresh read is the last guard (`rules check` says so). */
  loadbalancers: {
    kind: 'LoadBalancer',
    service: 'Octavia',
    target: true,
    ifMatch: false,
    deletes: true,
    list: (r, f, signal) => octaviaOf(r).listLoadBalancers({ project_id: f.project_id }, signal),
    get: (r, id, signal) => octaviaOf(r).getLoadBalancer(id, signal),
    delete: (w, d, signal) => octaviaOf(w).deleteLoadBalancer(d.id, signal),
    touch: (id) => ({
      object: openStackObject('octavia', 'loadbalancers', id),
      unconditional: 'Octavia offers no precondition on a DELETE',
    }),
    // the cascade takes its listeners, pools and members: the tombstone holds them whole
    tree: (r, o, signal) => octaviaOf(r).loadBalancerTree(o as LoadBalancer, signal),
    gone: (o) => (o as LoadBalancer).provisioning_status === 'PENDING_DELETE',
    noRestore:
      'an Octavia load balancer cannot be restored by twopass: its listeners, pools and members went with it (cascade); the tombstone holds each of them whole (twopass restore --output json shows them) to make it again by hand',
  },
  /**
   * Each pool's members, with `pool_id` and `loadbalancer_id` added: what stands behind a
   * load balancer. Evidence only, never a target.
   */
  members: {
    kind: 'Member',
    service: 'Octavia',
    list: (r, f, signal) => octaviaOf(r).listMembers({ project_id: f.project_id }, signal),
  },
} as const satisfies Record<string, Collection>;

/** What a cloud rule may read as evidence: every collection. */
export type CloudEvidenceCollection = keyof typeof CLOUD_COLLECTIONS;
/** What a cloud rule may target. */
export type CloudCollection = {
  [K in CloudEvidenceCollection]: (typeof CLOUD_COLLECTIONS)[K] extends { target: true } ? K : never;
}[CloudEvidenceCollection];

type Target = Extract<Collection, { target: true }>;
export const targetOf = (c: CloudCollection): Target => CLOUD_COLLECTIONS[c] as Target;

/** The collections a rule may target, by name. */
export const CLOUD_TARGETS = Object.fromEntries(
  Object.entries(CLOUD_COLLECTIONS).filter(([, v]) => 'target' in v && v.target),
) as unknown as { [K in CloudCollection]: Target & { kind: (typeof CLOUD_COLLECTIONS)[K]['kind'] } };

/** Every collection, by name (the evidence a rule may read). */
export const CLOUD_EVIDENCE: Readonly<Record<CloudEvidenceCollection, Collection>> = CLOUD_COLLECTIONS;

/**
 * One write of a port at a time in this process. Neutron checks If-Match before its update
 * commits: two writes of one port on the same revision at the same moment can both answer
 * 200, the later undoing the earlier (seen on the real Neutron: two groups taken off one
 * node port at once, one of them put back). A run's own writes of a port therefore queue;
 * each still carries its If-Match (decision 0013).
 */
const portWrites = new Map<string, Promise<unknown>>();
export async function onePortAtATime<T>(id: string, work: () => Promise<T>): Promise<T> {
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
