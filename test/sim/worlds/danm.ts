/**
 * A simulated DANM cluster: a DanmNet, pods that come and go (StatefulSet pods
 * re-created under the same name), the CNI plugin as real DANM v4.3.0 behaves
 * (producers.md): ADD sets the bit first-fit, then writes the DanmEp after a delay;
 * DEL clears the bit first, then removes the DanmEp (sometimes it never runs); every
 * network write a full PUT on the resourceVersion read; an ADD
 * that times out leaves its bit for good (the retry takes another address); a node
 * back without containerd's state re-ADDs its pods under the same UIDs (DANM deletes
 * their old DanmEps itself, bit first). DanmEps are named by UUIDs equal to EndpointID,
 * carry the pod's labels and the machine's hostname. Node loss with force deletion,
 * long Terminating. The invariant checker sees every write the cleaner makes.
 *
 * The network is one of four layouts (by seed): DanmNet `net` that pods name
 * explicitly, or the namespace's default network as a DanmNet, a TenantNetwork or a
 * ClusterNetwork `default`, which pods reach with no `danm.k8s.io/interfaces`
 * annotation, with `[]`, or by naming it.
 */
import { Bitmap } from '../../../functions/danm-endpoints/bitmap.ts';
import type { NetworkType } from '../../../functions/danm-endpoints/model.ts';
import { MINUTE as MIN } from '../../../shared/contract/index.ts';
import type { KubeObject } from '../../../shared/kube/resources.ts';
import { PODS } from '../../../shared/kube/resources.ts';
import { formatAddress, parseAddress, parseCidr } from '../../../shared/net/ip.ts';
import { R } from '../../../shared/sandbox/scenarios/danm.ts';
import type { World } from '../harness.ts';
import type { Rng } from '../rng.ts';
import { SimKubeWorld } from './base.ts';

const NS = 'default';
const CIDR = parseCidr('10.20.0.0/26')!;
type Pending = { at: number; run: () => void };

export type DanmLayout = Readonly<{ kind: NetworkType; name: string }>;
export const DANM_LAYOUTS: readonly DanmLayout[] = [
  { kind: 'DanmNet', name: 'net' },
  { kind: 'DanmNet', name: 'default' },
  { kind: 'TenantNetwork', name: 'default' },
  { kind: 'ClusterNetwork', name: 'default' },
];

/** How a pod asks for its network: by name, or (on a default network) by no annotation or `[]`. */
export type Ask = 'named' | 'none' | 'empty';
const REQUEST_KEY: Record<NetworkType, string> = {
  DanmNet: 'network',
  TenantNetwork: 'tenantNetwork',
  ClusterNetwork: 'clusterNetwork',
};

export class DanmWorld extends SimKubeWorld implements World {
  /** address index -> pod uid of a CNI ADD in flight (bit set, DanmEp not yet written). */
  readonly inflight = new Map<number, string>();
  /** Every bit a cleaner cleared while an ADD was in flight on it, and whose ADD (pod UID). */
  readonly clearedInflight: { index: number; owner: string }[] = [];
  /** Bits a cleaner cleared. */
  reclaimedBits = 0;
  /** A script's pod of interest (its UID). */
  ghost: string | undefined;
  private pending: Pending[] = [];
  private seq = 0;
  private stsNames = ['ss-0', 'ss-1', 'ss-2', 'ss-3', 'ss-4'];
  /** Pods listed by the fault "evidence lister broke": when set, pod lists come back empty. */
  brokenPodLister = false;
  /** The clock at each list of pods (evidence reads, in the observation and the act phase). */
  readonly podLists: number[] = [];
  /** When a script let the evidence age mid-run. */
  aged: number | undefined;
  /** CNI ADDs in flight, by id: the pod UID each is for. */
  private readonly adds = new Map<number, string>();
  private addSeq = 0;
  /** The kubelet gives up on a pod's ADDs in flight: their bits stay set, their DanmEps never come. */
  private giveUp(uid: string): void {
    for (const [add, owner] of this.adds) if (owner === uid) this.adds.delete(add);
    for (const [i, owner] of this.inflight) if (owner === uid) this.inflight.delete(i);
  }
  /** The address index of each DanmEp a cleaner deleted, by pod name. */
  private readonly deletedAddress = new Map<string, number>();

  readonly layout: DanmLayout;
  private readonly ref: (typeof R)[NetworkType];
  private readonly netNs: string | undefined;

