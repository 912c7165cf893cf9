/**
 * CRC-32C (Castagnoli, spec §11.1) and CRC-32 (ISO-HDLC, the ZIP checksum of R-ZIP-22).
 *
 * Neither is in the JavaScript standard library and browsers have no binding, so
 * both live here: table-driven, slicing-by-8 (eight bytes per step), with an
 * incremental form so large files are checksummed in chunks, never whole.
 */

function makeTables(poly: number): Uint32Array[] {
  const tables: Uint32Array[] = [];
  const t0 = new Uint32Array(256);
  for (let i = 0; i < 256; i++) {
    let c = i;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ poly : c >>> 1;
    t0[i] = c >>> 0;
  }
  tables.push(t0);
  for (let t = 1; t < 8; t++) {
    const prev = tables[t - 1]!;
    const cur = new Uint32Array(256);
    for (let i = 0; i < 256; i++) cur[i] = (prev[i]! >>> 8) ^ t0[prev[i]! & 0xff]!;
    tables.push(cur);
  }
  return tables;
}

/** An incremental CRC over a reflected polynomial. */
export class Crc {
  private state = 0xffffffff;
  constructor(private readonly tables: Uint32Array[]) {}

  update(data: Uint8Array): this {
    const [t0, t1, t2, t3, t4, t5, t6, t7] = this.tables as [
      Uint32Array, Uint32Array, Uint32Array, Uint32Array,
      Uint32Array, Uint32Array, Uint32Array, Uint32Array,
    ];
    let c = this.state;
    let i = 0;
    const n = data.length;
    const end8 = n - (n % 8);
    for (; i < end8; i += 8) {
      const a = (c ^ (data[i]! | (data[i + 1]! << 8) | (data[i + 2]! << 16) | (data[i + 3]! << 24))) >>> 0;
      c =
        t7[a & 0xff]! ^ t6[(a >>> 8) & 0xff]! ^ t5[(a >>> 16) & 0xff]! ^ t4[a >>> 24]! ^
        t3[data[i + 4]!]! ^ t2[data[i + 5]!]! ^ t1[data[i + 6]!]! ^ t0[data[i + 7]!]!;
    }
    for (; i < n; i++) c = (c >>> 8) ^ t0[(c ^ data[i]!) & 0xff]!;
    this.state = c >>> 0;
    return this;
  }

  /** The CRC of everything passed to update() so far, as an unsigned 32-bit number. */
  digest(): number {
    return (this.state ^ 0xffffffff) >>> 0;
  }
}

const CASTAGNOLI = makeTables(0x82f63b78);
const ISO_HDLC = makeTables(0xedb88320);

export const newCrc32c = (): Crc => new Crc(CASTAGNOLI);
export const newCrc32 = (): Crc => new Crc(ISO_HDLC);
export const crc32c = (data: Uint8Array): number => newCrc32c().update(data).digest();
export const crc32 = (data: Uint8Array): number => newCrc32().update(data).digest();

/** 8 lowercase hex digits, most significant first (spec §11.1, R-CHK-3). */
export const crcHex = (crc: number): string => crc.toString(16).padStart(8, "0");
