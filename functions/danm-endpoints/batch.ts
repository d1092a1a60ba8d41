/**
 * The act phase of danm-endpoints: every confirmed target of one network (its DanmEps and
 * its leaked bits) is removed as one batch, against evidence shared by every batch of the
 * run and never older than the run's bound.
 *
 * The evidence is read as a snapshot is: the networks first, then the DanmEps, then the
 * pods. A batch
 *  1. re-checks each DanmEp against it (still there, unchanged, its Pod by UID still gone)
 *     and deletes it with preconditions {uid, resourceVersion}; a read confirms it gone;
 *  2. clears, in ONE write of the network on the resourceVersion listed before the
 *     evidence, the addresses of the DanmEps it deleted and its leaked bits, each only if
 *     still set, clearable, held by no other DanmEp and no pod is being set up there;
 *  3. on a conflict (someone wrote the network since it was listed), reads the evidence
 *     again, networks first, and re-checks every bit (once for every batch waiting on it);
 *  4. reads the network back: a bit still set is "left set", whatever the answer was.
 * A DanmEp is deleted before its bits are cleared: a crash in between leaks an address (a
 * later run reclaims it as a leaked bit), it never frees one twice.
 */
import type { z } from 'zod';
import {
  type BatchItemResult,
  BatchResults,
  type BatchSpec,
  checkFreshCount,
  contendedPause,
  deleteAsObserved,
  type EventNote,
  type FreshRead,
  freshEvidence,
  messageOf,
  type Removed,
  type RunContext,
  type Typed,
  writeTombstones,
} from '../../shared/contract/index.ts';
import { ConflictError } from '../../shared/kube/errors.ts';
import type { KubeReader, KubeReadWriter } from '../../shared/kube/ports.ts';
import { answerShowsWrite, type KubeObject } from '../../shared/kube/resources.ts';
import { parseAddress } from '../../shared/net/ip.ts';
import { Bitmap } from './bitmap.ts';
import type { BitData } from './bits.ts';
import type { EpData, Settings } from './endpoint.ts';
import { type DanmEvidence, poolOf, readDanmEvidence, readNetwork, withBitmaps } from './evidence.ts';
import {
  bitIndex,
  clearable,
  danmResources,
  type Network,
  networkId,
  type Pool,
  parseNetwork,
} from './model.ts';
import type { BIT_TOMBSTONE, ENDPOINT_TOMBSTONE } from './restore.ts';

export type NetData = EpData | BitData;
type Ctx = RunContext<Settings>;
const WRITE_ATTEMPTS = 5;

/** The evidence of the run's act phase (shared by every batch, re-read when older than the bound). */
export function danmEvidence(
  kube: KubeReader,
  group: string,
  ctx: Ctx,
  newerThan?: FreshRead<DanmEvidence>,
): Promise<FreshRead<DanmEvidence>> {
  return freshEvidence(
    ctx,
    `danm-endpoints:${group}`,
    async () => {
      const ev = await readDanmEvidence(
        kube,
        group,
        ctx.settings.pageSize,
        ctx.signal,
        ctx.settings.serverSkewSeconds * 1000,
      );
      // held to the snapshot that decided, as the snapshot was to the run before it
      checkFreshCount(ctx, 'pods', ev.podCount);
      return ev;
    },
    newerThan ? { newerThan } : {},
  );
}

const isEp = (t: Typed<NetData>): t is Typed<EpData> => t.kind === 'DanmEp';
const isBit = (t: Typed<NetData>): t is Typed<BitData> => t.kind === 'DanmBit';

/** The network a target's removal writes. */
export const networkOf = (d: NetData): string =>
  'podUID' in d
    ? networkId(d.networkType, d.namespace, d.network)
    : networkId(d.networkType, d.namespace, d.name);

const networkName = (d: NetData) =>
  `${d.networkType} ${d.networkType === 'ClusterNetwork' || !d.namespace ? '' : `${d.namespace}/`}${'podUID' in d ? d.network : d.name}`;

