/**
 * Element decoding for display (viewer summaries): every dtype of Table 10-1 to
 * binary64 numbers. JavaScript has no float16, bfloat16 or float8 types, so
 * those are decoded from their bit fields here; 64-bit integers go through
 * BigInt (exact) before the lossy conversion to a number for statistics.
 */
import { ITEMSIZE } from "./dtypes.js";

/** Decode a small IEEE-like float: sign bit (if `signed`), `e` exponent bits, `m` mantissa bits. */
function miniFloat(bits: number, e: number, m: number, bias: number, kind: "ieee" | "fn" | "fnuz"): number {
  const sign = (bits >> (e + m)) & 1 ? -1 : 1;
  const exp = (bits >> m) & ((1 << e) - 1);
  const man = bits & ((1 << m) - 1);
  const top = (1 << e) - 1;
  if (kind === "fnuz" && bits === 1 << (e + m)) return NaN; // the "negative zero" pattern is the only NaN
  if (kind === "ieee" && exp === top) return man ? NaN : sign * Infinity;
  if (kind === "fn" && exp === top && man === (1 << m) - 1) return NaN; // S.1111.111: the only NaN, no infinities
  if (exp === 0) return sign * man * 2 ** (1 - bias - m);
  return sign * (1 + man / (1 << m)) * 2 ** (exp - bias);
}

export const decodeFloat16 = (b: number): number => miniFloat(b, 5, 10, 15, "ieee");
export const decodeBfloat16 = (b: number): number => {
  const dv = new DataView(new ArrayBuffer(4));
  dv.setUint32(0, b << 16);
  return dv.getFloat32(0);
};
export const decodeFloat8: Record<string, (b: number) => number> = {
  float8_e4m3fn: (b) => miniFloat(b, 4, 3, 7, "fn"),
  float8_e5m2: (b) => miniFloat(b, 5, 2, 15, "ieee"),
  float8_e4m3fnuz: (b) => miniFloat(b, 4, 3, 8, "fnuz"),
  float8_e5m2fnuz: (b) => miniFloat(b, 5, 2, 16, "fnuz"),
  float8_e8m0fnu: (b) => (b === 0xff ? NaN : 2 ** (b - 127)),
};

/**
 * Decode the elements of `bytes` (whole elements, little-endian) to numbers.
 * Complex elements yield their real and imaginary parts in turn. `into`: a buffer to decode into when
 * it is large enough (a view of it is returned), so a pass over many chunks allocates once.
 */
export function decodeElements(dtype: string, bytes: Uint8Array, into?: Float64Array): Float64Array {
  const size = ITEMSIZE.get(dtype);
  if (!size) throw new RangeError(`unknown dtype ${dtype}`);
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const complex = dtype.startsWith("complex");
  const n = Math.floor(bytes.length / size) * (complex ? 2 : 1);
  const out = into !== undefined && into.length >= n ? into.subarray(0, n) : new Float64Array(n);
  const f8 = decodeFloat8[dtype];
  for (let i = 0; i < n; i++) {
    switch (dtype) {
      case "bool": case "uint8": out[i] = bytes[i]!; break;
      case "int8": out[i] = dv.getInt8(i); break;
      case "int16": out[i] = dv.getInt16(2 * i, true); break;
      case "uint16": out[i] = dv.getUint16(2 * i, true); break;
      case "int32": out[i] = dv.getInt32(4 * i, true); break;
      case "uint32": out[i] = dv.getUint32(4 * i, true); break;
      case "int64": out[i] = Number(dv.getBigInt64(8 * i, true)); break;
      case "uint64": out[i] = Number(dv.getBigUint64(8 * i, true)); break;
      case "float16": out[i] = decodeFloat16(dv.getUint16(2 * i, true)); break;
      case "bfloat16": out[i] = decodeBfloat16(dv.getUint16(2 * i, true)); break;
      case "float32": case "complex64": out[i] = dv.getFloat32(4 * i, true); break;
      case "float64": case "complex128": out[i] = dv.getFloat64(8 * i, true); break;
      default: out[i] = f8!(bytes[i]!);
    }
  }
  return out;
}

export interface Summary {
  count: number;
  finite: number;
  nan: number;
  posInf: number;
  negInf: number;
  min: number;
  max: number;
  mean: number;
  /** Counts of finite values in equal-width bins over [min, max]. */
  histogram: number[];
}

/**
 * Statistics of an array read in chunks by `read(offset, length)`: two passes
 * (range, then histogram), so memory stays at one chunk whatever the array size.
 */
export async function summarize(
  dtype: string,
  nbytes: number,
  read: (offset: number, length: number) => Promise<Uint8Array>,
  bins = 40,
  chunk = 1 << 20,
): Promise<Summary> {
  const size = ITEMSIZE.get(dtype)!;
  const step = Math.max(size, chunk - (chunk % size));
  const s: Summary = { count: 0, finite: 0, nan: 0, posInf: 0, negInf: 0, min: Infinity, max: -Infinity, mean: NaN, histogram: new Array<number>(bins).fill(0) };
  let sum = 0;
  // One decode buffer for every chunk of both passes: memory is a chunk, whatever the array's size.
  const scratch = new Float64Array(Math.ceil(Math.min(step, nbytes) / size) * (dtype.startsWith("complex") ? 2 : 1));
  const passes = async (visit: (v: Float64Array) => void): Promise<void> => {
    for (let pos = 0; pos < nbytes; pos += step) visit(decodeElements(dtype, await read(pos, Math.min(step, nbytes - pos)), scratch));
  };
  await passes((vals) => {
    for (const v of vals) {
      s.count++;
      if (Number.isNaN(v)) s.nan++;
      else if (v === Infinity) s.posInf++;
      else if (v === -Infinity) s.negInf++;
      else {
        s.finite++;
        sum += v;
        if (v < s.min) s.min = v;
        if (v > s.max) s.max = v;
      }
    }
  });
  if (s.finite === 0) return s;
  s.mean = sum / s.finite;
  const width = (s.max - s.min) / bins;
  await passes((vals) => {
    for (const v of vals) {
      if (!Number.isFinite(v)) continue;
      const k = width > 0 ? Math.min(bins - 1, Math.floor((v - s.min) / width)) : 0;
      s.histogram[k]!++;
    }
  });
  return s;
}
