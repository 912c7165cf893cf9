/** Array layout in `data.bin` (spec §9, §14): §15 step 15, and the array content checks of step 16. */
import { type Container, CHUNK } from "./container.js";
import { crcHex, newCrc32c } from "./crc.js";
import { ITEMSIZE } from "./dtypes.js";
import { ArrayLayoutError, IntegrityError, LimitExceeded } from "./errors.js";
import type { ArrayNode } from "./tree.js";

export const MAX_NDIM = 64; // R-LIM-13
const LIMIT = 2n ** 63n; // R-LIM-14 … R-LIM-16

export interface TreeLayout {
  /** Path of tree.msgpack (messages name the file that holds the node). */
  treeFile: string;
  dataFile: string;
  arrays: ArrayNode[];
}

type Check = (t: TreeLayout, dataSize: number) => void;

/** Step 15, group 1: R-LIM-13 … R-LIM-16 (checked arithmetic before any use). */
const limits: Check = (t) => {
  for (const a of t.arrays) {
    const err = (why: string, rule: string): never => {
      throw new LimitExceeded(t.treeFile, a.at, why, rule);
    };
    if (a.shape.length > MAX_NDIM) err(`array has ${a.shape.length} dimensions, more than ${MAX_NDIM}`, "R-LIM-13");
    let prod = 1n;
    for (const d of a.shape) {
      if (d > LIMIT - 1n) err(`dimension ${d} exceeds 2^63-1`, "R-LIM-14");
      prod *= d;
      if (prod >= LIMIT) err("shape product reaches 2^63", "R-LIM-15");
    }
    if (prod * BigInt(ITEMSIZE.get(a.dtype)!) >= LIMIT) err("shape product times itemsize reaches 2^63", "R-LIM-15");
    if (a.nbytes >= LIMIT) err(`nbytes ${a.nbytes} reaches 2^63`, "R-LIM-16");
  }
};

/** Step 15, group 2: R-ARR-4. */
const nbytesMatch: Check = (t) => {
  for (const a of t.arrays) {
    const want = a.shape.reduce((x, y) => x * y, 1n) * BigInt(ITEMSIZE.get(a.dtype)!);
    if (a.nbytes !== want) {
      throw new ArrayLayoutError(t.treeFile, a.at, `nbytes ${a.nbytes} != shape product x itemsize = ${want}`, "R-ARR-4");
    }
  }
};

/** Step 15, group 3: R-ARR-5 … R-ARR-8. */
const placement: Check = (t, dataSize) => {
  for (const a of t.arrays) {
    const err = (why: string, rule: string): never => {
      throw new ArrayLayoutError(t.treeFile, a.at, why, rule);
    };
    if (a.offset % 64n !== 0n) err(`offset ${a.offset} is not a multiple of 64`, "R-ARR-5");
    if (a.nbytes === 0n && a.offset !== 0n) err(`empty array has offset ${a.offset}, not 0`, "R-ARR-6");
    if (a.nbytes === 0n && a.crc32c !== 0n) err("empty array has a crc32c other than 0", "R-ARR-7");
    if (a.offset + a.nbytes > BigInt(dataSize)) err(`extent ends at ${a.offset + a.nbytes}, beyond data.bin (${dataSize} bytes)`, "R-ARR-8");
  }
};

/** Step 15, group 4: R-ARR-9, R-ARR-10 (extents identical or disjoint; aliases agree). */
const overlaps: Check = (t) => {
  const ext = t.arrays.filter((a) => a.nbytes > 0n).sort((x, y) => (x.offset < y.offset ? -1 : x.offset > y.offset ? 1 : Number(x.nbytes - y.nbytes)));
  let prev: ArrayNode | null = null;
  let maxEnd = 0n;
  for (const a of ext) {
    if (prev && prev.offset === a.offset && prev.nbytes === a.nbytes) {
      if (prev.crc32c !== a.crc32c) throw new ArrayLayoutError(t.treeFile, a.at, `aliases ${prev.at} with a different crc32c`, "R-ARR-10");
      continue;
    }
    if (a.offset < maxEnd) throw new ArrayLayoutError(t.treeFile, a.at, `extent overlaps another array's extent`, "R-ARR-9");
    prev = a;
    if (a.offset + a.nbytes > maxEnd) maxEnd = a.offset + a.nbytes;
  }
};

/** Step 15, group 5: R-ARR-11. */
const coverage: Check = (t, dataSize) => {
  const end = t.arrays.reduce((m, a) => (a.nbytes > 0n && a.offset + a.nbytes > m ? a.offset + a.nbytes : m), 0n);
  if (BigInt(dataSize) !== end) {
    throw new ArrayLayoutError(t.dataFile, "size", `data.bin has ${dataSize} bytes, the largest extent ends at ${end}`, "R-ARR-11");
  }
};

/** The groups of step 15 in order; for one tree each runs before the next (§15). */
export const LAYOUT_GROUPS: readonly Check[] = [limits, nbytesMatch, placement, overlaps, coverage];

/**
 * Step 16 for one tree component: R-ARR-14 then R-ARR-13 per array in document
 * order, then R-ARR-12 (zero padding). Reads each extent in chunks.
 */
export async function checkArrayContent(c: Container, t: TreeLayout): Promise<void> {
  const verified = new Map<string, number>();
  for (const a of t.arrays) {
    if (a.nbytes === 0n) continue;
    const key = `${a.offset}:${a.nbytes}`;
    let crc = verified.get(key);
    const isBool = a.dtype === "bool";
    if (crc === undefined || isBool) {
      const h = newCrc32c();
      const off = Number(a.offset);
      const n = Number(a.nbytes);
      let badBool = -1;
      for (let pos = 0; pos < n; pos += CHUNK) {
        const chunk = await c.read(t.dataFile, off + pos, Math.min(CHUNK, n - pos));
        h.update(chunk);
        if (isBool && badBool < 0) {
          const k = chunk.findIndex((x) => x > 1);
          if (k >= 0) badBool = pos + k;
        }
      }
      crc = h.digest();
      verified.set(key, crc);
      if (BigInt(crc) !== a.crc32c) {
        throw new IntegrityError(t.dataFile, a.at, `array crc32c mismatch: stored ${crcHex(Number(a.crc32c))}, computed ${crcHex(crc)}`, "R-ARR-14");
      }
      if (badBool >= 0) throw new ArrayLayoutError(t.dataFile, a.at, `bool byte at element ${badBool} is not 00 or 01`, "R-ARR-13");
    } else if (BigInt(crc) !== a.crc32c) {
      throw new IntegrityError(t.dataFile, a.at, `array crc32c mismatch`, "R-ARR-14");
    }
  }
  // R-ARR-12: every byte outside every extent is zero.
  const ext = t.arrays.filter((a) => a.nbytes > 0n).map((a) => [Number(a.offset), Number(a.offset + a.nbytes)] as const).sort((x, y) => x[0] - y[0]);
  let pos = 0;
  const size = c.size(t.dataFile);
  const gaps: [number, number][] = [];
  for (const [s, e] of ext) {
    if (s > pos) gaps.push([pos, s]);
    if (e > pos) pos = e;
  }
  if (size > pos) gaps.push([pos, size]);
  for (const [s, e] of gaps) {
    for (let q = s; q < e; q += CHUNK) {
      const chunk = await c.read(t.dataFile, q, Math.min(CHUNK, e - q));
      const k = chunk.findIndex((x) => x !== 0);
      if (k >= 0) throw new ArrayLayoutError(t.dataFile, `byte ${q + k}`, "padding byte outside every extent is not 00", "R-ARR-12");
    }
  }
}
