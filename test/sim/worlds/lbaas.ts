/**
 * A simulated ch-k8s-lbaas cluster: users create and delete managed
 * LoadBalancer Services; the controller places each one (a while without a
 * port annotation), re-using a free tagged port or creating one with its FIP,
 * annotates the Service and writes its ingress IP; on deletion it removes the
 * port (or, down or restarting, does not). Neutron is in memory.
 *
 * The controller runs as the Deployment `kube-system/ch-k8s-lbaas-controller`: up, it
 * wants one replica and has a pod; down, it is scaled to 0 with no pod. While it runs,
 * every free tagged port is in its memory and may be handed to a Service with nothing
 * written anywhere: deleting one then is a violation (law 13). At the quiet end the
 * operator's procedure runs: every Service placed, then the controller scaled to 0.
 */
import { MANAGED_ANNOTATION, MANAGED_TAG, PORT_ANNOTATION } from '../../../functions/lbaas-ports/index.ts';
import type { KubeObject } from '../../../shared/kube/resources.ts';
import { DEPLOYMENTS, PODS, SERVICES } from '../../../shared/kube/resources.ts';
import type { Filters, FloatingIp, NeutronDelete, Port } from '../../../shared/openstack/neutron.ts';
import type { World } from '../harness.ts';
import type { Rng } from '../rng.ts';
import { SimKube } from '../simkube.ts';

const NS = 'default';
const CONTROLLER_NS = 'kube-system';
const CONTROLLER = 'ch-k8s-lbaas-controller';

export class SimNeutron {
  readonly ports = new Map<string, Port>();
  readonly fips = new Map<string, FloatingIp>();
  onDeletePort: (p: Port) => void = () => {};
  beforeList: () => void = () => {};
  faultRate = 0;
  rng: () => number = Math.random;
  private fault(what: string) {
    if (this.faultRate && this.rng() < this.faultRate) throw new Error(`${what}: 503 simulated fault`);
  }
  async supports(): Promise<boolean> {
    return true;
  }
  async listPorts(f: Filters) {
    this.beforeList();
    this.fault('list ports');
    return {
      items: [...this.ports.values()]
        .filter(
          (p) =>
            (f.tags ?? []).every((t) => p.tags?.includes(t)) &&
            (!f.project_id || p.project_id === f.project_id),
        )
        .map((p) => ({ ...p })),
      pages: 1,
    };
  }
  async listFloatingIps(f: Filters) {
    this.fault('list floatingips');
    return {
      items: [...this.fips.values()]
        .filter((p) => (f.tags ?? []).every((t) => p.tags?.includes(t)))
        .map((p) => ({ ...p })),
      pages: 1,
    };
  }
  async listSecurityGroups() {
    return { items: [], pages: 1 };
  }
  async getSecurityGroup() {
    return undefined;
  }
  async getPort(id: string) {
    this.fault('get port');
    const p = this.ports.get(id);
    return p ? { ...p } : undefined;
  }
  async getFloatingIp(id: string) {
    const f = this.fips.get(id);
    return f ? { ...f } : undefined;
  }
  async deletePort(id: string, rev?: number): Promise<NeutronDelete> {
    const p = this.ports.get(id);
    if (!p) return 'gone';
    if (rev !== undefined && rev !== p.revision_number) return 'conflict';
    this.onDeletePort(p);
    this.ports.delete(id);
    // As Neutron does: a deleted port's floating IP is disassociated (a new revision).
    for (const f of this.fips.values())
      if (f.port_id === id)
        this.fips.set(f.id, { ...f, port_id: null, revision_number: (f.revision_number ?? 0) + 1 });
    return 'deleted';
  }
  async deleteFloatingIp(id: string, rev?: number): Promise<NeutronDelete> {
    const f = this.fips.get(id);
    if (!f) return 'gone';
    if (rev !== undefined && rev !== f.revision_number) return 'conflict';
    this.fips.delete(id);
    return 'deleted';
  }
}

