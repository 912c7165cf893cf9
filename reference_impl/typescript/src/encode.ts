/**
 * Writer core (browser-safe): encode a tree into `tree.msgpack` + `data.bin`
 * (spec §8, §9) and seal a manifest (§5.5).
 *
 * Ints use the shortest encoding (R-TREE-5), floats are always float 64 with
 * their exact bit pattern (R-TREE-6), arrays go into `data.bin` in tree order,
 * each at the next multiple of 64 with zero padding (R-ARR-5, R-ARR-12, R-ARR-15:
 * the caller gives little-endian C-order bytes).
 */
import { crc32c, crcHex } from "./crc.js";
import { ITEMSIZE } from "./dtypes.js";
import { CheckpointError } from "./errors.js";
import { J, type JsonValue, stringifyJson } from "./json.js";
import type { DictKey } from "./tree.js";

/** An array to write: its element bytes, little-endian, C order. */
export interface WriteArray {
  type: "array";
  dtype: string;
  shape: bigint[];
  data: Uint8Array;
}

export type WriteNode =
  | { type: "none" }
  | { type: "bool"; value: boolean }
  | { type: "int"; value: bigint }
  | { type: "float"; bits: string } // 16 hex digits, binary64, most significant first
  | { type: "complex"; realBits: string; imagBits: string }
  | { type: "str"; value: string }
  | { type: "bytes"; data: Uint8Array }
  | { type: "list"; items: WriteNode[] }
  | { type: "tuple"; items: WriteNode[] }
  | { type: "dict"; items: [DictKey, WriteNode][] }
  | { type: "named_tuple"; typeName: string; fields: [string, WriteNode][] }
  | { type: "scalar"; dtype: string; raw: Uint8Array }
  | WriteArray
  | { type: "prng_key"; impl: string; data: WriteArray }
  | { type: "dtype"; dtype: string };

const bad = (field: string, why: string): never => {
  throw new CheckpointError("(writer input)", field, why, "R-WTR-3");
};

class Bytes {
  private chunks: Uint8Array[] = [];
  private cur = new Uint8Array(4096);
  private n = 0;
  length = 0;
  push(...bs: number[]): void {
    for (const b of bs) this.byte(b);
  }
  private byte(b: number): void {
    if (this.n === this.cur.length) this.flush();
    this.cur[this.n++] = b;
    this.length++;
  }
  bytes(b: Uint8Array): void {
    this.flush();
    this.chunks.push(b);
    this.length += b.length;
  }
  private flush(): void {
    if (this.n) this.chunks.push(this.cur.slice(0, this.n));
    this.cur = new Uint8Array(4096);
    this.n = 0;
  }
  result(): Uint8Array {
    this.flush();
    const out = new Uint8Array(this.length);
    let p = 0;
    for (const c of this.chunks) {
      out.set(c, p);
      p += c.length;
    }
    return out;
  }
}

const utf8 = new TextEncoder();
const beBytes = (v: bigint, n: number): number[] => Array.from({ length: n }, (_, k) => Number((v >> BigInt(8 * (n - 1 - k))) & 0xffn));
const hexBytes = (hex: string): number[] => Array.from({ length: hex.length / 2 }, (_, k) => parseInt(hex.slice(2 * k, 2 * k + 2), 16));

