/**
 * A stand-in for the ch-k8s-lbaas controller, written as the real one behaves (its source at
 * 7dba249a, run against Neutron; `apis.md`, incidents 20 and 22), for worlds on the fake or
 * the real API servers:
 * - it runs as one replica of a Deployment (here: the Deployment and a pod of it, written to
 *   the API server, since no kubelet runs it), without leader election;
 * - at start it loads every tagged port of its project as free, and keeps the list in memory;
 * - it takes every Service of type LoadBalancer whose `managed` annotation is absent or not
 *   "false", gives it a free port from memory with **no write to Neutron**, writes
 *   `managed: "true"`, then 10-40 ms later the `inbound-port` annotation, then the ingress;
 * - Services whose service ports do not collide may share a port;
 * - a port deleted under it stays free in its memory: the next Service given it fails
 *   (`PortNotFound`) and is moved to another port.
 */

import { MANAGED_ANNOTATION, MANAGED_TAG, PORT_ANNOTATION } from '../../../functions/lbaas-ports/model.ts';
import type { KubeClient } from '../../kube/ports.ts';
import { DEPLOYMENTS, type KubeObject, PODS, SERVICES } from '../../kube/resources.ts';
import type { FloatingIp, NeutronReader, Port } from '../../openstack/neutron.ts';
import { setIngress } from './lbaas.ts';

export const CONTROLLER_LABEL = { app: 'ch-k8s-lbaas-controller' } as const;

/** The controller's Deployment as the upstream quickstart names it, at `replicas` (a real API server validates its template). */
export function controllerDeployment(
  namespace = 'kube-system',
  replicas = 0,
  name = 'ch-k8s-lbaas-controller',
) {
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name, namespace },
    spec: {
      replicas,
      selector: { matchLabels: { ...CONTROLLER_LABEL } },
      template: {
        metadata: { labels: { ...CONTROLLER_LABEL } },
        spec: {
          containers: [{ name: 'controller', image: 'ghcr.io/cloudandheat/ch-k8s-lbaas/controller:0.5.0' }],
        },
      },
    },
  };
}

type Held = { port: Port; fip?: FloatingIp | undefined; servicePorts: Set<string> };

export type StandInOptions = Readonly<{
  kube: KubeClient;
  neutron: Pick<NeutronReader, 'listPorts' | 'listFloatingIps' | 'getPort'>;
  projectId: string;
  /** Where its Deployment lives (the twopass setting `controller: { namespace, deployment }`). */
  namespace: string;
  deployment?: string;
  /** Between `managed: "true"` and the port annotation (the real one: 10-40 ms). */
  annotateDelayMs?: number;
}>;

export class StandInController {
  readonly name: string;
  /** Ports it holds, by id: free ones have no Service. */
  private readonly ports = new Map<string, Held>();
  /** Which port each Service (ns/name) was given. */
  readonly given = new Map<string, string>();
  /** Hand-overs that failed because the port was gone (PortNotFound), and where the Service went. */
  readonly failures: { service: string; port: string }[] = [];
  running = false;
  private readonly o: StandInOptions;

  constructor(o: StandInOptions) {
    this.o = o;
    this.name = o.deployment ?? 'ch-k8s-lbaas-controller';
  }

  /** The setting that names it, for twopass' configuration. */
  get setting(): { namespace: string; deployment: string } {
    return { namespace: this.o.namespace, deployment: this.name };
  }

  private async deployment(): Promise<KubeObject | undefined> {
    return this.o.kube.get(DEPLOYMENTS, this.o.namespace, this.name);
  }

  private async scale(replicas: number): Promise<void> {
    const d = await this.deployment();
    if (!d)
      await this.o.kube.create(DEPLOYMENTS, controllerDeployment(this.o.namespace, replicas, this.name));
    else await this.o.kube.replace(DEPLOYMENTS, { ...d, spec: { ...(d.spec as object), replicas } });
  }

