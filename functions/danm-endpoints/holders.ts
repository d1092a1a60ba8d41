/**
 * The DanmEps that hold each bit of one network's pool (one family), by bit index: the index
 * a verdict reads for every set bit. Built as a map while the DanmEps are read, then, when
 * the pool is not much larger than its holders, kept as a slot per bit: 4 bytes a bit,
 * against about 48 bytes a map entry (150,000 holders of a /14 took a 7 MiB map, 1 MiB of
 * slots). A sparse pool (a /12 with a few DanmEps) stays a map.
 */
import type { Endpoint } from './model.ts';

/** A bit's holders: one DanmEp alone (the common case), a list only for a bit held twice or more. */
export type Held = Endpoint | Endpoint[];

/** Slots per holder up to which a pool is kept dense (4 + 4 bytes a holder's slot, 48 its map entry). */
const DENSE_BITS_PER_HOLDER = 8;

export class BitHolders {
  private map: Map<number, Held> | undefined = new Map();
  /** Bit index to 1 + the position of its holders in `held` (0: none), once sealed dense. */
  private slots: Int32Array | undefined;
  private held: Held[] = [];

  /** The pool's size (its bitmap's bits). */
  private readonly bits: number;

  constructor(bits: number) {
    this.bits = bits;
  }

  add(index: number, ep: Endpoint): void {
    if (!this.map) throw new Error('BitHolders: add after seal');
    const had = this.map.get(index);
    if (had === undefined) this.map.set(index, ep);
    else if (Array.isArray(had)) had.push(ep);
    else this.map.set(index, [had, ep]);
  }

  /** Every holder was added: the index takes its final form. */
  seal(): void {
    const map = this.map;
    if (!map || this.bits > DENSE_BITS_PER_HOLDER * map.size) return;
    const slots = new Int32Array(this.bits);
    for (const [index, h] of map) slots[index] = this.held.push(h);
    this.slots = slots;
    this.map = undefined;
  }

  at(index: number): Held | undefined {
    if (this.map) return this.map.get(index);
    const at = this.slots![index] ?? 0;
    return at === 0 ? undefined : this.held[at - 1];
  }
}

/** The first of a bit's holders that `accept` takes (a bit held once is its one holder). */
export function firstHolder(held: Held | undefined, accept: (ep: Endpoint) => boolean): Endpoint | undefined {
  if (Array.isArray(held)) return held.find(accept);
  return held !== undefined && accept(held) ? held : undefined;
}
