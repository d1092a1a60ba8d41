/**
 * What danm-endpoints observes, in the order that keeps it safe: the networks first (their
 * set bits are targets), then DanmEps (targets, and the holders of bits), then pods (the
 * evidence of use); then each DanmEp and each leaked bit judged on that one snapshot.
 */
import type { ObserveContext } from '../../shared/contract/index.ts';
import type { KubeReader } from '../../shared/kube/ports.ts';
import { PODS } from '../../shared/kube/resources.ts';
import { formatAddress } from '../../shared/net/ip.ts';
import type { BitData } from './bits.ts';
import { type Ask, askOf, carried, freshFingerprint } from './continuity.ts';
import type { EpData, Settings } from './endpoint.ts';
import { BitEvidence, detectGroup, endpointViewer, NETWORK_TYPES } from './evidence.ts';
import {
  bitIndex,
  clearable,
  danmResources,
  endpointAddress,
  type Network,
  networkId,
  parseNetwork,
} from './model.ts';

export type Kinds = { DanmEp: EpData; DanmBit: BitData };
type Ctx = ObserveContext<Settings, Kinds>;
/** Whether a namespace is one the settings ask for (a cluster-wide object always is). */
type InScope = (ns: string | undefined) => boolean;

export async function observe(kube: KubeReader, ctx: Ctx): Promise<void> {
  const { signal } = ctx;
  const namespaces = ctx.settings.namespaces ? new Set(ctx.settings.namespaces) : undefined;
  const group = await detectGroup(kube, ctx.settings.group, signal);
  const inScope: InScope = (ns) => !namespaces || ns === undefined || namespaces.has(ns);
  const networks = await listNetworks(kube, ctx, group, inScope);
  const evidence = await listEvidence(kube, ctx, group, networks);
  judgeEndpoints(ctx, evidence, networks, group, inScope);
  await judgeBits(kube, ctx, evidence, networks, group, inScope);
}

/**
 * 2. DanmEps (targets, and the holders of bits), then 3. pods, metadata only (the evidence of
 * use). Each page is taken in as it arrives: the raw DanmEps become endpoints, and a pod is
 * judged and dropped (its namespace kept when it has a DanmEp). The lists are dropped when
 * this returns: what stays is the evidence.
 */
async function listEvidence(
  kube: KubeReader,
  ctx: Ctx,
  group: string,
  networks: ReadonlyMap<string, Network>,
): Promise<BitEvidence> {
  const { pageSize } = ctx.settings;
  const { signal } = ctx;
  const eps = await kube.listAll(danmResources(group).danmeps, { pageSize, signal, view: endpointViewer() });
  ctx.source('danmeps', 'target+evidence', eps);
  // The default network of a pod is resolved against this snapshot's complete network lists.
  const evidence = new BitEvidence(
    eps.items,
    networks,
    new Set(networks.keys()),
    ctx.settings.serverSkewSeconds * 1000,
  );
  const pods = await kube.listAll(PODS, { metadataOnly: true, pageSize, signal, view: evidence.pod });
  ctx.source('pods', 'evidence', pods);
  // the judgement reads each DanmEp's podNamespace, never a pod by UID
  evidence.podsRead(false);
  return evidence;
}

/** 1. Networks first: their set bits are targets, and DanmEps listed after can only add holders. */
async function listNetworks(
  kube: KubeReader,
  ctx: Ctx,
  group: string,
  inScope: InScope,
): Promise<Map<string, Network>> {
  const { pageSize } = ctx.settings;
  const { signal } = ctx;
  const R = danmResources(group);
  const networks = new Map<string, Network>();
  const notServed: string[] = [];
  for (const type of NETWORK_TYPES) {
    const ref = R[type];
    if (!(await kube.serves(group, 'v1', ref.plural, signal))) {
      ctx.source(ref.plural, 'target', { notServed: true });
      notServed.push(type);
      continue;
    }
    const l = await kube.listAll(ref, { pageSize, signal, lastWriteTime: true });
    ctx.source(ref.plural, 'target', l);
    for (const o of l.items) {
      const n = parseNetwork(o, type);
      networks.set(n.id, n);
      if (n.problem && inScope(n.namespace))
        ctx.note(
          'network.unreadable',
          { kind: type, name: n.namespace ? `${n.namespace}/${n.name}` : n.name, reason: n.problem },
          'warn',
        );
    }
  }
  if (notServed.length === NETWORK_TYPES.length)
    ctx.note(
      'networks.not-served',
      {
        reason: `${group}/v1 serves none of ${NETWORK_TYPES.join(', ')} (DANM's CRDs removed, or this identity may not discover them): no DanmEp's network can be read, so none can be decided and no bit is checked`,
      },
      'warn',
    );
  return networks;
}

