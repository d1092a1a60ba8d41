/**
 * DANM allocation bitmaps: standard base64 of a byte array covering the whole
 * CIDR; bit i = address - network address, most significant bit first.
 */
import type { Cidr } from '../../shared/net/ip.ts';

/** DANM caps a bitmap at 2^23 bits. */
export const MAX_BITS = 2 ** 23;

export class Bitmap {
  readonly bytes: Uint8Array;
  readonly bits: number;
  private constructor(bytes: Uint8Array, bits: number) {
    this.bytes = bytes;
    this.bits = bits;
  }

  /** Decodes `alloc` for a CIDR; returns an error message for bad base64 or a wrong length. */
  static decode(b64: unknown, cidr: Cidr): Bitmap | string {
    if (cidr.size > BigInt(MAX_BITS)) return `CIDR ${cidr.text} is larger than ${MAX_BITS} addresses`;
    const bits = Number(cidr.size);
    if (typeof b64 !== 'string' || b64 === '') return 'bitmap is missing';
    if (!/^[A-Za-z0-9+/]*={0,2}$/.test(b64) || b64.length % 4 !== 0) return 'bitmap is not valid base64';
    const buf = Buffer.from(b64, 'base64');
    const want = Math.ceil(bits / 8);
    if (buf.length !== want) return `bitmap has ${buf.length} bytes, ${cidr.text} needs ${want}`;
    return new Bitmap(new Uint8Array(buf), bits);
  }

  static empty(cidr: Cidr): Bitmap {
    const bits = Number(cidr.size);
    return new Bitmap(new Uint8Array(Math.ceil(bits / 8)), bits);
  }

  isSet(i: number): boolean {
    return i >= 0 && i < this.bits && (this.bytes[i >> 3]! & (0x80 >> (i & 7))) !== 0;
  }

  /** A copy with bit i set or cleared. */
  with(i: number, value: boolean): Bitmap {
    const b = new Uint8Array(this.bytes);
    if (value) b[i >> 3]! |= 0x80 >> (i & 7);
    else b[i >> 3]! &= ~(0x80 >> (i & 7)) & 0xff;
    return new Bitmap(b, this.bits);
  }

  encode(): string {
    return Buffer.from(this.bytes).toString('base64');
  }

  *setBits(): Generator<number> {
    for (let byte = 0; byte < this.bytes.length; byte++) {
      const v = this.bytes[byte]!;
      if (v === 0) continue;
      for (let j = 0; j < 8; j++) if (v & (0x80 >> j) && byte * 8 + j < this.bits) yield byte * 8 + j;
    }
  }
}
