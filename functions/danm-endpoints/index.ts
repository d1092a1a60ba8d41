/**
 * danm-endpoints: reclaims DanmEps whose Pod (by UID) is gone, then the IPs they
 * held, and bits set in a DANM bitmap that no DanmEp holds.
 */

import { z } from 'zod';
import type { Indeterminate, SourceMeta, Target } from '../../shared/engine/types.ts';
import { ConflictError } from '../../shared/kube/errors.ts';
import { recordEvent } from '../../shared/kube/events.ts';
import type { KubeClient, KubeReader } from '../../shared/kube/ports.ts';
import { type KubeObject, PODS, type ResourceRef } from '../../shared/kube/resources.ts';
import { formatAddress, parseAddress } from '../../shared/net/ip.ts';
import { BatchResults } from '../../shared/runtime/batch.ts';
import {
  type BatchItemResult,
  type FunctionContext,
  GUARD_DEFAULTS,
  type Observation,
  type RecheckResult,
  type RemoveResult,
  type TwopassFunction,
} from '../../shared/runtime/function.ts';
import { makeHandler } from '../../shared/runtime/handler.ts';
import { describeValue, namespacesSetting, pageSizeSetting } from '../../shared/runtime/settings.ts';
import { Bitmap } from './bitmap.ts';
import {
  bitIndex,
  clearable,
  DEFAULT_NETWORK,
  danmResources,
  type Endpoint,
  GROUPS,
  type Network,
  type NetworkType,
  networkId,
  networksBeingSetUp,
  type Pool,
  parseEndpoint,
  parseNetwork,
  unparsableMayHold,
} from './model.ts';

export const NAME = 'danm-endpoints';
const MIN = 60_000;
const NETWORK_TYPES: NetworkType[] = ['DanmNet', 'TenantNetwork', 'ClusterNetwork'];
const CLEAR_ATTEMPTS = 5;

export class DanmNotInstalledError extends Error {
  override name = 'DanmNotInstalledError';
  readonly call = 'discover danm';
}

type EpData = {
  t: 'ep';
  group: string;
  namespace: string;
  name: string;
  uid: string;
  rv: string;
  pod: string;
  podUID: string;
  networkType: NetworkType;
  network: string;
  v4?: string;
  v6?: string;
};
type BitData = {
  t: 'bit';
  group: string;
  networkType: NetworkType;
  namespace?: string;
  name: string;
  uid: string;
  rv: string;
  family: 4 | 6;
  index: number;
  address: string;
  /** The pool's bitmap as observed (base64), to tell bits cleared since from bits newly set. */
  alloc: string;
};

function settingsOf(ctx: FunctionContext): { namespaces?: Set<string>; pageSize: number; group?: string } {
  const s = ctx.settings;
  const ns = Array.isArray(s.namespaces) ? new Set(s.namespaces.map(String)) : undefined;
  return {
    ...(ns ? { namespaces: ns } : {}),
    pageSize: typeof s.pageSize === 'number' ? s.pageSize : 500,
    ...(typeof s.group === 'string' ? { group: s.group } : {}),
  };
}

export async function detectGroup(
  kube: KubeReader,
  preferred?: string,
  signal?: AbortSignal,
): Promise<string> {
  const groups = preferred ? [preferred] : GROUPS;
  for (const g of groups) if (await kube.serves(g, 'v1', 'danmeps', signal)) return g;
  throw new DanmNotInstalledError(
    `neither ${groups.map((g) => `${g}/v1`).join(' nor ')} serves danmeps: is DANM installed, and may this identity discover it?`,
  );
}

function sourceMeta(
  name: string,
  role: SourceMeta['role'],
  l: { items: unknown[]; resourceVersion: string; pages: number },
): SourceMeta {
  return {
    name,
    role,
    count: l.items.length,
    listVersion: l.resourceVersion,
    pages: l.pages,
    complete: true,
  };
}

