/**
 * The act phase of danm-endpoints: every confirmed target of one network (its DanmEps and
 * its leaked bits) is removed as one batch, against evidence shared by every batch of the
 * run and never older than the run's bound. The kind plans two steps; the runtime runs them
 * (shared/runtime/sequence.ts: tombstones before each write, a new plan after a conflict).
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
  type Answer,
  type BatchItemResult,
  type BatchSpec,
  deleteAsObserved,
  type FreshRead,
  type Note,
  type RunContext,
  type Settled,
  type Step,
  type Typed,
} from '../../shared/contract/index.ts';
import { ConflictError } from '../../shared/kube/errors.ts';
import type { KubeReader, KubeReadWriter } from '../../shared/kube/ports.ts';
import { answerShowsWrite, type KubeObject, type ResourceRef } from '../../shared/kube/resources.ts';
import { askHistory, type Clear, networkName, planClears, skipped, wantedOf } from './clears.ts';
import { setThroughout } from './continuity.ts';
import type { BIT_TOMBSTONE, BitData, ENDPOINT_TOMBSTONE, EpData, NetData, Settings } from './data.ts';
import { type DanmEvidence, danmEvidence, poolOf, readNetwork, withBitmaps } from './evidence.ts';
import { danmResources, type Network, networkId, parseNetwork } from './model.ts';

export type { NetData } from './data.ts';

type Ctx = RunContext<Settings>;
const WRITE_ATTEMPTS = 5;

const isEp = (t: Typed<NetData>): t is Typed<EpData> => t.kind === 'DanmEp';
const isBit = (t: Typed<NetData>): t is Typed<BitData> => t.kind === 'DanmBit';

/** The network a target's removal writes. */
export const networkOf = (d: NetData): string =>
  'podUID' in d
    ? networkId(d.networkType, d.namespace, d.network)
    : networkId(d.networkType, d.namespace, d.name);

/**
 * The steps of one network's batch (see the module comment for the order and why each
 * keeps law 6): its DanmEps, one write each; then its bits, one write of the network.
 */
export function networkSteps(
  _reader: KubeReader,
  targets: readonly Typed<NetData>[],
  ctx: Ctx,
): readonly Step<NetData, KubeReader, KubeReadWriter>[] {
  const d0 = targets[0]!.data;
  const b: NetBatch = {
    group: d0.group,
    id: networkOf(d0),
    ref: danmResources(d0.group).danmeps,
    ctx,
    bits: targets.filter(isBit),
  };
  return [endpointStep(b), networkStep(b)];
}

/** One network's batch: what its two steps share (the evidence, once read, and the addresses to clear). */
type NetBatch = {
  readonly group: string;
  readonly id: string;
  readonly ref: ResourceRef;
  readonly ctx: Ctx;
  readonly bits: readonly Typed<BitData>[];
  /** The batch's evidence: shared with every batch of the run, read again when older than the bound. */
  ev?: FreshRead<DanmEvidence>;
  /** The addresses the deleted DanmEps leave to clear, worked out once. */
  wanted?: Clear[];
};

