/**
 * The DanmBit kind: an address bit set in a DANM network's bitmap that no DanmEp holds.
 * The leaked bits of one network are cleared together, in one write with the network's
 * resourceVersion, after one fresh read of the network and of the evidence.
 */
import { z } from 'zod';
import {
  type BatchItemResult,
  BatchResults,
  type KindSpec,
  type RunContext,
  type Typed,
} from '../../shared/contract/index.ts';
import { ConflictError } from '../../shared/kube/errors.ts';
import type { KubeClient, KubeReader } from '../../shared/kube/ports.ts';
import { Bitmap } from './bitmap.ts';
import type { Settings } from './endpoint.ts';
import { networkType } from './endpoint.ts';
import { freshEvidence, poolOf, readNetwork, withBitmaps } from './evidence.ts';
import { clearable, danmResources, type Pool } from './model.ts';

export const bitData = z.object({
  group: z.string().min(1),
  networkType,
  namespace: z.string().min(1).optional(),
  name: z.string().min(1),
  uid: z.string().min(1),
  rv: z.string().min(1),
  family: z.union([z.literal(4), z.literal(6)]),
  index: z.number().int().min(0),
  address: z.string().min(1),
  /** The pool's bitmap as observed (base64), to tell bits cleared since from bits newly set. */
  alloc: z.string(),
});
export type BitData = z.output<typeof bitData>;

const BATCH_ATTEMPTS = 5;

const where = (d: BitData) => `${d.networkType} ${d.namespace ? `${d.namespace}/` : ''}${d.name}`;

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
  if (!clearable(pool, d.index)) return 'bit is no longer clearable';
  return undefined;
}

/**
 * One fresh read of the network and of the evidence re-check every bit; one write with
 * the network's resourceVersion clears those still unheld; a conflict re-reads and
 * re-checks; a read-back confirms.
 */
async function clearBits(
  reader: KubeReader,
  kube: KubeClient,
  targets: readonly Typed<BitData>[],
  ctx: RunContext<Settings>,
): Promise<BatchItemResult[]> {
  const d0 = targets[0]!.data;
  const results = new BatchResults(targets);
  const read = () => readNetwork(reader, d0.group, d0.networkType, d0.namespace, d0.name, ctx.signal);
  for (let attempt = 1; attempt <= BATCH_ATTEMPTS; attempt++) {
    const net = await read();
    if (!net || net.uid !== d0.uid) {
      results.rest((key) => ({ key, outcome: 'skipped', reason: 'network is gone or was re-created' }));
      break;
    }
    if (net.problem) {
      results.rest((key) => ({ key, outcome: 'skipped', reason: `network cannot be read: ${net.problem}` }));
      break;
    }
    const holder = await freshEvidence(reader, d0.group, net, ctx.signal);
    let v4 = net.v4?.bitmap;
    let v6 = net.v6?.bitmap;
    const clearing: Typed<BitData>[] = [];
    for (const t of targets) {
      const d = t.data;
      if (results.has(t.key)) continue;
      const why = allocatedSince(poolOf(net, d.family), d) ?? holder(d.family, d.index);
      if (why) {
        results.skip(t.key, `re-check: ${d.address}: ${why}`);
        continue;
      }
      if (d.family === 4) v4 = v4!.with(d.index, false);
      else v6 = v6!.with(d.index, false);
      clearing.push(t);
    }
    if (clearing.length === 0) break;
    try {
      await kube.replace(
        danmResources(d0.group)[d0.networkType],
        withBitmaps(net, net.v4 && v4 ? v4.encode() : undefined, net.v6 && v6 ? v6.encode() : undefined),
        ctx.signal,
      );
    } catch (err) {
      const conflict = err instanceof ConflictError;
      if (conflict && attempt < BATCH_ATTEMPTS) continue;
      for (const t of clearing)
        results.set(
          conflict
            ? {
                key: t.key,
                outcome: 'skipped',
                reason: `the network kept changing (${BATCH_ATTEMPTS} conflicts)`,
              }
            : { key: t.key, outcome: 'failed', error: (err as Error).message },
        );
      break;
    }
    // Read back: a success that did not happen is a failure, never "cleared".
    const after = await read();
    const unchanged = after?.uid === net.uid && after.resourceVersion === net.resourceVersion;
    for (const t of clearing) {
      const pool = unchanged ? poolOf(after, t.data.family) : undefined;
      results.set(
        pool?.bitmap.isSet(t.data.index)
          ? {
              key: t.key,
              outcome: 'failed',
              error: 'the update answered success, but a read-back finds the network unchanged',
            }
          : { key: t.key, outcome: 'deleted', detail: `cleared ${t.data.address} in ${where(t.data)}` },
      );
    }
    break;
  }
  return results.all('the network kept changing');
}

export const bitKind: KindSpec<BitData, KubeReader, KubeClient, Settings> = {
  data: bitData,
  unused:
    "the address is set in the network's bitmap, no DanmEp holds it, and no pod is being set up on the network",
  removal:
    "clear the bit in the network's allocation bitmap (one update of the network, on the resourceVersion read)",
  async recheck(kube, { data: d }, ctx) {
    const net = await readNetwork(kube, d.group, d.networkType, d.namespace, d.name, ctx.signal);
    if (!net) return { ok: false, reason: 'network is gone' };
    if (net.uid !== d.uid) return { ok: false, reason: 'network was re-created' };
    const why = allocatedSince(poolOf(net, d.family), d);
    if (why) return { ok: false, reason: why };
    const holder = (await freshEvidence(kube, d.group, net, ctx.signal))(d.family, d.index);
    return holder ? { ok: false, reason: `${d.address}: ${holder}` } : { ok: true };
  },
  // One bit alone: the same write as a batch of one.
  async remove(kube, t, ctx) {
    const [r] = await clearBits(kube, kube, [t], ctx);
    if (!r || r.outcome === 'failed') throw new Error(r?.error ?? 'no result');
    return r;
  },
  async confirmGone(kube, { data: d }, ctx) {
    const net = await readNetwork(kube, d.group, d.networkType, d.namespace, d.name, ctx.signal);
    const pool = net ? poolOf(net, d.family) : undefined;
    return !net || net.uid !== d.uid || !pool || !pool.bitmap.isSet(d.index);
  },
  event(removed) {
    const d0 = removed[0]!.target.data;
    const addresses = removed.map((r) => r.target.data.address);
    return {
      namespace: d0.namespace ?? 'default',
      involved: {
        apiVersion: `${d0.group}/v1`,
        kind: d0.networkType,
        name: d0.name,
        ...(d0.namespace ? { namespace: d0.namespace } : {}),
        uid: d0.uid,
      },
      reason: 'DanmAddressReclaimed',
      message: `twopass cleared ${addresses.length} leaked address${addresses.length === 1 ? '' : 'es'} (held by no DanmEp) in ${d0.networkType} ${d0.name}: ${addresses.join(', ')}`,
    };
  },
  batch: { key: (d) => d.uid, remove: clearBits },
};