const holderKey = (net: string, family: 4 | 6, index: number) => `${net}|${family}|${index}`;

async function observe(kube: KubeReader, ctx: FunctionContext): Promise<Observation> {
  const cfg = settingsOf(ctx);
  const group = await detectGroup(kube, cfg.group, ctx.signal);
  const R = danmResources(group);
  const sources: SourceMeta[] = [];
  const inScope = (ns: string | undefined) => !cfg.namespaces || ns === undefined || cfg.namespaces.has(ns);

  // 1. Networks first: their set bits are targets, and DanmEps listed after can only add holders.
  const networks = new Map<string, Network>();
  for (const type of NETWORK_TYPES) {
    const ref = R[type];
    if (!(await kube.serves(group, 'v1', ref.plural, ctx.signal))) {
      sources.push({ name: ref.plural, role: 'target', count: 0, complete: true, reason: 'not served' });
      continue;
    }
    const l = await kube.listAll(ref, { pageSize: cfg.pageSize, signal: ctx.signal });
    sources.push(sourceMeta(ref.plural, 'target', l));
    for (const o of l.items) {
      const n = parseNetwork(o, type);
      networks.set(n.id, n);
      if (n.problem)
        ctx.note('network.unreadable', {
          kind: type,
          name: n.namespace ? `${n.namespace}/${n.name}` : n.name,
          reason: n.problem,
        });
    }
  }
  // 2. DanmEps: targets, and the holders of bits.
  const eps = await kube.listAll(R.danmeps, { pageSize: cfg.pageSize, signal: ctx.signal });
  sources.push(sourceMeta('danmeps', 'target+evidence', eps));
  // 3. Pods last, metadata only: the evidence of use.
  const pods = await kube.listAll(PODS, { metadataOnly: true, pageSize: cfg.pageSize, signal: ctx.signal });
  sources.push(sourceMeta('pods', 'evidence', pods));
  const livePods = new Set<string>();
  for (const p of pods.items) if (p.metadata?.uid) livePods.add(`${p.metadata.namespace}/${p.metadata.uid}`);

  const targets: Target[] = [];
  const used: string[] = [];
  const indeterminate: Indeterminate[] = [];
  const holders = new Map<string, string>(); // holderKey -> DanmEp uid
  const parsedEps: Endpoint[] = [];
  const unknownHolders = new Set<string>(); // network ids whose bits some unreadable network or DanmEp may hold
  const unparsable: KubeObject[] = []; // DanmEps that do not parse: they may hold bits (unparsableMayHold)

  for (const o of eps.items) {
    const parsed = parseEndpoint(o);
    if (!parsed.ok) {
      unparsable.push(o);
      if (parsed.uid && inScope(parsed.namespace)) {
        targets.push({
          key: parsed.uid,
          kind: 'DanmEp',
          fingerprint: `${parsed.uid}@${o.metadata?.resourceVersion ?? ''}`,
          name: `${parsed.namespace}/${parsed.name}`,
          keep: false,
        });
        indeterminate.push({ key: parsed.uid, reason: parsed.reason });
      } else {
        ctx.note('target.malformed', {
          kind: 'DanmEp',
          name: `${parsed.namespace}/${parsed.name}`,
          reason: parsed.reason,
        });
      }
      continue;
    }
    const ep = parsed.ep;
    parsedEps.push(ep);
    const netId = networkId(ep.networkType, ep.namespace, ep.network);
    const net = networks.get(netId);
    const problems: string[] = [];
    for (const [family, addr] of [
      [4, ep.v4],
      [6, ep.v6],
    ] as const) {
      if (!addr) continue;
      const pool = family === 4 ? net?.v4 : net?.v6;
      const idx = pool ? bitIndex(pool, addr) : undefined;
      if (idx !== undefined) holders.set(holderKey(netId, family, idx), ep.uid);
      else if (net && !net.problem)
        problems.push(`${addr.text} is outside ${ep.networkType} ${ep.network}'s IPv${family} range`);
    }
    if (!net)
      problems.push(
        `${ep.networkType} ${ep.networkType === 'ClusterNetwork' ? '' : `${ep.namespace}/`}${ep.network} cannot be read (not found)`,
      );
    else if (net.problem) problems.push(`${net.type} ${ep.network} cannot be read: ${net.problem}`);
    if (!net || net.problem) unknownHolders.add(netId);
    if (!inScope(ep.namespace)) continue;
    const data: EpData = {
      t: 'ep',
      group,
      namespace: ep.namespace,
      name: ep.name,
      uid: ep.uid,
      rv: ep.resourceVersion,
      pod: ep.pod,
      podUID: ep.podUID,
      networkType: ep.networkType,
      network: ep.network,
      ...(ep.v4 ? { v4: ep.v4.text } : {}),
      ...(ep.v6 ? { v6: ep.v6.text } : {}),
    };
    targets.push({
      key: ep.uid,
      kind: 'DanmEp',
      fingerprint: [ep.uid, ep.resourceVersion, ep.podUID, ep.v4?.text ?? '-', ep.v6?.text ?? '-'].join('|'),
      name: `${ep.namespace}/${ep.pod} ${ep.iface || ep.name}`,
      keep: ep.keep,
      ...(ep.createdAt !== undefined ? { createdAt: ep.createdAt } : {}),
      data,
    });
    if (livePods.has(`${ep.namespace}/${ep.podUID}`)) used.push(ep.uid);
    else if (problems.length > 0) indeterminate.push({ key: ep.uid, reason: problems.join('; ') });
  }

  // Leaked bits: set, clearable, held by no DanmEp, and no pod being set up on the network.
  // The default network of a pod is resolved against this snapshot's complete network lists.
  const settingUp = networksBeingSetUp(pods.items, parsedEps, new Set(networks.keys()));
  for (const net of networks.values()) {
    if (net.problem || !inScope(net.namespace)) continue;
    for (const [family, pool] of [
      [4, net.v4],
      [6, net.v6],
    ] as const) {
      if (!pool) continue;
      const observedAlloc = pool.bitmap.encode(); // one string shared by every bit target of the pool
      for (const i of pool.bitmap.setBits()) {
        if (!clearable(pool, i)) continue;
        const address = addressAt(pool, i);
        const key = `${net.uid}/${family}/${address}`;
        const data: BitData = {
          t: 'bit',
          group,
          networkType: net.type,
          ...(net.namespace !== undefined ? { namespace: net.namespace } : {}),
          name: net.name,
          uid: net.uid,
          rv: net.resourceVersion,
          family,
          index: i,
          address,
          alloc: observedAlloc,
        };
        // The network's resourceVersion is the fingerprint: a bit freed and set again in between changes it.
        const t: Target = {
          key,
          kind: 'DanmBit',
          fingerprint: `${net.uid}@${net.resourceVersion}`,
          name: `${net.type} ${net.namespace ? `${net.namespace}/` : ''}${net.name} ${address}`,
          keep: net.keep,
          data,
        };
        targets.push(t);
        if (holders.has(holderKey(net.id, family, i))) used.push(key);
        else if (settingUp(net.id) !== undefined)
          indeterminate.push({ key, reason: `${settingUp(net.id)}: its CNI ADD may hold this address` });
        else if (unknownHolders.has(net.id))
          indeterminate.push({ key, reason: 'a DanmEp on an unreadable network may hold this address' });
        else if (unparsable.some((o) => unparsableMayHold(o, net)))
          indeterminate.push({ key, reason: 'a DanmEp that could not be parsed may hold this address' });
      }
    }
  }
  return { sources, targets, used, indeterminate };
}