  constructor(clock: () => number, layout: DanmLayout = DANM_LAYOUTS[0]!) {
    super(clock);
    this.layout = layout;
    this.ref = R[layout.kind];
    this.netNs = layout.kind === 'ClusterNetwork' ? undefined : NS;
    const s = this.kube.store;
    s.register(R.danmeps);
    s.register(R.DanmNet);
    s.register(R.TenantNetwork);
    s.register(R.ClusterNetwork);
    s.create(this.ref, this.netNs, {
      metadata: { name: layout.name, ...(this.netNs ? { namespace: this.netNs } : {}) },
      spec: {
        NetworkID: layout.name,
        Options: { cidr: CIDR.text, alloc: Bitmap.empty(CIDR).with(0, true).with(63, true).encode() },
      },
    });
    const orig = this.kube.listAll.bind(this.kube);
    this.kube.listAll = async (ref, o) => {
      if (ref.plural === 'pods') this.podLists.push(clock());
      const r = await orig(ref, o);
      return ref.plural === 'pods' && this.brokenPodLister ? { ...r, items: [] } : r;
    };
  }

  // ---- world state ----

  net(): KubeObject {
    return this.kube.store.get(this.ref, this.netNs, this.layout.name) as KubeObject;
  }

  bitmap(): Bitmap {
    return Bitmap.decode((this.net().spec as { Options: { alloc: string } }).Options.alloc, CIDR) as Bitmap;
  }

  markAged(now: number): void {
    this.aged = now;
  }

  /** The address index of the last DanmEp of pod `name` a cleaner deleted. */
  lastDeletedAddress(name: string): number | undefined {
    return this.deletedAddress.get(name);
  }

  /** Someone else (an operator, another tool) clears address bit i. */
  freeAddress(i: number): void {
    this.writeBit(i, false);
  }

  /**
   * One network write as DANM makes it: the whole network PUT on the resourceVersion just read
   * (the store refuses a stale one; here nothing can write between the read and the PUT).
   */
  private writeBit(i: number, value: boolean): void {
    const net = this.net();
    const spec = net.spec as { Options: Record<string, unknown> };
    const alloc = Bitmap.decode(String(spec.Options.alloc), CIDR) as Bitmap;
    const lastIp = value
      ? {
          allocation_pool: {
            ...(spec.Options.allocation_pool as object),
            lastIp: `${formatAddress(4, CIDR.network + BigInt(i))}/26`,
          },
        }
      : {};
    this.kube.store.update(this.ref, this.netNs, this.layout.name, {
      ...net,
      spec: { ...spec, Options: { ...spec.Options, alloc: alloc.with(i, value).encode(), ...lastIp } },
    });
  }

  /** First-fit from the pool's start, as DANM allocates (it cannot parse the lastIp it wrote). */
  private firstFree(): number {
    const bm = this.bitmap();
    for (let i = 1; i < 63; i++) if (!bm.isSet(i)) return i;
    return -1;
  }

  /** A name as DANM gives a DanmEp (a UUID; deterministic here, so that a seed replays). */
  private endpointId(): string {
    return `00000000-0000-4000-8000-${(++this.seq).toString(16).padStart(12, '0')}`;
  }

  pods(): KubeObject[] {
    return this.kube.store.list(PODS, NS) as KubeObject[];
  }

  eps(): KubeObject[] {
    return this.kube.store.list(R.danmeps, NS) as KubeObject[];
  }

  private epIndex(ep: KubeObject): number | undefined {
    const a = parseAddress(
      String((ep.spec as { Interface: { Address: string } }).Interface.Address).split('/')[0]!,
    );
    return a ? Number(a.value - CIDR.network) : undefined;
  }

  // ---- events ----

