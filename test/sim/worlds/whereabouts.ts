/**
 * A simulated whereabouts cluster: one IPPool; CNI ADD allocates (offset,
 * container id, podref) at once and the pod's network-status annotation
 * follows 0-3 minutes later; CNI DEL removes the allocation (or never runs);
 * StatefulSet pods come back under the same name with a new container and, as
 * whereabouts v0.9 does (an allocation of the same podref and interface is the pod's),
 * take over the allocation their predecessor left: same address, new container id.
 */
import { IPPOOLS, NETWORK_STATUS } from '../../../functions/whereabouts-ips/model.ts';
import type { KubeObject } from '../../../shared/kube/resources.ts';
import { PODS } from '../../../shared/kube/resources.ts';
import { formatAddress, parseCidr } from '../../../shared/net/ip.ts';
import type { World } from '../harness.ts';
import type { Rng } from '../rng.ts';
import type { WriteEvent } from '../simkube.ts';
import { SimKubeWorld } from './base.ts';

const NS = 'default';
const CIDR = parseCidr('10.30.0.0/26')!;
type Alloc = { id: string; podref: string; ifname?: string };

export class WhereaboutsWorld extends SimKubeWorld implements World {
  /** container id -> pod uid, for every container whose CNI ADD ran. */
  readonly containers = new Map<string, string>();
  private pending: { at: number; run: () => void }[] = [];
  private seq = 0;

  constructor(clock: () => number) {
    super(clock);
    this.kube.store.register(IPPOOLS);
    this.kube.store.create(IPPOOLS, NS, {
      metadata: { name: 'pool', namespace: NS },
      spec: { range: CIDR.text, allocations: {} },
    });
  }

  allocs(): Record<string, Alloc> {
    return (
      (this.kube.store.get(IPPOOLS, NS, 'pool') as KubeObject).spec as { allocations: Record<string, Alloc> }
    ).allocations;
  }

  private writeAllocs(a: Record<string, Alloc>): void {
    const pool = this.kube.store.get(IPPOOLS, NS, 'pool') as KubeObject;
    this.kube.store.update(IPPOOLS, NS, 'pool', {
      ...pool,
      spec: { ...(pool.spec as object), allocations: a },
    });
  }

  pods(): KubeObject[] {
    return this.kube.store.list(PODS, NS) as KubeObject[];
  }

  createPod(name: string, now: number, statusDelayMs: number): void {
    if (this.kube.store.tryGet(PODS, NS, name)) return;
    const pod = this.kube.store.create(PODS, NS, {
      metadata: { name, namespace: NS },
      spec: { containers: [{ name: 'c', image: 'x' }] },
    }) as KubeObject;
    const a = this.allocs();
    const podref = `${NS}/${name}`;
    let off = Number(
      Object.entries(a).find(([, x]) => x.podref === podref && x.ifname === 'net1')?.[0] ?? -1,
    );
    for (let i = 1; off < 0 && i < 63; i++) if (!Object.hasOwn(a, String(i))) off = i;
    if (off < 0) return;
    const id = `c${++this.seq}`;
    this.containers.set(id, pod.metadata.uid);
    this.writeAllocs({ ...a, [String(off)]: { id, podref, ifname: 'net1' } });
    const ip = formatAddress(4, CIDR.network + BigInt(off));
    const annotate = () => {
      const cur = this.kube.store.tryGet(PODS, NS, name) as KubeObject | undefined;
      if (!cur || cur.metadata.uid !== pod.metadata.uid) return;
      this.kube.store.mergePatch(PODS, NS, name, {
        metadata: {
          annotations: { [NETWORK_STATUS]: JSON.stringify([{ name: 'net', interface: 'net1', ips: [ip] }]) },
        },
      });
    };
    if (statusDelayMs === 0) annotate();
    else this.pending.push({ at: now + statusDelayMs, run: annotate });
  }

  deletePod(name: string, now: number, skipDel: boolean, rng: Rng): void {
    const pod = this.kube.store.tryGet(PODS, NS, name) as KubeObject | undefined;
    if (!pod) return;
    this.kube.store.delete(PODS, NS, name, { gracePeriodSeconds: 0 });
    if (skipDel) return;
    this.pending.push({
      at: now + rng.int(0, 2) * 60_000,
      run: () => {
        const a = { ...this.allocs() };
        for (const [off, x] of Object.entries(a))
          if (this.containers.get(x.id) === pod.metadata.uid) delete a[off];
        this.writeAllocs(a);
      },
    });
  }

  tick(now: number): void {
    const due = this.pending.filter((p) => p.at <= now);
    this.pending = this.pending.filter((p) => p.at > now);
    for (const p of due) p.run();
  }

  settle(): void {
    for (let i = 0; i < 10 && this.pending.length; i++) {
      const all = this.pending;
      this.pending = [];
      for (const p of all) p.run();
    }
  }

  step(rng: Rng, now: number): void {
    const r = rng.next();
    const sts = `db-${rng.int(0, 4)}`;
    if (r < 0.4)
      this.createPod(
        rng.chance(0.6) ? sts : `web-${++this.seq}`,
        now,
        rng.pick([0, 0, 60_000, 120_000, 180_000]),
      );
    else if (r < 0.7) {
      const pods = this.pods();
      if (pods.length) this.deletePod(rng.pick(pods).metadata.name, now, rng.chance(0.4), rng);
    } else if (r < 0.9) {
      // node lost: force deletion without CNI DEL; the StatefulSet re-creates the pod under the same name
      const pods = this.pods().filter((p) => p.metadata.name.startsWith('db-'));
      if (!pods.length) return;
      const v = rng.pick(pods);
      this.deletePod(v.metadata.name, now, true, rng);
      this.pending.push({
        at: now + rng.int(0, 2) * 60_000,
        run: () => this.createPod(v.metadata.name, now, rng.pick([0, 60_000, 180_000])),
      });
    }
  }

  private liveOwner(a: Alloc): string | undefined {
    const uid = this.containers.get(a.id);
    return uid && this.pods().some((p) => p.metadata.uid === uid) ? uid : undefined;
  }

  protected check(e: WriteEvent): void {
    if (e.kind !== 'update' || e.ref.plural !== 'ippools') return;
    const before = (e.before.spec as { allocations: Record<string, Alloc> }).allocations;
    const after = (e.after.spec as { allocations: Record<string, Alloc> }).allocations;
    for (const [off, a] of Object.entries(before)) {
      if (Object.hasOwn(after, off) && after[off]!.id === a.id) continue;
      if (this.liveOwner(a))
        this.violations.push(`removed allocation ${off} (${a.id}) of live pod ${a.podref}`);
    }
  }

  orphans(): Map<string, string> {
    const out = new Map<string, string>();
    for (const [off, a] of Object.entries(this.allocs()))
      if (!this.liveOwner(a)) out.set(`${off}/${a.id}`, 'IPPoolAllocation');
    return out;
  }
}