function addressAt(pool: Pool, i: number): string {
  return formatAddress(pool.cidr.family, pool.cidr.network + BigInt(i));
}

/**
 * Within a run, the network may have changed since the snapshot (this run clearing other
 * leaked bits does that). It is still safe to clear the bit when no bit was set since:
 * no allocation happened, so the bit cannot have been handed to a new owner.
 */
function allocatedSince(pool: Pool | undefined, d: BitData): string | undefined {
  if (!pool) return 'the address family is gone from the network';
  if (!pool.bitmap.isSet(d.index)) return 'bit is no longer set';
  const seen = Bitmap.decode(d.alloc, pool.cidr);
  if (typeof seen === 'string') return `observed bitmap unreadable: ${seen}`;
  for (const i of pool.bitmap.setBits())
    if (!seen.isSet(i)) return 'an address was allocated in the network since the snapshot';
  return undefined;
}

function networkRef(group: string, type: NetworkType): ResourceRef {
  return danmResources(group)[type];
}

/**
 * The `default` networks that exist now, from complete lists (field selector on the name):
 * what DANM resolves a pod's default network against. Needed only when the network being
 * re-checked is itself named `default`; a pod on its default network is on no other.
 */
async function existingDefaults(kube: KubeReader, group: string, signal: AbortSignal): Promise<Set<string>> {
  const R = danmResources(group);
  const out = new Set<string>();
  for (const type of NETWORK_TYPES) {
    const ref = R[type];
    if (!(await kube.serves(group, 'v1', ref.plural, signal))) continue;
    const l = await kube.listAll(ref, { fieldSelector: `metadata.name=${DEFAULT_NETWORK}`, signal });
    for (const o of l.items)
      if (o.metadata.name === DEFAULT_NETWORK)
        out.add(networkId(type, o.metadata.namespace, o.metadata.name));
  }
  return out;
}