  createPod(
    name: string,
    now: number,
    addDelayMs: number,
    /** `legs: 2`: two interfaces on the network (named only), eth1's CNI ADD `eth1DelayMs` after eth0's. */
    opts: { nodeName?: string; ask?: Ask; legs?: 1 | 2; eth1DelayMs?: number } = {},
  ): KubeObject | undefined {
    if (this.kube.store.tryGet(PODS, NS, name)) return undefined;
    // Only a network named `default` is reached without naming it.
    const ask = this.layout.name === 'default' ? (opts.ask ?? 'none') : 'named';
    const legs = ask === 'named' ? (opts.legs ?? 1) : 1;
    const interfaces =
      ask === 'named'
        ? JSON.stringify(
            Array.from({ length: legs }, () => ({ [REQUEST_KEY[this.layout.kind]]: this.layout.name })),
          )
        : ask === 'empty'
          ? '[]'
          : undefined;
    const pod = this.kube.store.create(PODS, NS, {
      metadata: {
        name,
        namespace: NS,
        labels: { app: name.replace(/-\d+$/, '') },
        ...(interfaces !== undefined ? { annotations: { 'danm.k8s.io/interfaces': interfaces } } : {}),
      },
      spec: {
        containers: [{ name: 'c', image: 'x' }],
        ...(opts.nodeName ? { nodeName: opts.nodeName } : {}),
      },
    }) as KubeObject;
    // CNI ADD, one per interface: the bit first, the DanmEp later.
    for (let leg = 0; leg < legs; leg++) {
      const delay = addDelayMs + (leg === 0 ? 0 : (opts.eth1DelayMs ?? MIN));
      // pool exhausted: DANM's ADD fails writing nothing, and the kubelet tries again every minute
      if (!this.cniAdd(pod, `eth${leg}`, now, delay)) this.retryAdd(pod, `eth${leg}`, now + MIN);
    }
    return pod;
  }

  /** One CNI ADD of an interface: the bit (first-fit), then the DanmEp `delayMs` later. False: the pool is exhausted. */
  private cniAdd(pod: KubeObject, iface: string, now: number, delayMs: number): boolean {
    const idx = this.firstFree();
    if (idx < 0) return false;
    this.writeBit(idx, true);
    this.inflight.set(idx, pod.metadata.uid);
    const add = ++this.addSeq;
    this.adds.set(add, pod.metadata.uid);
    const finish = () => {
      // an ADD the kubelet gave up on (timed out, or the pod re-ADDed under its UID) writes nothing
      if (!this.adds.delete(add)) return;
      if (this.inflight.get(idx) === pod.metadata.uid) this.inflight.delete(idx);
      const id = this.endpointId();
      this.kube.store.create(R.danmeps, NS, {
        metadata: { name: id, namespace: NS, labels: { ...(pod.metadata.labels as Record<string, string>) } },
        spec: {
          EndpointID: id,
          NetworkName: this.layout.name,
          NetworkType: 'ipvlan',
          apiType: this.layout.kind,
          Pod: pod.metadata.name,
          PodUID: pod.metadata.uid,
          Host: 'sim-machine-7',
          CID: `${this.seq.toString(16).padStart(8, '0')}${'c'.repeat(56)}`,
          netns: `/var/run/netns/cni-${id}`,
          Interface: {
            Name: iface,
            Address: `${formatAddress(4, CIDR.network + BigInt(idx))}/26`,
            AddressIPv6: '',
            MacAddress: '',
            proutes: null,
            proutes6: null,
          },
        },
      });
    };
    if (delayMs === 0)
      finish(); // a fast CNI ADD: done before anything else happens
    else this.later(now + delayMs, finish);
    return true;
  }

  /** The kubelet's next try of an ADD that found no free address, while the pod lives. */
  private retryAdd(pod: KubeObject, iface: string, at: number): void {
    this.later(at, () => {
      const cur = this.kube.store.tryGet(PODS, NS, pod.metadata.name) as KubeObject | undefined;
      if (cur?.metadata.uid !== pod.metadata.uid) return;
      if (!this.cniAdd(pod, iface, at, 0)) this.retryAdd(pod, iface, at + MIN);
    });
  }

  /** Sets every free bit of the pool, as leaks do over time (ADDs abandoned on dead nodes). */
  exhaust(): void {
    for (let i = this.firstFree(); i >= 0; i = this.firstFree()) this.writeBit(i, true);
  }

  /**
   * An ADD the kubelet gave up on (after about 31 s) between the bit and the DanmEp: the bit
   * stays set for good (DEL looks the DanmEp up by sandbox id, finds none, frees nothing), and
   * the retried ADD takes another address.
   */
  timedOutAdd(name: string, now: number, rng: Rng): void {
    // the first ADD never writes its DanmEp in time: in flight until the kubelet gives up
    const pod = this.createPod(name, now, 24 * 60 * MIN);
    if (!pod) return;
    const retryMs = rng.int(0, 2) * MIN;
    this.later(now + MIN, () => {
      this.giveUp(pod.metadata.uid);
      const cur = this.kube.store.tryGet(PODS, NS, pod.metadata.name) as KubeObject | undefined;
      if (cur?.metadata.uid === pod.metadata.uid && !cur.metadata.deletionTimestamp)
        this.cniAdd(pod, 'eth0', now + MIN, retryMs);
    });
  }