/** Runs `work` on every item, at most `n` at once. */
async function eachLimited<T>(
  items: readonly T[],
  n: number,
  work: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await work(items[next++]!);
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(n, items.length)) }, worker));
}

/** A bit to clear: its family and index, for whom, and the address as text. */
type Clear = { key: string; family: 4 | 6; index: number; address: string; bit?: BitData };

/**
 * Bits of a leaked-bit target: safe to clear on `pool` when no address was allocated since
 * the snapshot (only clears happened, so the bit cannot have a new owner).
 */
function allocatedSince(pool: Pool | undefined, d: BitData): string | undefined {
  if (!pool) return 'the address family is gone from the network';
  if (!pool.bitmap.isSet(d.index)) return 'bit is no longer set';
  const seen = Bitmap.decode(d.alloc, pool.cidr);
  if (typeof seen === 'string') return `observed bitmap unreadable: ${seen}`;
  if (newlySet(seen, pool.bitmap)) return 'an address was allocated in the network since the snapshot';
  if (!clearable(pool, d.index)) return 'bit is no longer clearable';
  return undefined;
}

/** True when `now` has a bit set that `before` had clear (an allocation happened in between). */
function newlySet(before: Bitmap, now: Bitmap): boolean {
  for (const i of now.setBits()) if (!before.isSet(i)) return true;
  return false;
}

/**
 * Removes the confirmed targets of one network. See the module comment for the order and
 * why each step keeps law 6.
 */