/** Who holds address `index` of a network's pool (other than DanmEp `except`), from one fresh read of the evidence. */
type Holder = (family: 4 | 6, index: number, pool: Pool, except?: string) => string | undefined;

/** Fresh full lists of DanmEps and pods (and the `default` networks when `net` is one): who may hold a bit of `net`. */
async function freshEvidence(
  kube: KubeReader,
  group: string,
  net: Network,
  signal: AbortSignal,
): Promise<Holder> {
  const netId = net.id;
  // Networks first (as in a snapshot): a default network created after can only widen what is protected.
  const existing = net.name === DEFAULT_NETWORK ? await existingDefaults(kube, group, signal) : undefined;
  const eps = await kube.listAll(danmResources(group).danmeps, { signal });
  const pods = await kube.listAll(PODS, { metadataOnly: true, signal });
  const parsed: Endpoint[] = [];
  const unparsable: string[] = [];
  for (const o of eps.items) {
    const p = parseEndpoint(o);
    if (p.ok) parsed.push(p.ep);
    else if (unparsableMayHold(o, net)) unparsable.push(`${p.namespace}/${p.name}`);
  }
  const inflight = networksBeingSetUp(pods.items, parsed, existing)(netId);
  const mine = parsed.filter((e) => networkId(e.networkType, e.namespace, e.network) === netId);
  return (family, index, pool, except) => {
    if (inflight) return inflight;
    if (unparsable.length > 0) return `may be held by DanmEp ${unparsable[0]} (unparsable)`;
    for (const e of mine) {
      if (e.uid === except) continue;
      const a = family === 4 ? e.v4 : e.v6;
      if (a && bitIndex(pool, a) === index) return `held by DanmEp ${e.namespace}/${e.name}`;
    }
    return undefined;
  };
}

/** A fresh full list of DanmEps: who holds address `index` of network `net`, other than `except`. */
async function freshHolder(
  kube: KubeReader,
  group: string,
  net: Network,
  family: 4 | 6,
  index: number,
  pool: Pool,
  except: string | undefined,
  signal: AbortSignal,
): Promise<string | undefined> {
  return (await freshEvidence(kube, group, net, signal))(family, index, pool, except);
}