  /** Its Deployment at 1 with a pod, and its free list loaded from Neutron, as at every start. */
  async start(): Promise<void> {
    await this.scale(1);
    await this.o.kube.create(PODS, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: {
        generateName: `${this.name}-`,
        namespace: this.o.namespace,
        labels: { ...CONTROLLER_LABEL },
      },
      spec: {
        containers: [{ name: 'controller', image: 'ghcr.io/cloudandheat/ch-k8s-lbaas/controller:0.5.0' }],
      },
    });
    await this.load();
    this.running = true;
  }

  /** Every tagged port of the project, as free unless a Service names it. */
  private async load(): Promise<void> {
    this.ports.clear();
    this.given.clear();
    const ports = await this.o.neutron.listPorts({ tags: [MANAGED_TAG], project_id: this.o.projectId });
    const fips = await this.o.neutron.listFloatingIps({ tags: [MANAGED_TAG], project_id: this.o.projectId });
    for (const p of ports.items)
      this.ports.set(p.id, {
        port: p,
        fip: fips.items.find((f) => f.port_id === p.id),
        servicePorts: new Set(),
      });
    for (const s of (await this.o.kube.listAll(SERVICES)).items) {
      const id = s.metadata.annotations?.[PORT_ANNOTATION];
      const held = id ? this.ports.get(id) : undefined;
      if (!held) continue;
      this.given.set(`${s.metadata.namespace}/${s.metadata.name}`, id!);
      for (const sp of servicePortsOf(s)) held.servicePorts.add(sp);
    }
  }

  /** Scaled to 0 and its pods gone: its memory goes with it. */
  async stop(): Promise<void> {
    await this.scale(0);
    const pods = await this.o.kube.listAll(PODS, {
      namespace: this.o.namespace,
      labelSelector: `app=${CONTROLLER_LABEL.app}`,
    });
    for (const p of pods.items)
      await this.o.kube.delete(PODS, this.o.namespace, p.metadata.name, undefined, { gracePeriodSeconds: 0 });
    this.ports.clear();
    this.given.clear();
    this.running = false;
  }

  /** The ports it holds as free now (no Service was given them). */
  free(): string[] {
    return [...this.ports.values()].filter((h) => h.servicePorts.size === 0).map((h) => h.port.id);
  }

  /**
   * Takes a Service as the controller does: a port from memory (a free one, or one whose
   * Services' ports do not collide when `share`), nothing written to Neutron; `managed`
   * first, the port annotation a moment later, then the ingress. A port that is gone
   * (deleted under it) fails the hand-over: the Service is moved to the next port.
   */
  async place(ns: string, name: string, opts: { share?: boolean } = {}): Promise<string | undefined> {
    if (!this.running) throw new Error('the stand-in controller is not running');
    const svc = await this.o.kube.get(SERVICES, ns, name);
    if (!svc || (svc.spec as { type?: string }).type !== 'LoadBalancer') return undefined;
    if (svc.metadata.annotations?.[MANAGED_ANNOTATION] === 'false') return undefined;
    const wanted = servicePortsOf(svc);
    const candidates = [...this.ports.values()].filter((h) =>
      opts.share ? wanted.every((p) => !h.servicePorts.has(p)) : h.servicePorts.size === 0,
    );
    await this.o.kube.mergePatch(SERVICES, ns, name, {
      metadata: { annotations: { [MANAGED_ANNOTATION]: 'true' } },
    });
    for (const h of candidates) {
      // The agent's configuration would now be pushed; the port is only then found missing.
      const alive = await this.o.neutron.getPort(h.port.id);
      if (!alive) {
        this.failures.push({ service: `${ns}/${name}`, port: h.port.id });
        this.ports.delete(h.port.id);
        continue;
      }
      for (const p of wanted) h.servicePorts.add(p);
      this.given.set(`${ns}/${name}`, h.port.id);
      await new Promise((r) => setTimeout(r, this.o.annotateDelayMs ?? 20));
      await this.o.kube.mergePatch(SERVICES, ns, name, {
        metadata: { annotations: { [PORT_ANNOTATION]: h.port.id } },
      });
      const ip = h.fip?.floating_ip_address ?? h.port.fixed_ips?.[0]?.ip_address;
      if (ip) await setIngress(this.o.kube, ns, name, ip);
      return h.port.id;
    }
    return undefined;
  }

  /**
   * Hands a free port to a Service in memory only: the moment the real controller has
   * chosen a port and written nothing yet (no annotation, no Neutron write).
   */
  chooseInMemory(service: string): string | undefined {
    const h = [...this.ports.values()].find((x) => x.servicePorts.size === 0);
    if (!h) return undefined;
    h.servicePorts.add(`${service}:chosen`);
    this.given.set(service, h.port.id);
    return h.port.id;
  }
}

function servicePortsOf(svc: KubeObject): string[] {
  const ports = (
    (svc.spec as { ports?: { port?: number; protocol?: string }[] } | undefined)?.ports ?? []
  ).map((p) => `${p.protocol ?? 'TCP'}/${p.port}`);
  return ports.length ? ports : ['TCP/0'];
}
