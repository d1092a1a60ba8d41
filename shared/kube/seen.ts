/**
 * The UIDs one list has handed so far, for law 1's "no object comes twice" (ListProof), kept
 * as 64-bit hashes in an open-addressed table: 8 bytes a UID, 16 at the table's lowest load.
 * A Set of the strings kept every UID's string alive with its entry: 13 MiB for a list of
 * 150,000 pods, whose UIDs the run keeps nothing else of.
 *
 * Two different UIDs share a hash with odds of about n²/2^65 (6e-10 for 150,000). A shared
 * hash is taken for a repeat: the list is refused as incomplete, the run stops and deletes
 * nothing. Each list seeds its hash afresh, so no pair of UIDs collides run after run.
 */
import { randomInt } from 'node:crypto';

const EMPTY = 0;
const FIRST_CAPACITY = 1024;

export class SeenUids {
  /** Pairs of 32-bit halves; the pair (0, 0) is an empty slot. */
  private table = new Uint32Array(2 * FIRST_CAPACITY);
  private count = 0;
  private readonly seedA: number;
  private readonly seedB: number;

  constructor(seeds: readonly [number, number] = [randomInt(2 ** 32), randomInt(2 ** 32)]) {
    this.seedA = seeds[0] >>> 0;
    this.seedB = seeds[1] >>> 0;
  }

  get size(): number {
    return this.count;
  }

  /** Adds `uid`; false when it (or a UID of the same 64-bit hash) was added before. */
  add(uid: string): boolean {
    let a = (this.seedA ^ 0x811c9dc5) >>> 0;
    let b = this.seedB;
    for (let i = 0; i < uid.length; i++) {
      const c = uid.charCodeAt(i);
      a = Math.imul(a ^ c, 0x01000193);
      b = Math.imul(b ^ c, 0x5bd1e995);
      b ^= b >>> 15;
    }
    a = fmix(a ^ uid.length);
    b = fmix(b ^ uid.length);
    if (a === EMPTY && b === EMPTY) b = 1;
    if (!this.place(this.table, a, b)) return false;
    this.count++;
    if (this.count * 2 > this.table.length / 2) this.grow();
    return true;
  }

  /** Puts the pair in `table` (linear probing); false when it is there already. */
  private place(table: Uint32Array, a: number, b: number): boolean {
    const mask = table.length / 2 - 1;
    for (let i = a & mask; ; i = (i + 1) & mask) {
      const x = table[2 * i]!;
      const y = table[2 * i + 1]!;
      if (x === EMPTY && y === EMPTY) {
        table[2 * i] = a;
        table[2 * i + 1] = b;
        return true;
      }
      if (x === a && y === b) return false;
    }
  }

  private grow(): void {
    const old = this.table;
    const table = new Uint32Array(old.length * 2);
    for (let i = 0; i < old.length; i += 2)
      if (old[i] !== EMPTY || old[i + 1] !== EMPTY) this.place(table, old[i]!, old[i + 1]!);
    this.table = table;
  }
}

/** Murmur3's 32-bit finalizer: every input bit moves every output bit. */
function fmix(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}