async function readNetwork(
  kube: KubeReader,
  group: string,
  type: NetworkType,
  namespace: string | undefined,
  name: string,
  signal: AbortSignal,
): Promise<Network | undefined> {
  const o = await kube.get(
    networkRef(group, type),
    type === 'ClusterNetwork' ? undefined : namespace,
    name,
    signal,
  );
  return o ? parseNetwork(o, type) : undefined;
}

async function recheck(kube: KubeReader, target: Target, ctx: FunctionContext): Promise<RecheckResult> {
  const d = target.data as EpData | BitData | undefined;
  if (!d) return { ok: false, reason: 'target has no removal data' };
  if (d.t === 'ep') {
    const ep = await kube.get(danmResources(d.group).danmeps, d.namespace, d.name, ctx.signal);
    if (!ep) return { ok: false, reason: 'DanmEp is already gone' };
    if (ep.metadata.uid !== d.uid || ep.metadata.resourceVersion !== d.rv)
      return { ok: false, reason: 'DanmEp changed since the snapshot' };
    const pod = await kube.get(PODS, d.namespace, d.pod, ctx.signal);
    if (pod && pod.metadata.uid === d.podUID)
      return { ok: false, reason: `Pod ${d.namespace}/${d.pod} with UID ${d.podUID} exists` };
    return { ok: true };
  }
  const net = await readNetwork(kube, d.group, d.networkType, d.namespace, d.name, ctx.signal);
  if (!net) return { ok: false, reason: 'network is gone' };
  if (net.uid !== d.uid) return { ok: false, reason: 'network was re-created' };
  const pool = d.family === 4 ? net.v4 : net.v6;
  const why = allocatedSince(pool, d);
  if (why) return { ok: false, reason: why };
  if (!pool?.bitmap.isSet(d.index) || !clearable(pool, d.index))
    return { ok: false, reason: 'bit is no longer set or clearable' };
  const holder = await freshHolder(kube, d.group, net, d.family, d.index, pool, undefined, ctx.signal);
  if (holder) return { ok: false, reason: `${d.address}: ${holder}` };
  return { ok: true };
}

type Cleared = { address: string; outcome: string };

/** Clears one address bit with resourceVersion and bounded conflict retries; every rule re-checked on the fresh read. */
async function clearAddress(
  kube: KubeClient,
  d: EpData,
  family: 4 | 6,
  text: string,
  signal: AbortSignal,
): Promise<Cleared> {
  const addr = parseAddress(text.split('/')[0]!);
  if (!addr) return { address: text, outcome: 'unparsable, left set' };
  for (let attempt = 1; attempt <= CLEAR_ATTEMPTS; attempt++) {
    const net = await readNetwork(kube, d.group, d.networkType, d.namespace, d.network, signal);
    if (!net) return { address: text, outcome: 'network gone, nothing to clear' };
    if (net.problem) return { address: text, outcome: `network unreadable (${net.problem}), left set` };
    const pool = family === 4 ? net.v4 : net.v6;
    const idx = pool ? bitIndex(pool, addr) : undefined;
    if (!pool || idx === undefined)
      return { address: text, outcome: 'outside the network range, left alone' };
    if (!pool.bitmap.isSet(idx)) return { address: text, outcome: 'already clear' };
    if (!clearable(pool, idx)) return { address: text, outcome: 'reserved, left set' };
    const holder = await freshHolder(kube, d.group, net, family, idx, pool, d.uid, signal);
    if (holder) return { address: text, outcome: `${holder}, left set` };
    try {
      await kube.replace(
        networkRef(d.group, d.networkType),
        withBitmap(net, family, pool.bitmap.with(idx, false).encode()),
        signal,
      );
      // A success that did not happen is caught here, not reported as "cleared".
      const after = await readNetwork(kube, d.group, d.networkType, d.namespace, d.network, signal);
      const afterPool = after && !after.problem ? (family === 4 ? after.v4 : after.v6) : undefined;
      if (
        after?.uid === net.uid &&
        afterPool?.bitmap.isSet(idx) &&
        after.resourceVersion === net.resourceVersion
      )
        return {
          address: text,
          outcome:
            'left set: the update answered success, but a read-back finds the network unchanged (a later run reclaims it as a leaked bit)',
        };
      return { address: addr.text, outcome: 'cleared' };
    } catch (err) {
      if (err instanceof ConflictError && attempt < CLEAR_ATTEMPTS) continue;
      if (err instanceof ConflictError)
        return {
          address: text,
          outcome: `left set after ${CLEAR_ATTEMPTS} conflicts (a later run reclaims it as a leaked bit)`,
        };
      throw err;
    }
  }
  return { address: text, outcome: 'left set' };
}

