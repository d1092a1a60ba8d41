/**
 * Restores from tombstones. A DanmEp comes back only if its name is free, its network is
 * the same one, and each of its addresses is clear in the network's bitmap and held by no
 * DanmEp: the bits are set first (one write with the network's resourceVersion, so an
 * allocation made meanwhile refuses it), then the DanmEp is created as it was; a create
 * that fails clears the bits again. A leaked bit comes back (set again) only if it is clear.
 */

import { asNew, type RestoreResult, type RunContext, type Tombstone } from '../../shared/contract/index.ts';
import { readPayload } from '../../shared/contract/tombstone.ts';
import { ConflictError } from '../../shared/kube/errors.ts';
import type { KubeReader, KubeReadWriter } from '../../shared/kube/ports.ts';
import type { KubeObject } from '../../shared/kube/resources.ts';
import { parseAddress } from '../../shared/net/ip.ts';
import { BIT_TOMBSTONE, ENDPOINT_TOMBSTONE, type Settings, type Where } from './data.ts';
import { poolOf, readNetwork, withBitmaps } from './evidence.ts';
import { bitIndex, danmResources, type Network, parseEndpoint } from './model.ts';

type Ctx = RunContext<Settings> & Readonly<{ apply: boolean }>;
/** The network's bitmaps with these bits set, or why they cannot be set. */
function setting(net: Network, bits: readonly { family: 4 | 6; index: number; address: string }[]) {
  let v4 = net.v4?.bitmap;
  let v6 = net.v6?.bitmap;
  for (const b of bits) {
    const pool = poolOf(net, b.family);
    if (!pool || b.index < 0 || b.index >= pool.bitmap.bits)
      return { refused: `${b.address} is outside the network's range now` };
    if (pool.bitmap.isSet(b.index)) return { refused: `${b.address} is allocated again (its bit is set)` };
    if (b.family === 4) v4 = v4!.with(b.index, true);
    else v6 = v6!.with(b.index, true);
  }
  return {
    object: withBitmaps(net, net.v4 && v4 ? v4.encode() : undefined, net.v6 && v6 ? v6.encode() : undefined),
  };
}

/** The network with bits set, under its resourceVersion: a refusal when it changed meanwhile. */
async function writeNetwork(
  kube: KubeReadWriter,
  w: Where,
  net: Network,
  object: KubeObject,
  ctx: Ctx,
): Promise<RestoreResult | undefined> {
  try {
    await kube.replace(danmResources(w.group)[net.type], object, ctx.signal);
    return undefined;
  } catch (err) {
    if (err instanceof ConflictError)
      return {
        outcome: 'refused',
        reason: 'the network changed meanwhile (an allocation?): run restore again',
      };
    throw err;
  }
}

async function network(reader: KubeReader, w: Where, ctx: Ctx): Promise<Network | string> {
  const net = await readNetwork(reader, w.group, w.type, w.namespace, w.name, ctx.signal);
  const label = `${w.type} ${w.namespace ? `${w.namespace}/` : ''}${w.name}`;
  if (!net) return `${label} is gone`;
  if (w.uid && net.uid !== w.uid) return `${label} was re-created (another UID)`;
  if (net.problem) return `${label} cannot be read: ${net.problem}`;
  return net;
}