/** Each DanmEp: in use while its pod (by UID) lives; undecided when its network cannot say. */
function judgeEndpoints(
  ctx: Ctx,
  evidence: BitEvidence,
  networks: ReadonlyMap<string, Network>,
  group: string,
  inScope: InScope,
): void {
  for (const f of evidence.failures) {
    const name = `${f.namespace}/${f.name}`;
    if (!inScope(f.namespace)) continue;
    if (f.uid)
      ctx.unreadable('DanmEp', { key: f.uid, fingerprint: `${f.uid}@${f.resourceVersion}`, name }, f.reason);
    else ctx.note('target.malformed', { kind: 'DanmEp', name, reason: f.reason }, 'warn');
  }
  for (const ep of evidence.parsed) {
    if (!inScope(ep.namespace)) continue;
    const net = networks.get(networkId(ep.networkType, ep.namespace, ep.network));
    const v = ctx.target('DanmEp', {
      key: ep.uid,
      // Any change of the DanmEp (its pod UID, its addresses) changes its resourceVersion.
      fingerprint: ep.resourceVersion,
      // The pod's name is shared by the old and the re-created pod: its UID (short) and the
      // address tell the two DanmEps apart wherever one is named.
      name: `${ep.namespace}/${ep.pod} ${ep.iface || ep.name}${ep.v4 || ep.v6 ? ` ${ep.v4 ?? ep.v6}` : ''} (pod ${ep.podUID.slice(0, 8) || '?'})`,
      marks: [ep],
      createdAt: ep.createdAt,
      data: {
        group,
        namespace: ep.namespace,
        name: ep.name,
        uid: ep.uid,
        rv: ep.resourceVersion,
        pod: ep.pod,
        podUID: ep.podUID,
        networkType: ep.networkType,
        network: ep.network,
        ...(ep.v4 ? { v4: ep.v4 } : {}),
        ...(ep.v6 ? { v6: ep.v6 } : {}),
      },
    });
    if (ep.podNamespace === ep.namespace) {
      v.used();
      continue;
    }
    const problems: string[] = [];
    const where = `${ep.networkType} ${ep.networkType === 'ClusterNetwork' ? '' : `${ep.namespace}/`}${ep.network}`;
    if (!net) problems.push(`${where} cannot be read (not found)`);
    else if (net.problem) problems.push(`${net.type} ${ep.network} cannot be read: ${net.problem}`);
    else
      for (const [family, text, pool] of [
        [4, ep.v4, net.v4],
        [6, ep.v6, net.v6],
      ] as const) {
        if (text === undefined) continue;
        const addr = endpointAddress(ep, family);
        if (!addr || !pool || bitIndex(pool, addr) === undefined)
          problems.push(`${text} is outside ${ep.networkType} ${ep.network}'s IPv${family} range`);
      }
    if (problems.length > 0) v.indeterminate(problems.join('; '));
  }
}

/** Leaked bits: set, clearable, held by no DanmEp, and no pod being set up on the network. */
async function judgeBits(
  kube: KubeReader,
  ctx: Ctx,
  evidence: BitEvidence,
  networks: ReadonlyMap<string, Network>,
  group: string,
  inScope: InScope,
): Promise<void> {
  for (const net of networks.values()) {
    if (net.problem || !inScope(net.namespace)) continue;
    for (const [family, pool] of [
      [4, net.v4],
      [6, net.v6],
    ] as const) {
      if (!pool) continue;
      // Strings shared by every bit target of the pool (at 150,000 bits, one each per bit
      // would be most of the snapshot's memory).
      const alloc = pool.bitmap.encode();
      const keyPrefix = `${net.uid}/${family}/`;
      const namePrefix = `${net.type} ${net.namespace ? `${net.namespace}/` : ''}${net.name} `;
      const address = (index: number) => formatAddress(pool.cidr.family, pool.cidr.network + BigInt(index));
      // A bit first seen unused now is fingerprinted by the network's resourceVersion (0003); one
      // still unused since an earlier observation keeps its fingerprint while the network's
      // history shows it set throughout (0016).
      const fresh = freshFingerprint(net);
      const asks: Ask[] = [];
      for (const index of pool.bitmap.setBits())
        if (clearable(pool, index) && evidence.verdict(net, family, index) === undefined) {
          const ask = askOf(ctx, net, keyPrefix + address(index), index);
          if (ask) asks.push(ask);
        }
      const kept = asks.length > 0 ? await carried(kube, ctx, group, net, family, asks) : undefined;
      for (const index of pool.bitmap.setBits()) {
        if (!clearable(pool, index)) continue;
        const addr = address(index);
        const v = ctx.target('DanmBit', {
          key: keyPrefix + addr,
          fingerprint: kept?.get(index) ?? fresh,
          note: net.resourceVersion,
          name: namePrefix + addr,
          marks: [net],
          data: {
            group,
            networkType: net.type,
            ...(net.namespace !== undefined ? { namespace: net.namespace } : {}),
            name: net.name,
            uid: net.uid,
            rv: net.resourceVersion,
            family,
            index,
            address: addr,
            alloc,
          },
        });
        const verdict = evidence.verdict(net, family, index);
        if (verdict === undefined) continue;
        if ('used' in verdict) v.used();
        else v.indeterminate(verdict.indeterminate);
      }
    }
  }
}