function withBitmap(net: Network, family: 4 | 6, alloc: string): KubeObject {
  const raw = structuredClone(net.raw) as KubeObject & { spec: { Options: Record<string, unknown> } };
  raw.spec.Options[family === 4 ? 'alloc' : 'alloc6'] = alloc;
  return raw;
}

async function remove(kube: KubeClient, target: Target, ctx: FunctionContext): Promise<RemoveResult> {
  const d = target.data as EpData | BitData | undefined;
  if (!d) return { outcome: 'skipped', reason: 'target has no removal data' };
  if (d.t === 'ep') {
    const out = await kube.deleteWithPreconditions(
      danmResources(d.group).danmeps,
      d.namespace,
      d.name,
      { uid: d.uid, resourceVersion: d.rv },
      ctx.signal,
    );
    if (out === 'conflict')
      return { outcome: 'skipped', reason: 'precondition failed (409): the DanmEp changed' };
    // Gone before us: whoever deleted it owns its bits; clearing them again could free an address twice.
    if (out === 'gone')
      return {
        outcome: 'gone',
        detail: 'DanmEp was already gone; its bits are left to the next observation',
      };
    // The DanmEp is gone now: a failure to clear an address leaks it (a later run reclaims it as a
    // leaked bit); it does not make the deletion fail.
    const cleared: Cleared[] = [];
    for (const [family, text] of [
      [4, d.v4],
      [6, d.v6],
    ] as const) {
      if (!text) continue;
      cleared.push(
        await clearAddress(kube, d, family, text, ctx.signal).catch((err: Error) => ({
          address: text,
          outcome: `left set: ${err.message}`,
        })),
      );
    }
    const detail = `DanmEp ${d.namespace}/${d.name} deleted; ${cleared.map((c) => `${c.address}: ${c.outcome}`).join(', ') || 'no address'}`;
    await recordEvent(
      kube,
      d.namespace,
      { apiVersion: `${d.group}/v1`, kind: 'DanmEp', name: d.name, namespace: d.namespace, uid: d.uid },
      'DanmEndpointReclaimed',
      `twopass deleted DanmEp ${d.name} of Pod ${d.pod} (UID ${d.podUID}, gone); ${cleared.map((c) => `${c.address}: ${c.outcome}`).join(', ')}`,
      'Normal',
      ctx.now,
      ctx.signal,
    ).catch((err) =>
      ctx.note('event.failed', {
        kind: 'DanmEp',
        name: `${d.namespace}/${d.name}`,
        error: (err as Error).message,
      }),
    );
    return { outcome: 'deleted', detail };
  }
  const net = await readNetwork(kube, d.group, d.networkType, d.namespace, d.name, ctx.signal);
  if (!net || net.uid !== d.uid) return { outcome: 'skipped', reason: 'network is gone' };
  const pool = d.family === 4 ? net.v4 : net.v6;
  const why = allocatedSince(pool, d);
  if (why) return { outcome: 'skipped', reason: why };
  if (!pool?.bitmap.isSet(d.index) || !clearable(pool, d.index))
    return { outcome: 'skipped', reason: 'bit is no longer set or clearable' };
  try {
    await kube.replace(
      networkRef(d.group, d.networkType),
      withBitmap(net, d.family, pool.bitmap.with(d.index, false).encode()),
      ctx.signal,
    );
  } catch (err) {
    if (err instanceof ConflictError)
      return { outcome: 'skipped', reason: 'precondition failed (409): the network changed' };
    throw err;
  }
  const ns = d.namespace ?? 'default';
  await recordEvent(
    kube,
    ns,
    {
      apiVersion: `${d.group}/v1`,
      kind: d.networkType,
      name: d.name,
      ...(d.namespace ? { namespace: d.namespace } : {}),
      uid: d.uid,
    },
    'DanmAddressReclaimed',
    `twopass cleared leaked address ${d.address} (held by no DanmEp) in ${d.networkType} ${d.name}`,
    'Normal',
    ctx.now,
    ctx.signal,
  ).catch((err) =>
    ctx.note('event.failed', { kind: d.networkType, name: d.name, error: (err as Error).message }),
  );
  return {
    outcome: 'deleted',
    detail: `cleared ${d.address} in ${d.networkType} ${d.namespace ? `${d.namespace}/` : ''}${d.name}`,
  };
}