// 1. A DanmEp: re-checked on the shared evidence, deleted with preconditions, read back.
function endpointStep(b: NetBatch): Step<NetData, KubeReader, KubeReadWriter> {
  const { group, ref, ctx } = b;
  return {
    takes: isEp,
    each: true,
    attempts: 1,
    async plan(reader, [t]) {
      const ep = t as Typed<EpData>;
      const d = ep.data;
      const skip = (reason: string) => ({ removing: [], results: [skipped(ep.key, reason)] });
      // A batch of thousands can outlive the bound: its later re-checks get evidence read again.
      b.ev = await danmEvidence(reader, group, ctx);
      const ev = b.ev;
      const rv = ev.value.eps.get(d.uid);
      if (rv === undefined) return skip('re-check: DanmEp is already gone');
      if (rv !== d.rv) return skip('re-check: DanmEp changed since the snapshot');
      if (ev.value.podNamespace(d.podUID) === d.namespace)
        return skip(`re-check: Pod ${d.namespace}/${d.pod} with UID ${d.podUID} exists`);
      // Its tombstone: the DanmEp as it is now (the same one: uid and resourceVersion), kept
      // whole by the evidence list (the DELETE's preconditions make it the object deleted),
      // else read; the addresses it holds are set again by a restore.
      const listed = ev.value.kept.get(d.uid);
      const before =
        listed?.metadata.resourceVersion === d.rv
          ? listed
          : await reader.get(ref, d.namespace, d.name, ctx.signal);
      if (!before || before.metadata.uid !== d.uid || before.metadata.resourceVersion !== d.rv)
        return skip('re-check: DanmEp changed or is gone');
      return {
        removing: [
          {
            target: ep,
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
        ],
        write: (kube, signal) => deleteAsObserved(kube, ref, d, 'the DanmEp', signal),
        readBack: (r, out) => endpointReadBack(b, r, ep, out),
      };
    },
  };
}

/** What the DanmEp's delete did; a deleted one carries its addresses to the network's write. */
async function endpointReadBack(b: NetBatch, r: KubeReader, t: Typed<EpData>, out: Answer): Promise<Settled> {
  const { ref, ctx } = b;
  const d = t.data;
  const one = (x: BatchItemResult): Settled => ({ results: [x] });
  if ('unknown' in out) {
    // An answer that cannot be read: a read says. Gone is told as "gone", not "deleted": it
    // cannot be told from a delete by someone else, whose bits are not this run's to clear.
    const now = await r.get(ref, d.namespace, d.name, ctx.signal).catch(() => 'unreadable' as const);
    if (now !== 'unreadable' && (!now || now.metadata.uid !== d.uid))
      return one({
        key: t.key,
        outcome: 'gone',
        detail: `unknown answer (${out.unknown}), read back: gone; its bits are left to the next observation`,
      });
    return one({
      key: t.key,
      outcome: 'failed',
      error: `${out.unknown}; read back: ${now === 'unreadable' ? 'unreadable' : 'the DanmEp is still there'}`,
    });
  }
  const res = out.answer as Awaited<ReturnType<typeof deleteAsObserved>>;
  if (res.outcome === 'skipped') return one(skipped(t.key, res.reason));
  // Gone before us: whoever deleted it owns its bits; clearing them again could free an address twice.
  if (res.outcome === 'gone')
    return one({
      key: t.key,
      outcome: 'gone',
      detail: 'DanmEp was already gone; its bits are left to the next observation',
    });
  // Its own answer named its UID, or a read finds it gone (a bare Success proves nothing, 0007).
  const shown = res.outcome === 'deleted' && res.shownGone === true;
  const still = shown ? undefined : await r.get(ref, d.namespace, d.name, ctx.signal);
  if (still && still.metadata.uid === d.uid)
    return one({
      key: t.key,
      outcome: 'failed',
      error: 'the server answered deleted but a read still finds the DanmEp; its addresses are left set',
    });
  return {
    results: [{ key: t.key, outcome: 'deleted', detail: `DanmEp ${d.namespace}/${d.name} deleted` }],
    ...(d.v4 || d.v6 ? { carry: [t] } : { notes: [[t.key, 'no address']] }),
  };
}

// 2. The bits: those of the deleted DanmEps and the leaked ones, in one write of the network
// on the resourceVersion listed before the evidence.
function networkStep(b: NetBatch): Step<NetData, KubeReader, KubeReadWriter> {
  const { group, id, ctx, bits } = b;
  return {
    takes: isBit,
    forCarried: true,
    attempts: WRITE_ATTEMPTS,
    contended: (err) => err instanceof ConflictError,
    async plan(reader, pending, attempt, carried) {
      const notes: Note[] = [];
      if (!b.wanted) b.wanted = wantedOf(carried as Typed<EpData>[], notes);
      const want = b.wanted;
      // Someone else wrote the network since it was listed: it and the evidence are read again
      // (once for every batch waiting on it). Comparing bitmaps could not tell an address freed
      // and handed to a new pod in between from one never touched.
      b.ev = await danmEvidence(reader, group, ctx, attempt > 1 ? b.ev : undefined);
      const ev = b.ev;
      const net = ev.value.networks.get(id);
      const results: BatchItemResult[] = [];
      const keepAll = (why: string, note: string) => {
        for (const c of want) notes.push([c.key, `${c.address}: ${note}`]);
        for (const t of pending) results.push(skipped(t.key, why));
        return { removing: [], results, notes };
      };
      if (!net || (bits[0] && net.uid !== bits[0].data.uid))
        return keepAll('network is gone or was re-created', 'network gone, nothing to clear');
      if (net.problem)
        return keepAll(
          `network cannot be read: ${net.problem}`,
          `network unreadable (${net.problem}), left set`,
        );
      const history = await setSinceSnapshot(reader, group, net, pending as Typed<BitData>[], ctx);
      const clearing = planClears(
        net,
        want,
        pending as Typed<BitData>[],
        ev.value,
        gone(carried),
        notes,
        results,
        history,
      );
      if (clearing.length === 0) return { removing: [], results, notes };
      return { ...networkWrite(b, net, clearing), results, notes };
    },
  };
}

/**
 * Per leaked-bit target on a network written since the snapshot: whether the network's
 * history since shows its bit set in every state (true), or why not (decision 0016).
 */
async function setSinceSnapshot(
  reader: KubeReader,
  group: string,
  net: Network,
  bits: readonly Typed<BitData>[],
  ctx: Ctx,
): Promise<Map<string, true | string>> {
  const out = new Map<string, true | string>();
  for (const [family, ts] of askHistory(net, bits)) {
    const byRv = new Map<string, Typed<BitData>[]>();
    for (const t of ts) byRv.set(t.data.rv, [...(byRv.get(t.data.rv) ?? []), t]);
    for (const [from, mine] of byRv) {
      const idx = mine.map((t) => t.data.index);
      const set = await setThroughout(reader, group, net, family, idx, from, ctx.signal);
      for (const [k, t] of mine.entries())
        out.set(
          t.key,
          'broken' in set
            ? `its history cannot be read (${set.broken})`
            : set[k]
              ? true
              : 'the address was freed and set again in between',
        );
    }
  }
  return out;
}

/** The write of the network that clears `clearing`, its tombstones, its read-back. */
function networkWrite(b: NetBatch, net: Network, clearing: readonly Clear[]) {
  const { group, id, ctx, bits } = b;
  let v4 = net.v4?.bitmap;
  let v6 = net.v6?.bitmap;
  for (const c of clearing)
    if (c.family === 4) v4 = v4!.with(c.index, false);
    else v6 = v6!.with(c.index, false);
  const byKey = new Map(bits.map((b) => [b.key, b]));
  // The leaked bits as they are set in the fresh network, durable before the write clears
  // them (the bits of deleted DanmEps are in their DanmEps' tombstones).
  const removing = clearing
    .filter((c) => c.bit)
    .map((c) => ({
      target: byKey.get(c.key)!,
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
        type: net.type,
        namespace: net.namespace,
        name: net.name,
        uid: net.uid,
      } satisfies z.input<typeof BIT_TOMBSTONE.restore>,
    }));
  /** Per bit cleared: a leaked bit's result, or a note on the deleted DanmEp whose address it is. */
  const each = (bit: (c: Clear) => BatchItemResult, ep: (c: Clear) => string): Settled => ({
    results: clearing.filter((c) => c.bit).map(bit),
    notes: clearing.filter((c) => !c.bit).map((c): Note => [c.key, `${c.address}: ${ep(c)}`]),
  });
  return {
    removing,
    write: (kube: KubeReadWriter, signal: AbortSignal) =>
      kube.replace(
        danmResources(group)[net.type],
        withBitmaps(net, net.v4 && v4 ? v4.encode() : undefined, net.v6 && v6 ? v6.encode() : undefined),
        signal,
      ),
    /**
     * A bit still set was not cleared, whatever the write answered. The write's own answer is
     * that read when it shows the write: the same network at a new resourceVersion (a proxy's
     * "success" that never reached the server answers the network as it was, at the
     * resourceVersion sent, and is read again).
     */
    async readBack(r: KubeReader, out: Answer): Promise<Settled> {
      const unknown = 'unknown' in out ? `unknown answer (${out.unknown}), read back` : undefined;
      const answer = 'answer' in out ? (out.answer as KubeObject | undefined) : undefined;
      const shown = answerShowsWrite(answer, net.uid, net.resourceVersion)
        ? parseNetwork(answer!, net.type)
        : undefined;
      const after = shown ?? (await readNetwork(r, group, net.type, net.namespace, net.name, ctx.signal));
      const readable = after !== undefined && after.uid === net.uid && !after.problem;
      const said = unknown ? `${unknown}: ` : '';
      // A network that cannot be read back after an answer that could not be read: not proven cleared.
      const left = (c: Clear) =>
        readable ? poolOf(after, c.family)?.bitmap.isSet(c.index) === true : unknown !== undefined;
      return each(
        (c) =>
          left(c)
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
                detail: `${said}cleared ${c.address} in ${networkName(c.bit!)}`,
              },
        (c) =>
          left(c)
            ? `${said}left set (a read-back finds the bit still set; a later run reclaims it as a leaked bit)`
            : `${said}cleared`,
      );
    },
    lost: (n: number): Settled => {
      const why = `the network kept changing (${n} conflicts), left set (a later run reclaims it as a leaked bit)`;
      return each(
        (c) => ({ key: c.key, outcome: 'skipped', reason: why, contended: true }),
        () => why,
      );
    },
    notWritten: (why: string): Settled =>
      each(
        (c) => ({ key: c.key, outcome: 'failed', error: `nothing cleared: ${why}` }),
        () => "left set (its DanmEp's tombstone is written; the bits' write was not tried)",
      ),
  };
}

/** The UIDs of the DanmEps an earlier step deleted (their addresses are no one's now). */
const gone = (carried: readonly unknown[]) => new Set((carried as Typed<EpData>[]).map((t) => t.data.uid));

export const networkBatch: BatchSpec<NetData, KubeReader, KubeReadWriter, Settings> = {
  key: networkOf,
  steps: networkSteps,
};
