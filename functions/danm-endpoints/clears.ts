/**
 * What one write of a DANM network clears, planned on the network as freshly read: the
 * addresses of the DanmEps the batch deleted, and its leaked bits, each only if still set,
 * clearable and held by no one (law 6 on the network's bitmap).
 */
import type { BatchItemResult, Note, Typed } from '../../shared/contract/index.ts';
import { parseAddress } from '../../shared/net/ip.ts';
import { Bitmap } from './bitmap.ts';
import type { BitData, EpData } from './data.ts';
import { type DanmEvidence, poolOf } from './evidence.ts';
import { bitIndex, clearable, type Network, type Pool } from './model.ts';

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
    const why = allocatedSince(poolOf(net, d.family), d) ?? (v && ('used' in v ? v.used : v.indeterminate));
    if (why) results.push(skipped(t.key, `re-check: ${d.address}: ${why}`));
    else clearing.push({ key: t.key, family: d.family, index: d.index, address: d.address, bit: d });
  }
  return clearing;
}