const BATCH_ATTEMPTS = 5;

/**
 * The leaked bits of one network, together: one fresh read of the network and one of
 * the evidence re-check every bit, one write with the network's resourceVersion clears
 * those still unheld, a conflict re-reads and re-checks, a read-back confirms.
 */
async function removeBatch(
  reader: KubeReader,
  kube: KubeClient,
  targets: readonly Target[],
  ctx: FunctionContext,
): Promise<BatchItemResult[]> {
  const bits = targets.map((t) => ({ t, d: t.data as BitData }));
  const d0 = bits[0]!.d;
  const results = new BatchResults(targets);
  const skip = (key: string, reason: string) => results.skip(key, reason);
  for (let attempt = 1; attempt <= BATCH_ATTEMPTS; attempt++) {
    const net = await readNetwork(reader, d0.group, d0.networkType, d0.namespace, d0.name, ctx.signal);
    if (!net || net.uid !== d0.uid) {
      for (const { t } of bits) skip(t.key, 'network is gone or was re-created');
      break;
    }
    if (net.problem) {
      for (const { t } of bits) skip(t.key, `network cannot be read: ${net.problem}`);
      break;
    }
    const holder = await freshEvidence(reader, d0.group, net, ctx.signal);
    let v4 = net.v4?.bitmap;
    let v6 = net.v6?.bitmap;
    const clearing: { t: Target; d: BitData }[] = [];
    for (const { t, d } of bits) {
      if (results.has(t.key)) continue;
      const pool = d.family === 4 ? net.v4 : net.v6;
      const why =
        allocatedSince(pool, d) ??
        (!pool || !clearable(pool, d.index) ? 'bit is no longer clearable' : undefined) ??
        holder(d.family, d.index, pool!);
      if (why) {
        skip(t.key, `re-check: ${d.address}: ${why}`);
        continue;
      }
      if (d.family === 4) v4 = v4!.with(d.index, false);
      else v6 = v6!.with(d.index, false);
      clearing.push({ t, d });
    }
    if (clearing.length === 0) break;
    const raw = structuredClone(net.raw) as KubeObject & { spec: { Options: Record<string, unknown> } };
    if (v4 && net.v4) raw.spec.Options.alloc = v4.encode();
    if (v6 && net.v6) raw.spec.Options.alloc6 = v6.encode();
    try {
      await kube.replace(networkRef(d0.group, d0.networkType), raw, ctx.signal);
    } catch (err) {
      if (err instanceof ConflictError && attempt < BATCH_ATTEMPTS) continue;
      const why =
        err instanceof ConflictError
          ? `the network kept changing (${BATCH_ATTEMPTS} conflicts)`
          : (err as Error).message;
      for (const { t } of clearing)
        results.set(
          err instanceof ConflictError
            ? { key: t.key, outcome: 'skipped', reason: why }
            : { key: t.key, outcome: 'failed', error: why },
        );
      break;
    }
    // Read back: a success that did not happen is a failure, never "cleared".
    const after = await readNetwork(reader, d0.group, d0.networkType, d0.namespace, d0.name, ctx.signal);
    const cleared: string[] = [];
    for (const { t, d } of clearing) {
      const pool = after && after.uid === net.uid ? (d.family === 4 ? after.v4 : after.v6) : undefined;
      const unchanged = after?.resourceVersion === net.resourceVersion;
      if (after && after.uid === net.uid && pool?.bitmap.isSet(d.index) && unchanged)
        results.set({
          key: t.key,
          outcome: 'failed',
          error: 'the update answered success, but a read-back finds the network unchanged',
        });
      else {
        cleared.push(d.address);
        results.set({
          key: t.key,
          outcome: 'deleted',
          detail: `cleared ${d.address} in ${d.networkType} ${d.namespace ? `${d.namespace}/` : ''}${d.name}`,
        });
      }
    }
    if (cleared.length > 0)
      await recordEvent(
        kube,
        d0.namespace ?? 'default',
        {
          apiVersion: `${d0.group}/v1`,
          kind: d0.networkType,
          name: d0.name,
          ...(d0.namespace ? { namespace: d0.namespace } : {}),
          uid: d0.uid,
        },
        'DanmAddressReclaimed',
        `twopass cleared ${cleared.length} leaked address${cleared.length === 1 ? '' : 'es'} (held by no DanmEp) in ${d0.networkType} ${d0.name}: ${cleared.join(', ')}`,
        'Normal',
        ctx.now,
        ctx.signal,
      ).catch((err) =>
        ctx.note('event.failed', { kind: d0.networkType, name: d0.name, error: (err as Error).message }),
      );
    break;
  }
  return results.all('the network kept changing');
}