export async function removeOnNetwork(
  reader: KubeReader,
  kube: KubeReadWriter,
  targets: readonly Typed<NetData>[],
  ctx: Ctx,
): Promise<BatchItemResult[]> {
  const d0 = targets[0]!.data;
  const { group } = d0;
  const id = networkOf(d0);
  const results = new BatchResults(targets);
  const epDetail = new Map<string, string[]>();
  let ev = await danmEvidence(reader, group, ctx);

  // 1. DanmEps: re-checked on the shared evidence, deleted with preconditions, read back.
  const gone: Typed<EpData>[] = [];
  await eachLimited(targets.filter(isEp), ctx.concurrency ?? 1, async (t) => {
    const d = t.data;
    // A batch of thousands can outlive the bound: its later re-checks get evidence read again.
    ev = await danmEvidence(reader, group, ctx);
    const rv = ev.value.eps.get(d.uid);
    if (rv === undefined) return results.skip(t.key, 're-check: DanmEp is already gone');
    if (rv !== d.rv) return results.skip(t.key, 're-check: DanmEp changed since the snapshot');
    if (ev.value.pods.get(d.podUID) === d.namespace)
      return results.skip(t.key, `re-check: Pod ${d.namespace}/${d.pod} with UID ${d.podUID} exists`);
    const ref = danmResources(group).danmeps;
    // Its tombstone: the DanmEp as it is now (the same one: uid and resourceVersion), durable
    // before the delete; the addresses it holds are set again by a restore.
    const before = await reader.get(ref, d.namespace, d.name, ctx.signal);
    if (!before || before.metadata.uid !== d.uid || before.metadata.resourceVersion !== d.rv)
      return results.skip(t.key, 're-check: DanmEp changed or is gone');
    try {
      await writeTombstones(ctx, [
        {
          key: t.key,
          kind: t.kind,
          name: t.name,
          object: before,
          restore: {
            group,
            type: d.networkType,
            namespace: d.namespace,
            name: d.network,
            v4: d.v4,
            v6: d.v6,
          } satisfies z.input<typeof ENDPOINT_TOMBSTONE.restore>,
        },
      ]);
    } catch (err) {
      return results.set({ key: t.key, outcome: 'failed', error: `nothing deleted: ${messageOf(err)}` });
    }
    const out = await deleteAsObserved(kube, ref, d, 'the DanmEp', ctx.signal).catch(async (err: Error) => {
      // An answer that cannot be read: the outcome comes from a read-back. Gone is told as
      // "gone", not "deleted": it cannot be told from a delete by someone else, whose bits
      // are not this run's to clear.
      const now = await reader.get(ref, d.namespace, d.name, ctx.signal).catch(() => 'unreadable' as const);
      if (now !== 'unreadable' && (!now || now.metadata.uid !== d.uid))
        return {
          outcome: 'unknown-gone' as const,
          detail: `unknown answer (${err.message}), read back: gone`,
        };
      return {
        outcome: 'failed' as const,
        error: `${err.message}; read back: ${now === 'unreadable' ? 'unreadable' : 'the DanmEp is still there'}`,
      };
    });
    if (out.outcome === 'failed') return results.set({ key: t.key, outcome: 'failed', error: out.error });
    if (out.outcome === 'unknown-gone')
      return results.set({
        key: t.key,
        outcome: 'gone',
        detail: `${out.detail}; its bits are left to the next observation`,
      });
    if (out.outcome === 'skipped') return results.skip(t.key, out.reason);
    // Gone before us: whoever deleted it owns its bits; clearing them again could free an address twice.
    if (out.outcome === 'gone')
      return results.set({
        key: t.key,
        outcome: 'gone',
        detail: 'DanmEp was already gone; its bits are left to the next observation',
      });
    // Its own answer named its UID, or a read finds it gone (a bare Success proves nothing, 0007).
    const shown = out.outcome === 'deleted' && out.shownGone === true;
    const still = shown ? undefined : await reader.get(ref, d.namespace, d.name, ctx.signal);
    if (still && still.metadata.uid === d.uid)
      return results.set({
        key: t.key,
        outcome: 'failed',
        error: 'the server answered deleted but a read still finds the DanmEp; its addresses are left set',
      });
    gone.push(t);
  });

  // 2. The bits: those of the deleted DanmEps and the leaked ones, in one write of the network.
  const wanted: Clear[] = [];
  for (const t of gone)
    for (const [family, text] of [
      [4, t.data.v4],
      [6, t.data.v6],
    ] as const) {
      if (!text) continue;
      const addr = parseAddress(text.split('/')[0]!);
      if (!addr) {
        note(epDetail, t.key, `${text}: unparsable, left set`);
        continue;
      }
      wanted.push({ key: t.key, family, index: -1, address: addr.text });
    }
  const bits = targets.filter(isBit);
  const deletedEps = new Set(gone.map((t) => t.data.uid));
  // The network as listed before the evidence: its resourceVersion is the write's precondition.
  let net: Network | undefined;
  for (let attempt = 1; attempt <= WRITE_ATTEMPTS && (wanted.length > 0 || bits.length > 0); attempt++) {
    // Evidence older than the bound is read again before the write (and the network with it).
    if (attempt === 1) {
      ev = await danmEvidence(reader, group, ctx);
      net = ev.value.networks.get(id);
    }
    if (!net || (bits[0] && net.uid !== bits[0].data.uid)) {
      for (const c of wanted) note(epDetail, c.key, `${c.address}: network gone, nothing to clear`);
      for (const t of bits) results.skip(t.key, 'network is gone or was re-created');
      break;
    }
    if (net.problem) {
      for (const c of wanted)
        note(epDetail, c.key, `${c.address}: network unreadable (${net.problem}), left set`);
      for (const t of bits) results.skip(t.key, `network cannot be read: ${net.problem}`);
      break;
    }
    const clearing: Clear[] = [];
    let v4 = net.v4?.bitmap;
    let v6 = net.v6?.bitmap;
    const clear = (c: Clear) => {
      if (c.family === 4) v4 = v4!.with(c.index, false);
      else v6 = v6!.with(c.index, false);
      clearing.push(c);
    };
    for (const c of wanted) {
      const pool = poolOf(net, c.family);
      const addr = parseAddress(c.address)!;
      const index = pool ? bitIndex(pool, addr) : undefined;
      if (!pool || index === undefined) {
        note(epDetail, c.key, `${c.address}: outside the network range, left alone`);
        continue;
      }
      if (!pool.bitmap.isSet(index)) {
        note(epDetail, c.key, `${c.address}: already clear`);
        continue;
      }
      if (!clearable(pool, index)) {
        note(epDetail, c.key, `${c.address}: reserved, left set`);
        continue;
      }
      const v = ev.value.holders.verdict(net, c.family, index, deletedEps);
      if (v !== undefined) {
        note(epDetail, c.key, `${c.address}: ${'used' in v ? v.used : v.indeterminate}, left set`);
        continue;
      }
      clear({ ...c, index });
    }
    for (const t of bits) {
      const d = t.data;
      if (results.has(t.key)) continue;
      const v = ev.value.holders.verdict(net, d.family, d.index);
      const why = allocatedSince(poolOf(net, d.family), d) ?? (v && ('used' in v ? v.used : v.indeterminate));
      if (why) {
        results.skip(t.key, `re-check: ${d.address}: ${why}`);
        continue;
      }
      clear({ key: t.key, family: d.family, index: d.index, address: d.address, bit: d });
    }
    if (clearing.length === 0) break;
    // The leaked bits as they are set in the fresh network, durable before the write clears them
    // (the bits of deleted DanmEps are in their DanmEps' tombstones).
    const leaked = clearing.filter((c) => c.bit);
    try {
      await writeTombstones(
        ctx,
        leaked.map((c) => ({
          key: c.key,
          kind: bits.find((b) => b.key === c.key)!.kind,
          name: bits.find((b) => b.key === c.key)!.name,
          object: {
            network: id,
            family: c.family,
            index: c.index,
            address: c.address,
            set: true,
          } satisfies z.input<typeof BIT_TOMBSTONE.object>,
          restore: {
            group,
            network: id,
            type: net!.type,
            namespace: net!.namespace,
            name: net!.name,
            uid: net!.uid,
          } satisfies z.input<typeof BIT_TOMBSTONE.restore>,
        })),
      );
    } catch (err) {
      for (const c of leaked)
        results.set({ key: c.key, outcome: 'failed', error: `nothing cleared: ${messageOf(err)}` });
      for (const c of clearing.filter((x) => !x.bit))
        note(
          epDetail,
          c.key,
          `${c.address}: left set (its DanmEp's tombstone is written; the bits' write was not tried)`,
        );
      break;
    }
    const written = net;
    /**
     * Read back: a bit still set was not cleared, whatever the write answered. The write's own
     * answer is that read when it shows the write: the same network at a new resourceVersion
     * (a proxy's "success" that never reached the server answers the network as it was, at
     * the resourceVersion sent, and is read again).
     */
    const readBack = async (unknown?: string, answer?: KubeObject) => {
      const shown = answerShowsWrite(answer, written.uid, written.resourceVersion)
        ? parseNetwork(answer!, written.type)
        : undefined;
      const after =
        shown ??
        (await readNetwork(reader, group, written.type, written.namespace, written.name, ctx.signal));
      const readable = after !== undefined && after.uid === written.uid && !after.problem;
      const said = unknown ? `${unknown}: ` : '';
      for (const c of clearing) {
        const pool = readable ? poolOf(after, c.family) : undefined;
        // A network that cannot be read back after an answer that could not be read: not proven cleared.
        const left = readable ? pool?.bitmap.isSet(c.index) === true : unknown !== undefined;
        if (c.bit)
          results.set(
            left
              ? {
                  key: c.key,
                  outcome: 'failed',
                  error: unknown
                    ? `${said}the bit is still set (or the network cannot be read)`
                    : 'the update answered success, but a read-back finds the bit still set',
                }
              : {
                  key: c.key,
                  outcome: 'deleted',
                  detail: `${said}cleared ${c.address} in ${networkName(c.bit)}`,
                },
          );
        else
          note(
            epDetail,
            c.key,
            left
              ? `${c.address}: ${said}left set (a read-back finds the bit still set; a later run reclaims it as a leaked bit)`
              : `${c.address}: ${said}cleared`,
          );
      }
    };
    let answer: KubeObject | undefined;
    try {
      answer = await kube.replace(
        danmResources(group)[net.type],
        withBitmaps(net, net.v4 && v4 ? v4.encode() : undefined, net.v6 && v6 ? v6.encode() : undefined),
        ctx.signal,
      );
    } catch (err) {
      const conflict = err instanceof ConflictError;
      if (conflict && attempt < WRITE_ATTEMPTS) {
        // Someone else wrote the network since it was listed: read it and the evidence again
        // (once for every batch waiting on it). Comparing bitmaps could not tell an address
        // freed and handed to a new pod in between from one never touched.
        await contendedPause(attempt, ctx);
        ev = await danmEvidence(reader, group, ctx, ev);
        net = ev.value.networks.get(id);
        continue;
      }
      if (!conflict) {
        // An answer that cannot be read (a Status Failure in a 200, a reset after sending):
        // the write may have happened. What the network holds now says.
        await readBack(`unknown answer (${(err as Error).message}), read back`);
        break;
      }
      for (const c of clearing) {
        const why = `the network kept changing (${WRITE_ATTEMPTS} conflicts), left set (a later run reclaims it as a leaked bit)`;
        if (c.bit) results.set({ key: c.key, outcome: 'skipped', reason: why, contended: true });
        else note(epDetail, c.key, `${c.address}: ${why}`);
      }
      break;
    }
    await readBack(undefined, answer);
    break;
  }
  for (const t of gone)
    results.set({
      key: t.key,
      outcome: 'deleted',
      detail: `DanmEp ${t.data.namespace}/${t.data.name} deleted; ${epDetail.get(t.key)?.join(', ') || 'no address'}`,
    });
  return results.all('not attempted');
}

