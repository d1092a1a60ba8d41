/**
 * What one write of a DANM network clears, planned on the network as freshly read: the
 * addresses of the DanmEps the batch deleted, and its leaked bits, each only if still set,
 * clearable and held by no one (law 6 on the network's bitmap).
 */
import type { BatchItemResult, Note, Typed } from '../../shared/contract/index.ts';
import { parseAddress } from '../../shared/net/ip.ts';
import type { BitData, EpData } from './data.ts';
import { type DanmEvidence, poolOf } from './evidence.ts';
import { bitIndex, clearable, type Network } from './model.ts';

/** How a network and its namespace are named in details and Events. */
export const networkName = (d: EpData | BitData) =>
  `${d.networkType} ${d.networkType === 'ClusterNetwork' || !d.namespace ? '' : `${d.namespace}/`}${'podUID' in d ? d.network : d.name}`;

export const skipped = (key: string, reason: string): BatchItemResult => ({
  key,
  outcome: 'skipped',
  reason,
});

/** A bit to clear: its family and index, for whom, and the address as text. */
export type Clear = { key: string; family: 4 | 6; index: number; address: string; bit?: BitData };

/**
 * Bits of a leaked-bit target: safe to clear on `net` when the network was not written
 * since the snapshot, or its history since shows this bit set in every state (`history`,
 * decision 0016): it was never freed, so never handed out again. Comparing bitmaps cannot
 * tell: an address freed and handed to a new pod leaves the same bits.
 */
function changedSince(net: Network, d: BitData, history: true | string | undefined): string | undefined {
  const pool = poolOf(net, d.family);
  if (!pool) return 'the address family is gone from the network';
  if (!pool.bitmap.isSet(d.index)) return 'bit is no longer set';
  if (net.resourceVersion !== d.rv && history !== true)
    return `the network was written since the snapshot and ${history ?? 'its history was not read'}`;
  if (!clearable(pool, d.index)) return 'bit is no longer clearable';
  return undefined;
}

/** The leaked-bit targets of `bits` (by family) still set on a network written since the snapshot: its history must speak for them. */
export function askHistory(net: Network, bits: readonly Typed<BitData>[]): Map<4 | 6, Typed<BitData>[]> {
  const out = new Map<4 | 6, Typed<BitData>[]>();
  for (const t of bits) {
    if (t.data.rv === net.resourceVersion || !poolOf(net, t.data.family)?.bitmap.isSet(t.data.index))
      continue;
    out.set(t.data.family, [...(out.get(t.data.family) ?? []), t]);
  }
  return out;
}

/** The addresses of the deleted DanmEps, to clear; one that cannot be parsed is noted and left set. */
export function wantedOf(eps: readonly Typed<EpData>[], notes: Note[]): Clear[] {
  const wanted: Clear[] = [];
  for (const t of eps)
    for (const [family, text] of [
      [4, t.data.v4],
      [6, t.data.v6],
    ] as const) {
      if (!text) continue;
      const addr = parseAddress(text.split('/')[0]!);
      if (addr) wanted.push({ key: t.key, family, index: -1, address: addr.text });
      else notes.push([t.key, `${text}: unparsable, left set`]);
    }
  return wanted;
}

/**
 * The bits the write clears, on the network as freshly read: the addresses of the deleted
 * DanmEps and the leaked bits, each only if still set, clearable, held by no other DanmEp
 * and no pod is being set up there; what is kept is noted or skipped, and why.
 */
export function planClears(
  net: Network,
  wanted: readonly Clear[],
  bits: readonly Typed<BitData>[],
  ev: DanmEvidence,
  deletedEps: ReadonlySet<string>,
  notes: Note[],
  results: BatchItemResult[],
  /** Per leaked-bit target: its bit set in every state since the snapshot (true), or why not. */
  history: ReadonlyMap<string, true | string> = new Map(),
): Clear[] {
  const clearing: Clear[] = [];
  for (const c of wanted) {
    const pool = poolOf(net, c.family);
    const addr = parseAddress(c.address)!;
    const index = pool ? bitIndex(pool, addr) : undefined;
    const keep = (why: string) => notes.push([c.key, `${c.address}: ${why}`]);
    if (!pool || index === undefined) keep('outside the network range, left alone');
    else if (!pool.bitmap.isSet(index)) keep('already clear');
    else if (!clearable(pool, index)) keep('reserved, left set');
    else {
      const v = ev.holders.verdict(net, c.family, index, deletedEps);
      if (v !== undefined) keep(`${'used' in v ? v.used : v.indeterminate}, left set`);
      else clearing.push({ ...c, index });
    }
  }
  for (const t of bits) {
    const d = t.data;
    const v = ev.holders.verdict(net, d.family, d.index);
    const why = changedSince(net, d, history.get(t.key)) ?? (v && ('used' in v ? v.used : v.indeterminate));
    if (why) results.push(skipped(t.key, `re-check: ${d.address}: ${why}`));
    else clearing.push({ key: t.key, family: d.family, index: d.index, address: d.address, bit: d });
  }
  return clearing;
}