export async function restoreEndpoint(
  reader: KubeReader,
  kube: KubeReadWriter,
  tomb: Tombstone,
  ctx: Ctx,
): Promise<RestoreResult> {
  const read = readPayload(tomb, ENDPOINT_TOMBSTONE);
  if (!read.ok) return { outcome: 'refused', reason: read.reason };
  const { object: ep, restore: w } = read;
  const ref = danmResources(w.group).danmeps;
  const where = `DanmEp ${ep.metadata.namespace}/${ep.metadata.name}`;
  if (await kube.get(ref, ep.metadata.namespace, ep.metadata.name, ctx.signal))
    return { outcome: 'refused', reason: `${where} exists now` };
  const net = await network(reader, w, ctx);
  if (typeof net === 'string') return { outcome: 'refused', reason: net };
  const bits: { family: 4 | 6; index: number; address: string }[] = [];
  for (const [family, text] of [
    [4, w.v4],
    [6, w.v6],
  ] as const) {
    if (!text) continue;
    const addr = parseAddress(text.split('/')[0]!);
    const pool = poolOf(net, family);
    const index = addr && pool ? bitIndex(pool, addr) : undefined;
    if (!addr || index === undefined)
      return { outcome: 'refused', reason: `${text} is not in the network's range now` };
    bits.push({ family, index, address: addr.text });
  }
  // No DanmEp of the network holds any of the addresses now (a bit can lag behind its DanmEp).
  const all = await reader.listAll(ref, { signal: ctx.signal });
  for (const o of all.items) {
    const p = parseEndpoint(o);
    if (!p.ok || p.ep.networkType !== net.type || p.ep.network !== net.name) continue;
    if (net.type !== 'ClusterNetwork' && p.ep.namespace !== net.namespace) continue;
    const held = bits.find((b) => p.ep.v4 === b.address || p.ep.v6 === b.address);
    if (held)
      return {
        outcome: 'refused',
        reason: `${held.address} is held by DanmEp ${p.ep.namespace}/${p.ep.name}`,
      };
  }
  const next = setting(net, bits);
  if ('refused' in next) return { outcome: 'refused', reason: next.refused! };
  const addrs = bits.map((b) => b.address).join(', ') || 'no address';
  if (!ctx.apply)
    return { outcome: 'ready', detail: `${where} would be created as it was, with ${addrs} set again` };
  if (bits.length > 0) {
    const conflict = await writeNetwork(kube, w, net, next.object!, ctx);
    if (conflict) return conflict;
  }
  try {
    const made = await kube.create(ref, asNew(ep as KubeObject), ctx.signal);
    return {
      outcome: 'restored',
      detail: `${where} created as it was (new uid ${made.metadata.uid}), ${addrs} set again`,
      ids: { uid: made.metadata.uid },
    };
  } catch (err) {
    // the DanmEp could not be made: its bits go back to clear, or they would leak
    const now = await network(reader, w, ctx);
    if (typeof now !== 'string') {
      let v4 = now.v4?.bitmap;
      let v6 = now.v6?.bitmap;
      for (const b of bits) {
        if (b.family === 4) v4 = v4?.with(b.index, false);
        else v6 = v6?.with(b.index, false);
      }
      await kube
        .replace(
          danmResources(w.group)[now.type],
          withBitmaps(now, now.v4 && v4 ? v4.encode() : undefined, now.v6 && v6 ? v6.encode() : undefined),
          ctx.signal,
        )
        .catch(() => {});
    }
    return {
      outcome: 'refused',
      reason: `${where} could not be created (${(err as Error).message}); its bits were cleared again`,
    };
  }
}

export async function restoreBit(
  reader: KubeReader,
  kube: KubeReadWriter,
  tomb: Tombstone,
  ctx: Ctx,
): Promise<RestoreResult> {
  const read = readPayload(tomb, BIT_TOMBSTONE);
  if (!read.ok) return { outcome: 'refused', reason: read.reason };
  const { object: b, restore: w } = read;
  const net = await network(reader, w, ctx);
  if (typeof net === 'string') return { outcome: 'refused', reason: net };
  const next = setting(net, [b]);
  if ('refused' in next) return { outcome: 'refused', reason: next.refused! };
  if (!ctx.apply) return { outcome: 'ready', detail: `${b.address} would be set again in ${net.id}` };
  const conflict = await writeNetwork(kube, w, net, next.object!, ctx);
  if (conflict) return conflict;
  return { outcome: 'restored', detail: `${b.address} set again in ${net.id}` };
}

export { BIT_TOMBSTONE, ENDPOINT_TOMBSTONE } from './data.ts';