/** Encode a tree; returns `tree.msgpack` and `data.bin`. */
export function encodeTree(root: WriteNode): { tree: Uint8Array; data: Uint8Array } {
  const out = new Bytes();
  const data = new Bytes();
  const marker = (t: number): void => out.push(0xc7, 0x00, t);
  const arrayHeader = (n: number): void => {
    if (n < 16) out.push(0x90 | n);
    else if (n < 0x10000) out.push(0xdc, ...beBytes(BigInt(n), 2));
    else out.push(0xdd, ...beBytes(BigInt(n), 4));
  };
  const mapHeader = (n: number): void => {
    if (n < 16) out.push(0x80 | n);
    else if (n < 0x10000) out.push(0xde, ...beBytes(BigInt(n), 2));
    else out.push(0xdf, ...beBytes(BigInt(n), 4));
  };
  const int = (v: bigint): void => {
    if (v >= 0n) {
      if (v < 128n) out.push(Number(v));
      else if (v < 0x100n) out.push(0xcc, Number(v));
      else if (v < 0x10000n) out.push(0xcd, ...beBytes(v, 2));
      else if (v < 0x100000000n) out.push(0xce, ...beBytes(v, 4));
      else if (v < 2n ** 64n) out.push(0xcf, ...beBytes(v, 8));
      else bigInt(v);
    } else {
      if (v >= -32n) out.push(Number(v) & 0xff);
      else if (v >= -128n) out.push(0xd0, Number(v) & 0xff);
      else if (v >= -32768n) out.push(0xd1, ...beBytes(BigInt.asUintN(16, v), 2));
      else if (v >= -(2n ** 31n)) out.push(0xd2, ...beBytes(BigInt.asUintN(32, v), 4));
      else if (v >= -(2n ** 63n)) out.push(0xd3, ...beBytes(BigInt.asUintN(64, v), 8));
      else bigInt(v);
    }
  };
  // Tag 3: minimal two's complement, little-endian (R-TREE-21).
  const bigInt = (v: bigint): void => {
    let n = 1;
    while (BigInt.asIntN(8 * n, v) !== v) n++;
    const u = BigInt.asUintN(8 * n, v);
    arrayHeader(2);
    marker(3);
    bin(new Uint8Array(beBytes(u, n).reverse()));
  };
  const str = (s: string): void => {
    const b = utf8.encode(s);
    if (b.length < 32) out.push(0xa0 | b.length);
    else if (b.length < 0x100) out.push(0xd9, b.length);
    else if (b.length < 0x10000) out.push(0xda, ...beBytes(BigInt(b.length), 2));
    else out.push(0xdb, ...beBytes(BigInt(b.length), 4));
    out.bytes(b);
  };
  const bin = (b: Uint8Array): void => {
    if (b.length < 0x100) out.push(0xc4, b.length);
    else if (b.length < 0x10000) out.push(0xc5, ...beBytes(BigInt(b.length), 2));
    else out.push(0xc6, ...beBytes(BigInt(b.length), 4));
    out.bytes(b);
  };
  const float = (bits: string): void => {
    if (!/^[0-9a-f]{16}$/.test(bits)) bad("bits", `${JSON.stringify(bits)} is not 16 lowercase hex digits`);
    out.push(0xcb, ...hexBytes(bits));
  };
  const array = (a: WriteArray): void => {
    const itemsize = ITEMSIZE.get(a.dtype) ?? bad("dtype", `unknown dtype ${a.dtype}`);
    const nbytes = a.shape.reduce((x, y) => x * y, 1n) * BigInt(itemsize);
    if (nbytes !== BigInt(a.data.length)) bad("nbytes", `array data has ${a.data.length} bytes, shape and dtype need ${nbytes}`);
    let offset = 0;
    if (a.data.length > 0) {
      const pad = (64 - (data.length % 64)) % 64;
      if (pad) data.bytes(new Uint8Array(pad));
      offset = data.length;
      data.bytes(a.data);
    }
    arrayHeader(6);
    marker(6);
    str(a.dtype);
    arrayHeader(a.shape.length);
    a.shape.forEach(int);
    int(BigInt(offset));
    int(nbytes);
    int(a.data.length ? BigInt(crc32c(a.data)) : 0n);
  };
  const node = (n: WriteNode): void => {
    switch (n.type) {
      case "none": out.push(0xc0); return;
      case "bool": out.push(n.value ? 0xc3 : 0xc2); return;
      case "int": int(n.value); return;
      case "float": float(n.bits); return;
      case "complex": arrayHeader(3); marker(4); float(n.realBits); float(n.imagBits); return;
      case "str": str(n.value); return;
      case "bytes": bin(n.data); return;
      case "list": arrayHeader(n.items.length); n.items.forEach(node); return;
      case "tuple": arrayHeader(n.items.length + 1); marker(1); n.items.forEach(node); return;
      case "dict":
        mapHeader(n.items.length);
        for (const [k, v] of n.items) {
          if ("str" in k) str(k.str);
          else if (k.int >= -(2n ** 63n) && k.int < 2n ** 64n) int(k.int);
          else bad("key", "int map key outside -2^63..2^64-1");
          node(v);
        }
        return;
      case "named_tuple":
        arrayHeader(3); marker(2); str(n.typeName); mapHeader(n.fields.length);
        for (const [k, v] of n.fields) { str(k); node(v); }
        return;
      case "scalar":
        if (ITEMSIZE.get(n.dtype) !== n.raw.length) bad("raw", `scalar of ${n.dtype} needs ${ITEMSIZE.get(n.dtype)} bytes`);
        arrayHeader(3); marker(5); str(n.dtype); bin(n.raw);
        return;
      case "array": array(n); return;
      case "prng_key": arrayHeader(3); marker(7); str(n.impl); array(n.data); return;
      case "dtype":
        if (!ITEMSIZE.has(n.dtype)) bad("dtype", `unknown dtype ${n.dtype}`);
        arrayHeader(2); marker(8); str(n.dtype);
        return;
    }
  };
  node(root);
  return { tree: out.result(), data: data.result() };
}

/** §5.5: serialize a manifest (members in Table 5-1 order, without the checksum) and append its self-checksum. */
export function sealManifest(withoutCrc: JsonValue): Uint8Array {
  const text = stringifyJson(withoutCrc, 2);
  if (!text.endsWith("\n}")) throw new Error("internal: manifest must be a non-empty object");
  const head = utf8.encode(text.slice(0, -2) + ",\n  ");
  const tail = utf8.encode(`"manifest_crc32c": "${crcHex(crc32c(head))}"\n}\n`);
  const out = new Uint8Array(head.length + tail.length);
  out.set(head);
  out.set(tail, head.length);
  return out;
}

/** The bytes of a `value.json` (compact, one line, newline-terminated). */
export const encodeJsonValue = (v: JsonValue): Uint8Array => utf8.encode(stringifyJson(v, 0) + "\n");

export { J };