  /**
   * A node back without containerd's state: the kubelet ADDs its surviving pods again under the
   * same UIDs, and DANM's ADD deletes their old DanmEps itself (bit first) and gives new addresses.
   */
  reAddNode(nodeName: string, now: number, rng: Rng): void {
    for (const pod of this.pods()) {
      if ((pod.spec as { nodeName?: string }).nodeName !== nodeName || pod.metadata.deletionTimestamp)
        continue;
      this.cniDel(pod.metadata.uid);
      this.giveUp(pod.metadata.uid);
      // every interface the pod asks for, again
      const asked = pod.metadata.annotations?.['danm.k8s.io/interfaces'];
      const legs = asked ? Math.max(1, (JSON.parse(asked) as unknown[]).length) : 1;
      for (let leg = 0; leg < legs; leg++) this.cniAdd(pod, `eth${leg}`, now, rng.int(0, 2) * MIN);
    }
  }

  /** CNI DEL as DANM makes it: the bit first, then the DanmEp. */
  cniDel(podUid: string): void {
    for (const ep of this.eps()) {
      if ((ep.spec as { PodUID: string }).PodUID !== podUid) continue;
      const i = this.epIndex(ep);
      if (i !== undefined && this.bitmap().isSet(i)) this.writeBit(i, false);
      this.kube.store.delete(R.danmeps, NS, ep.metadata.name, {});
    }
  }

  deletePod(name: string, now: number, rng: Rng, opts: { force?: boolean; skipDel?: boolean } = {}): void {
    const pod = this.kube.store.tryGet(PODS, NS, name) as KubeObject | undefined;
    if (!pod) return;
    this.kube.store.delete(PODS, NS, name, { gracePeriodSeconds: opts.force ? 0 : undefined });
    const gone = () =>
      !this.kube.store.tryGet(PODS, NS, name) ||
      (this.kube.store.get(PODS, NS, name) as KubeObject).metadata.uid !== pod.metadata.uid;
    if (!gone()) {
      // Terminating (a scheduled pod): the kubelet finishes it later, with CNI DEL.
      this.later(now + rng.int(1, 60) * MIN, () => {
        const cur = this.kube.store.tryGet(PODS, NS, name) as KubeObject | undefined;
        if (cur && cur.metadata.uid === pod.metadata.uid) {
          this.kube.store.delete(PODS, NS, name, { gracePeriodSeconds: 0 });
          this.cniDel(pod.metadata.uid);
        }
      });
      return;
    }
    if (!opts.skipDel) this.later(now + rng.int(0, 2) * MIN, () => this.cniDel(pod.metadata.uid));
  }

  private later(at: number, run: () => void): void {
    this.pending.push({ at, run });
  }

  tick(now: number): void {
    const due = this.pending.filter((p) => p.at <= now);
    this.pending = this.pending.filter((p) => p.at > now);
    for (const p of due) p.run();
  }

  settle(now: number): void {
    for (let i = 0; i < 10 && this.pending.length; i++) {
      const all = this.pending;
      this.pending = [];
      for (const p of all) p.run();
    }
    void now;
  }

  step(rng: Rng, now: number): void {
    const r = rng.next();
    const sts = rng.pick(this.stsNames);
    if (r < 0.35) {
      // a pod starts (a StatefulSet pod, or a plain one); CNI ADD writes the DanmEp 0-3 min later
      const name = rng.chance(0.6) ? sts : `web-${++this.seq}`;
      const ask = rng.pick(['none', 'empty', 'named'] as const);
      this.createPod(name, now, rng.int(0, 3) * MIN, {
        ask,
        // a pod with two interfaces on the network: eth1's ADD 1-10 min after eth0's
        ...(rng.chance(0.25) ? { legs: 2 as const, eth1DelayMs: rng.int(1, 10) * MIN } : {}),
        ...(rng.chance(0.3) ? { nodeName: 'node-1' } : {}),
      });
    } else if (r < 0.6) {
      const pods = this.pods();
      if (pods.length) this.deletePod(rng.pick(pods).metadata.name, now, rng, { skipDel: rng.chance(0.3) });
    } else if (r < 0.8) {
      // node lost: force deletion without CNI DEL, and the StatefulSet re-creates the pod under the same name
      const pods = this.pods();
      if (!pods.length) return;
      const victim = rng.pick(pods);
      this.deletePod(victim.metadata.name, now, rng, { force: true, skipDel: true });
      if (victim.metadata.name.startsWith('ss-'))
        this.later(now + rng.int(0, 2) * MIN, () =>
          this.createPod(victim.metadata.name, now, rng.int(0, 3) * MIN),
        );
    } else if (r < 0.85) {
      // a pod deleted while its CNI ADD is in flight: the ADD finishes anyway (an orphan DanmEp)
      const pods = this.pods();
      if (pods.length) this.deletePod(rng.pick(pods).metadata.name, now, rng, { force: true, skipDel: true });
    } else if (r < 0.89) {
      // an operator (or another tool) frees the address of a DanmEp whose pod is gone, leaving the DanmEp:
      // the address can then be handed to a new pod
      const uids = new Set(this.pods().map((p) => p.metadata.uid));
      const stale = this.eps().filter((e) => !uids.has((e.spec as { PodUID: string }).PodUID));
      if (stale.length) {
        const i = this.epIndex(rng.pick(stale));
        if (i !== undefined && this.bitmap().isSet(i)) this.writeBit(i, false);
      }
    } else if (r < 0.92) {
      // an ADD that timed out: its bit leaked, the retry on another address
      this.timedOutAdd(rng.chance(0.5) ? sts : `slow-${++this.seq}`, now, rng);
    } else if (r < 0.95) {
      // node-1 back without containerd's state: its pods ADDed again under the same UIDs
      this.reAddNode('node-1', now, rng);
    } else this.abandonAdd();
  }