async function confirmGone(kube: KubeReader, target: Target, ctx: FunctionContext): Promise<boolean> {
  const d = target.data as EpData | BitData;
  if (d.t === 'ep') {
    const ep = await kube.get(danmResources(d.group).danmeps, d.namespace, d.name, ctx.signal);
    return !ep || ep.metadata.uid !== d.uid;
  }
  const net = await readNetwork(kube, d.group, d.networkType, d.namespace, d.name, ctx.signal);
  const pool = net ? (d.family === 4 ? net.v4 : net.v6) : undefined;
  return !net || net.uid !== d.uid || !pool || !pool.bitmap.isSet(d.index);
}

export const danmEndpointsSettings = z
  .object({
    /** Only DanmEps and networks of these namespaces are targets (ClusterNetworks always are). */
    namespaces: namespacesSetting.optional(),
    /** The DANM API group; detected when not set. */
    group: z
      .enum(GROUPS, { error: (i) => `expected one of ${GROUPS.join(', ')}, got ${describeValue(i.input)}` })
      .optional(),
    pageSize: pageSizeSetting.optional(),
  })
  .strict();

export const danmEndpoints: TwopassFunction<KubeReader, KubeClient> = {
  name: NAME,
  settingsSchema: danmEndpointsSettings,
  description:
    'DanmEps whose Pod (by UID) is gone, the IPs they held, and leaked bits in DANM network bitmaps',
  defaults: {
    schedule: '*/5 * * * *',
    graceMs: 5 * MIN,
    kindGraceMs: { DanmBit: 10 * MIN },
    ...GUARD_DEFAULTS,
  },
  observe,
  recheck,
  remove,
  confirmGone,
  // Leaked bits of one network are cleared together, in one write (DanmEps go one by one).
  batchOf: (t) => (t.kind === 'DanmBit' ? (t.data as BitData).uid : undefined),
  removeBatch,
};

export default danmEndpoints;

/** For FaaS runtimes: `handler({ apply, dryRun, record, config })` returns the run summary. */
export const handler = makeHandler(danmEndpoints);