export class LbaasWorld implements World {
  readonly kube: SimKube;
  readonly neutron = new SimNeutron();
  readonly violations: string[] = [];
  /** Ports the controller has picked for a Service it has not annotated yet. */
  readonly placing = new Map<string, string>();
  private pending: { at: number; run: () => void }[] = [];
  private seq = 0;
  private interleave: (() => void) | undefined;
  private down = false;
  get controllerDown(): boolean {
    return this.down;
  }
  /** Up: its Deployment wants one replica and has a pod; down: scaled to 0, no pod. */
  set controllerDown(v: boolean) {
    this.down = v;
    this.syncController();
  }

  private syncController(): void {
    const store = this.kube.store;
    const d = store.tryGet(DEPLOYMENTS, CONTROLLER_NS, CONTROLLER);
    const spec = { replicas: this.down ? 0 : 1, selector: { matchLabels: { app: CONTROLLER } } };
    if (!d)
      store.create(DEPLOYMENTS, CONTROLLER_NS, {
        metadata: { name: CONTROLLER, namespace: CONTROLLER_NS },
        spec,
      });
    else store.mergePatch(DEPLOYMENTS, CONTROLLER_NS, CONTROLLER, { spec });
    const pod = store.tryGet(PODS, CONTROLLER_NS, `${CONTROLLER}-0`);
    if (this.down && pod) store.delete(PODS, CONTROLLER_NS, `${CONTROLLER}-0`, {});
    if (!this.down && !pod)
      store.create(PODS, CONTROLLER_NS, {
        metadata: { name: `${CONTROLLER}-0`, namespace: CONTROLLER_NS, labels: { app: CONTROLLER } },
      });
  }

  /** `scopeTag`: a further tag on every port the controller creates (a cluster-naming tag). */
  readonly scopeTag: string | undefined;
  constructor(clock: () => number, scopeTag?: string) {
    this.scopeTag = scopeTag;
    this.kube = new SimKube(clock);
    this.kube.beforeList = () => this.interleave?.();
    this.neutron.beforeList = () => this.interleave?.();
    this.neutron.onDeletePort = (p) => {
      const by = this.services().find((s) => s.metadata.annotations?.[PORT_ANNOTATION] === p.id);
      if (by) this.violations.push(`deleted port ${p.id} of Service ${by.metadata.name}`);
      const placing = [...this.placing].find(
        ([svc, port]) => port === p.id && this.kube.store.tryGet(SERVICES, NS, svc),
      );
      if (placing)
        this.violations.push(`deleted port ${p.id} the controller is placing Service ${placing[0]} on`);
      // Free in the memory of a running controller: it may hand it out with nothing written.
      if (!this.down && !by && !placing)
        this.violations.push(`deleted port ${p.id} while the controller runs and holds it as free`);
    };
    this.syncController();
  }

  setInterleave(f: (() => void) | undefined, _onWrite?: (() => void) | undefined): void {
    this.interleave = f;
  }
  setFaults(rate: number, rng: Rng): void {
    this.kube.faultRate = rate;
    this.kube.rng = () => rng.next();
    this.neutron.faultRate = rate;
    this.neutron.rng = () => rng.next();
  }

  services(): KubeObject[] {
    return this.kube.store.list(SERVICES, NS) as KubeObject[];
  }

  private newPort(): Port {
    const n = ++this.seq;
    const port: Port = {
      id: `port-${String(n).padStart(4, '0')}`,
      project_id: 'p',
      tags: [MANAGED_TAG, ...(this.scopeTag ? [this.scopeTag] : [])],
      fixed_ips: [{ ip_address: `10.0.0.${n % 250}` }],
      revision_number: 1,
      device_id: '',
    };
    this.neutron.ports.set(port.id, port);
    this.neutron.fips.set(`fip-${n}`, {
      id: `fip-${n}`,
      floating_ip_address: `203.0.113.${n % 250}`,
      port_id: port.id,
      tags: [MANAGED_TAG],
      revision_number: 1,
      project_id: 'p',
    });
    return port;
  }