  /** An ADD abandoned on a dead node: the bit is set, no DanmEp ever comes. */
  abandonAdd(): void {
    const i = this.firstFree();
    if (i >= 0) this.writeBit(i, true);
  }

  // ---- invariants and orphans ----

  protected check(e: import('../simkube.ts').WriteEvent): void {
    if (e.kind === 'delete' && e.ref.plural === 'danmeps') {
      const i = this.epIndex(e.before);
      if (i !== undefined) this.deletedAddress.set((e.before.spec as { Pod: string }).Pod, i);
      const uid = (e.before.spec as { PodUID: string }).PodUID;
      const live = this.pods().find((p) => p.metadata.uid === uid);
      if (live)
        this.violations.push(
          `deleted DanmEp ${e.before.metadata.name} of live pod ${live.metadata.name} (${uid.slice(0, 8)})`,
        );
    }
    if (e.kind === 'update' && e.ref.plural === this.ref.plural) {
      const before = Bitmap.decode(
        (e.before.spec as { Options: { alloc: string } }).Options.alloc,
        CIDR,
      ) as Bitmap;
      const after = Bitmap.decode(
        (e.after.spec as { Options: { alloc: string } }).Options.alloc,
        CIDR,
      ) as Bitmap;
      for (const i of before.setBits()) {
        if (after.isSet(i)) continue;
        const holder = this.eps().find((ep) => this.epIndex(ep) === i);
        if (holder)
          this.violations.push(
            `freed ${formatAddress(4, CIDR.network + BigInt(i))} held by live DanmEp ${holder.metadata.name}`,
          );
        // an ADD in flight for a live pod owns the address (one for a pod already gone makes an orphan anyway)
        this.reclaimedBits++;
        const owner = this.inflight.get(i);
        if (owner !== undefined) this.clearedInflight.push({ index: i, owner });
        if (owner !== undefined && this.pods().some((p) => p.metadata.uid === owner)) {
          this.violations.push(
            `freed ${formatAddress(4, CIDR.network + BigInt(i))} of an in-flight CNI ADD of a live pod`,
          );
        }
        if (i === 0 || i === 63) this.violations.push('freed a reserved address');
      }
    }
  }

  /** The index of a leaked bit (set, held by no DanmEp, no ADD in flight), if any. */
  leakedIndex(): number | undefined {
    const k = [...this.orphans().keys()].find((key) => key.startsWith('bit/'));
    return k === undefined ? undefined : Number(k.slice(4));
  }

  orphans(): Map<string, string> {
    const out = new Map<string, string>();
    const uids = new Set(this.pods().map((p) => p.metadata.uid));
    const held = new Set<number>();
    for (const ep of this.eps()) {
      const i = this.epIndex(ep);
      if (i !== undefined) held.add(i);
      if (!uids.has((ep.spec as { PodUID: string }).PodUID)) out.set(`ep/${ep.metadata.uid}`, 'DanmEp');
    }
    const bm = this.bitmap();
    for (const i of bm.setBits())
      if (i !== 0 && i !== 63 && !held.has(i) && !this.inflight.has(i)) out.set(`bit/${i}`, 'DanmBit');
    return out;
  }
}