function note(m: Map<string, string[]>, key: string, text: string): void {
  const l = m.get(key);
  if (l) l.push(text);
  else m.set(key, [text]);
}

export const networkBatch: BatchSpec<NetData, KubeReader, KubeReadWriter, Settings> = {
  key: networkOf,
  remove: removeOnNetwork,
};

/** One Event per batch, on the network: the DanmEps deleted and the addresses cleared. */
export function networkEvent(removed: readonly Removed<NetData>[]): EventNote | undefined {
  const d0 = removed[0]?.target.data;
  if (!d0) return undefined;
  const eps: EpData[] = [];
  const bits: BitData[] = [];
  for (const { target } of removed)
    if ('podUID' in target.data) eps.push(target.data);
    else bits.push(target.data);
  const uid = bits[0]?.uid;
  const name = 'podUID' in d0 ? d0.network : d0.name;
  const ns = d0.networkType === 'ClusterNetwork' ? undefined : d0.namespace;
  const parts: string[] = [];
  if (eps.length)
    parts.push(
      `deleted ${eps.length} DanmEp${eps.length === 1 ? '' : 's'} of gone pods (${eps.map((e) => `${e.name} of Pod ${e.pod}, UID ${e.podUID}`).join('; ')})`,
    );
  if (bits.length)
    parts.push(
      `cleared ${bits.length} leaked address${bits.length === 1 ? '' : 'es'} held by no DanmEp (${bits.map((b) => b.address).join(', ')})`,
    );
  return {
    // An Event about a cluster-scoped object lives in `default` (the API server refuses another
    // namespace with 422: involvedObject.namespace "" does not match).
    namespace: ns ?? 'default',
    involved: {
      apiVersion: `${d0.group}/v1`,
      kind: d0.networkType,
      name,
      ...(ns ? { namespace: ns } : {}),
      ...(uid ? { uid } : {}),
    },
    reason: eps.length ? 'DanmEndpointReclaimed' : 'DanmAddressReclaimed',
    message: `twopass ${parts.join('; and ')} in ${networkName(d0)}`,
  };
}