  createService(name: string, now: number, placeDelayMs: number): void {
    if (this.kube.store.tryGet(SERVICES, NS, name)) return;
    this.kube.store.create(SERVICES, NS, {
      metadata: { name, namespace: NS, annotations: { [MANAGED_ANNOTATION]: 'true' } },
      spec: { type: 'LoadBalancer' },
    });
    const place = () => {
      const svc = this.kube.store.tryGet(SERVICES, NS, name) as KubeObject | undefined;
      if (!svc || this.controllerDown) return;
      // re-use a free tagged port (one no Service names), or create one
      const named = new Set(this.services().map((s) => s.metadata.annotations?.[PORT_ANNOTATION]));
      const free = [...this.neutron.ports.values()].find(
        (p) => !named.has(p.id) && ![...this.placing.values()].includes(p.id),
      );
      const port = free ?? this.newPort();
      this.placing.set(name, port.id);
      this.pending.push({
        at: now + 60_000,
        run: () => {
          this.placing.delete(name);
          if (!this.kube.store.tryGet(SERVICES, NS, name)) return;
          this.kube.store.mergePatch(SERVICES, NS, name, {
            metadata: { annotations: { [PORT_ANNOTATION]: port.id } },
          });
        },
      });
    };
    if (placeDelayMs === 0) place();
    else this.pending.push({ at: now + placeDelayMs, run: place });
  }

  deleteService(name: string): void {
    const svc = this.kube.store.tryGet(SERVICES, NS, name) as KubeObject | undefined;
    if (!svc) return;
    this.kube.store.delete(SERVICES, NS, name, {});
    this.placing.delete(name); // a placement in progress for a deleted Service is abandoned
    const portId = svc.metadata.annotations?.[PORT_ANNOTATION];
    if (portId && !this.controllerDown) {
      for (const [id, f] of this.neutron.fips) if (f.port_id === portId) this.neutron.fips.delete(id);
      this.neutron.ports.delete(portId);
    }
  }

  tick(now: number): void {
    const due = this.pending.filter((p) => p.at <= now);
    this.pending = this.pending.filter((p) => p.at > now);
    for (const p of due) p.run();
  }

  settle(): void {
    this.controllerDown = false;
    for (let i = 0; i < 10 && this.pending.length; i++) {
      const all = this.pending;
      this.pending = [];
      for (const p of all) p.run();
    }
    // The controller is back: Services it never placed get a port now.
    for (const s of this.services()) {
      if (s.metadata.annotations?.[PORT_ANNOTATION]) continue;
      const named = new Set(this.services().map((x) => x.metadata.annotations?.[PORT_ANNOTATION]));
      const port = [...this.neutron.ports.values()].find((p) => !named.has(p.id)) ?? this.newPort();
      this.kube.store.mergePatch(SERVICES, NS, s.metadata.name, {
        metadata: { annotations: { [PORT_ANNOTATION]: port.id } },
      });
    }
    this.placing.clear();
    // The operator's procedure: with every Service placed, the controller is scaled to 0
    // so that what it leaked can be reclaimed.
    this.controllerDown = true;
  }

  step(rng: Rng, now: number): void {
    const r = rng.next();
    if (r < 0.4) this.createService(`svc-${rng.int(0, 9)}`, now, rng.pick([0, 60_000, 120_000]));
    else if (r < 0.7) {
      const s = this.services();
      if (s.length) this.deleteService(rng.pick(s).metadata.name);
    } else if (r < 0.8) this.controllerDown = !this.controllerDown; // crash, restart
  }

  orphans(): Map<string, string> {
    const named = new Set(this.services().map((s) => s.metadata.annotations?.[PORT_ANNOTATION]));
    const placing = new Set(this.placing.values());
    const out = new Map<string, string>();
    for (const p of this.neutron.ports.values())
      if (!named.has(p.id) && !placing.has(p.id)) out.set(p.id, 'Port');
    return out;
  }
}
