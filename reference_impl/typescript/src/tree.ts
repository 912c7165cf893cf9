/**
 * Decoder for `tree.msgpack` (spec §8) into the node vocabulary.
 *
 * Two passes, as §15 step 14 orders them: `checkDeclaredLimits` walks only the
 * msgpack headers and enforces R-LIM-10 … R-LIM-12 on what they declare (also in
 * a truncated document, §8.8) before anything is allocated; `decodeTree` then
 * builds nodes and checks R-TREE-*, R-ARR-1 … R-ARR-3 and R-DT-1.
 * A general msgpack library is not used: it would allocate what headers declare
 * before these checks, and it would not keep float bit patterns or the
 * distinction between a tag marker and other ext objects.
 */
import { isDtype, ITEMSIZE } from "./dtypes.js";
import { LimitExceeded, TreeError, UnknownDtype } from "./errors.js";

export const MAX_TREE_DEPTH = 128; // R-LIM-10
export const MAX_TREE_NODES = 10_000_000; // R-LIM-11
export const MAX_TREE_STR = 256 * 1024 * 1024; // R-LIM-12
export const MAX_BIG_INT_BYTES = 1024; // R-LIM-18

export type DictKey = { str: string } | { int: bigint };

export interface ArrayNode {
  type: "array";
  dtype: string;
  shape: bigint[];
  offset: bigint;
  nbytes: bigint;
  crc32c: bigint;
  /** Where the node sits in the tree, for messages. */
  at: string;
}

export type TreeNode =
  | { type: "none" }
  | { type: "bool"; value: boolean }
  | { type: "int"; value: bigint }
  | { type: "float"; bits: string }
  | { type: "complex"; realBits: string; imagBits: string }
  | { type: "str"; value: string }
  | { type: "bytes"; data: Uint8Array }
  | { type: "list"; items: TreeNode[] }
  | { type: "tuple"; items: TreeNode[] }
  | { type: "dict"; items: [DictKey, TreeNode][] }
  | { type: "named_tuple"; typeName: string; fields: [string, TreeNode][] }
  | { type: "scalar"; dtype: string; raw: Uint8Array }
  | ArrayNode
  | { type: "prng_key"; impl: string; data: ArrayNode }
  | { type: "dtype"; dtype: string };

/**
 * The text a key adds to its parent's tree path, in the notation every OpenCheckpoint tool shows (the
 * Python reference's `inspect`, `diff` and errors): `.name` for an identifier, `['other key']`, `[3]`.
 * Fields inside a node (an array node's dtype, a tag's operands) follow as `/1`, `/2`.
 */
export function seg(key: string | bigint | number): string {
  if (typeof key !== "string") return `[${key}]`;
  if (/^[\p{L}_][\p{L}\p{N}_]*$/u.test(key)) return `.${key}`;
  const quote = key.includes("'") && !key.includes('"') ? '"' : "'";
  const body = key.replace(/\\/g, "\\\\").replace(new RegExp(quote, "g"), `\\${quote}`);
  return `[${quote}${body}${quote}]`;
}

export interface DecodedTree {
  root: TreeNode;
  /** Every array node (including PRNG key data) in document order. */
  arrays: ArrayNode[];
}

const IMPL_RE = /^[a-z][a-z0-9-]*(\.[a-z0-9-]+)+\/[a-z0-9_.-]+$/;
const U64_MAX = 2n ** 64n - 1n;
const I64_MIN = -(2n ** 63n);

/** Size of a msgpack header and what it declares; null when the byte is never valid. */
interface Header {
  /** Bytes of the header itself. */
  head: number;
  /** container: element count (map entries counted twice); str/bin/ext: payload length. */
  count: number;
  kind: "scalar" | "container" | "payload";
}

function header(b: Uint8Array, p: number): Header | null | "short" {
  const c = b[p]!;
  const need = (n: number): boolean => p + n <= b.length;
  const u = (off: number, n: number): number => {
    let v = 0;
    for (let k = 0; k < n; k++) v = v * 256 + b[p + off + k]!;
    return v;
  };
  if (c <= 0x7f || c >= 0xe0 || c === 0xc0 || c === 0xc2 || c === 0xc3) return { head: 1, count: 0, kind: "scalar" };
  if (c >= 0x80 && c <= 0x8f) return { head: 1, count: 2 * (c & 0x0f), kind: "container" };
  if (c >= 0x90 && c <= 0x9f) return { head: 1, count: c & 0x0f, kind: "container" };
  if (c >= 0xa0 && c <= 0xbf) return { head: 1, count: c & 0x1f, kind: "payload" };
  const sized = (n: number, mult: number, kind: Header["kind"]): Header | "short" =>
    need(1 + n) ? { head: 1 + n, count: u(1, n) * mult, kind } : "short";
  switch (c) {
    case 0xc4: case 0xd9: return sized(1, 1, "payload");
    case 0xc5: case 0xda: return sized(2, 1, "payload");
    case 0xc6: case 0xdb: return sized(4, 1, "payload");
    case 0xc7: return need(3) ? { head: 3, count: b[p + 1]!, kind: "payload" } : "short";
    case 0xc8: return need(4) ? { head: 4, count: u(1, 2), kind: "payload" } : "short";
    case 0xc9: return need(6) ? { head: 6, count: u(1, 4), kind: "payload" } : "short";
    case 0xca: return { head: 5, count: 0, kind: "scalar" };
    case 0xcb: return { head: 9, count: 0, kind: "scalar" };
    case 0xcc: case 0xd0: return { head: 2, count: 0, kind: "scalar" };
    case 0xcd: case 0xd1: return { head: 3, count: 0, kind: "scalar" };
    case 0xce: case 0xd2: return { head: 5, count: 0, kind: "scalar" };
    case 0xcf: case 0xd3: return { head: 9, count: 0, kind: "scalar" };
    case 0xd4: return { head: 3, count: 0, kind: "scalar" };
    case 0xd5: return { head: 4, count: 0, kind: "scalar" };
    case 0xd6: return { head: 6, count: 0, kind: "scalar" };
    case 0xd7: return { head: 10, count: 0, kind: "scalar" };
    case 0xd8: return { head: 18, count: 0, kind: "scalar" };
    case 0xdc: return sized(2, 1, "container");
    case 0xdd: return sized(4, 1, "container");
    case 0xde: return sized(2, 2, "container");
    case 0xdf: return sized(4, 2, "container");
    default: return null; // 0xc1
  }
}

/**
 * §8.8 / R-LIM-0: depth, node count and str/bin lengths as the headers declare
 * them, checked before any allocation. Stops silently where the document stops
 * making sense (truncation, a never-valid byte): `decodeTree` reports those.
 */
export function checkDeclaredLimits(b: Uint8Array, file: string): void {
  const open: number[] = []; // elements still expected by each open container
  let declared = 0;
  let p = 0;
  while (p < b.length) {
    const h = header(b, p);
    if (h === null || h === "short") return;
    const c = b[p]!;
    // §8.8: the scan stops at an object outside the vocabulary (fixext, ext 16/32, an ext 8 with a payload);
    // decodeTree reports it, and nothing after it counts toward the limits.
    if ((c >= 0xd4 && c <= 0xd8) || c === 0xc8 || c === 0xc9 || (c === 0xc7 && h.count > 0)) return;
    if (declared === 0) declared = 1; // the root
    if (h.kind === "payload" && c !== 0xc7 && c !== 0xc8 && c !== 0xc9 && h.count > MAX_TREE_STR) {
      throw new LimitExceeded(file, `offset ${p}`, `str/bin declares ${h.count} bytes, more than ${MAX_TREE_STR}`, "R-LIM-12");
    }
    if (h.kind === "container") {
      if (open.length + 1 > MAX_TREE_DEPTH) {
        throw new LimitExceeded(file, `offset ${p}`, `tree depth exceeds ${MAX_TREE_DEPTH}`, "R-LIM-10");
      }
      declared += h.count;
      if (declared > MAX_TREE_NODES) {
        throw new LimitExceeded(file, `offset ${p}`, `tree declares more than ${MAX_TREE_NODES} nodes`, "R-LIM-11");
      }
    }
    p += h.head + (h.kind === "payload" ? h.count : 0);
    if (h.kind === "container" && h.count > 0) {
      open.push(h.count);
      continue;
    }
    // One object finished: close every container it completes.
    for (;;) {
      if (open.length === 0) return; // the root is complete
      const left = open[open.length - 1]! - 1;
      if (left > 0) {
        open[open.length - 1] = left;
        break;
      }
      open.pop();
    }
  }
}

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const hex = (b: Uint8Array): string => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");

/** binary64 bits of a float 32 (R-TREE-8): exact value, NaN payload moved up, never quieted. */
export function float32ToFloat64Bits(b4: Uint8Array): string {
  const dv = new DataView(b4.buffer, b4.byteOffset, 4);
  const u = dv.getUint32(0, false);
  const frac = u & 0x7fffff;
  if (((u >>> 23) & 0xff) === 0xff && frac !== 0) {
    const bits = (BigInt(u >>> 31) << 63n) | (0x7ffn << 52n) | (BigInt(frac) << 29n);
    return bits.toString(16).padStart(16, "0");
  }
  const out = new DataView(new ArrayBuffer(8));
  out.setFloat64(0, dv.getFloat32(0, false), false);
  return hex(new Uint8Array(out.buffer));
}

type Peek = "int" | "float" | "str" | "bin" | "array" | "map" | "nil" | "bool" | "ext" | "bad";

function peekType(c: number): Peek {
  if (c <= 0x7f || c >= 0xe0 || (c >= 0xcc && c <= 0xd3)) return "int";
  if (c >= 0x80 && c <= 0x8f) return "map";
  if (c >= 0x90 && c <= 0x9f) return "array";
  if ((c >= 0xa0 && c <= 0xbf) || (c >= 0xd9 && c <= 0xdb)) return "str";
  if (c >= 0xc4 && c <= 0xc6) return "bin";
  if (c === 0xca || c === 0xcb) return "float";
  if (c === 0xdc || c === 0xdd) return "array";
  if (c === 0xde || c === 0xdf) return "map";
  if (c === 0xc0) return "nil";
  if (c === 0xc2 || c === 0xc3) return "bool";
  if ((c >= 0xc7 && c <= 0xc9) || (c >= 0xd4 && c <= 0xd8)) return "ext";
  return "bad";
}

/** Decode and check a whole `tree.msgpack` (call `checkDeclaredLimits` first). */
export function decodeTree(b: Uint8Array, file: string): DecodedTree {
  let p = 0;
  const arrays: ArrayNode[] = [];
  const fail = (at: string, why: string, rule: string): never => {
    throw new TreeError(file, at, why, rule);
  };
  const take = (n: number, at: string): number => {
    if (p + n > b.length) fail(at, "document ends inside an object", "R-TREE-1");
    const q = p;
    p += n;
    return q;
  };
  const uint = (off: number, n: number): bigint => {
    let v = 0n;
    for (let k = 0; k < n; k++) v = (v << 8n) | BigInt(b[off + k]!);
    return v;
  };
  const byteAt = (at: string): number => {
    if (p >= b.length) fail(at, "document ends before an object", "R-TREE-1");
    return b[p]!;
  };

  const readInt = (at: string): bigint => {
    const c = b[take(1, at)]!;
    if (c <= 0x7f) return BigInt(c);
    if (c >= 0xe0) return BigInt(c - 256);
    const n = [1, 2, 4, 8][(c - 0xcc) & 3]!;
    const q = take(n, at);
    const v = uint(q, n);
    return c <= 0xcf ? v : BigInt.asIntN(n * 8, v);
  };
  const readLen = (c: number, at: string): number => {
    if ((c >= 0xa0 && c <= 0xbf)) return c & 0x1f;
    if (c >= 0x90 && c <= 0x9f) return c & 0x0f;
    if (c >= 0x80 && c <= 0x8f) return c & 0x0f;
    const n = { 0xc4: 1, 0xc5: 2, 0xc6: 4, 0xd9: 1, 0xda: 2, 0xdb: 4, 0xdc: 2, 0xdd: 4, 0xde: 2, 0xdf: 4 }[c]!;
    return Number(uint(take(n, at), n));
  };
  const readStr = (at: string): string => {
    const c = b[take(1, at)]!;
    const n = readLen(c, at);
    const q = take(n, at);
    try {
      return utf8.decode(b.subarray(q, q + n));
    } catch {
      return fail(at, "str is not valid UTF-8", "R-TREE-9");
    }
  };
  const readBin = (at: string): Uint8Array => {
    const c = b[take(1, at)]!;
    const n = readLen(c, at);
    const q = take(n, at);
    return b.slice(q, q + n);
  };
  const readFloatBits = (at: string): string => {
    const c = b[take(1, at)]!;
    if (c === 0xcb) {
      const q = take(8, at);
      return hex(b.subarray(q, q + 8));
    }
    const q = take(4, at);
    return float32ToFloat64Bits(b.subarray(q, q + 4));
  };
  /** Reject an ext object at a position where only a node may stand (R-TREE-13/14/15). */
  const badExt = (at: string): never => {
    const c = b[p]!;
    if (c === 0xc7 && p + 1 < b.length && b[p + 1] === 0) {
      const t = p + 2 < b.length ? b[p + 2]! : -1;
      if (t === 0 || t >= 0x80) fail(at, `ext type ${t >= 0x80 ? t - 256 : t} is not a tag 1..127`, "R-TREE-14");
      return fail(at, "tag marker outside element 0 of an array", "R-TREE-15");
    }
    return fail(at, "ext object other than a zero-length ext 8 tag marker", "R-TREE-13");
  };
  const dtypeOf = (s: string, at: string): string => {
    if (!isDtype(s)) throw new UnknownDtype(file, at, `unknown dtype ${JSON.stringify(s)}`, "R-DT-1");
    return s;
  };
  const expect = (want: Peek, at: string, what: string): void => {
    const got = peekType(byteAt(at));
    if (got !== want) fail(at, `${what} must be a msgpack ${want}, found ${got}`, "R-TREE-17");
  };

  const node = (at: string, depth: number): TreeNode => {
    const c = byteAt(at);
    const t = peekType(c);
    switch (t) {
      case "nil": p++; return { type: "none" };
      case "bool": p++; return { type: "bool", value: c === 0xc3 };
      case "int": return { type: "int", value: readInt(at) };
      case "float": return { type: "float", bits: readFloatBits(at) };
      case "str": return { type: "str", value: readStr(at) };
      case "bin": return { type: "bytes", data: readBin(at) };
      case "map": return dict(at, depth);
      case "array": return array(at, depth);
      case "ext": return badExt(at);
      default: return fail(at, `byte 0x${c.toString(16)} is not an allowed msgpack encoding`, "R-TREE-3");
    }
  };

  const dict = (at: string, depth: number): TreeNode => {
    const n = readLen(b[take(1, at)]!, at);
    const items: [DictKey, TreeNode][] = [];
    const seen = new Set<string>();
    for (let k = 0; k < n; k++) {
      const kt = peekType(byteAt(at));
      let key: DictKey;
      if (kt === "str") key = { str: readStr(`${at}{key ${k}}`) };
      else if (kt === "int") key = { int: readInt(at) };
      else if (kt === "ext") return badExt(at);
      else if (kt === "bad") return fail(at, `byte 0x${b[p]!.toString(16)} is not an allowed msgpack encoding`, "R-TREE-3");
      else return fail(`${at}{key ${k}}`, `map key is a ${kt}, not a str or an int`, "R-TREE-10");
      const id = "str" in key ? "s" + key.str : "i" + key.int.toString();
      const label = "str" in key ? key.str : key.int.toString();
      const child = at + seg("str" in key ? key.str : key.int);
      if (seen.has(id)) fail(child, `duplicate map key ${JSON.stringify(label)}`, "R-TREE-11");
      seen.add(id);
      items.push([key, node(child, depth + 1)]);
    }
    return { type: "dict", items };
  };

  const array = (at: string, depth: number): TreeNode => {
    const n = readLen(b[take(1, at)]!, at);
    const start = p;
    if (n > 0 && b[p] === 0xc7) {
      if (p + 1 < b.length && b[p + 1] !== 0) return badExt(`${at}/0`);
      take(3, `${at}/0`);
      const tag = b[p - 1]!;
      if (tag === 0 || tag >= 0x80) {
        p = start;
        return fail(`${at}/0`, `ext type ${tag >= 0x80 ? tag - 256 : tag} is not a tag 1..127`, "R-TREE-14");
      }
      return tagged(tag, n - 1, at, depth);
    }
    const items: TreeNode[] = [];
    for (let k = 0; k < n; k++) items.push(node(`${at}[${k}]`, depth + 1));
    return { type: "list", items };
  };

  const tagged = (tag: number, fields: number, at: string, depth: number): TreeNode => {
    const FIELDS: Record<number, number> = { 2: 2, 3: 1, 4: 2, 5: 2, 6: 5, 7: 2, 8: 1 };
    if (tag >= 9 && tag <= 63) fail(`${at}/0`, `tag ${tag} is reserved`, "R-TREE-18");
    if (tag >= 64) fail(`${at}/0`, `tag ${tag} belongs to an extension this reader does not understand`, "R-TREE-19");
    if (tag !== 1 && fields !== FIELDS[tag]) fail(at, `tag ${tag} needs ${FIELDS[tag]} fields, found ${fields}`, "R-TREE-16");
    const f = (k: number): string => `${at}/${k}`;
    switch (tag) {
      case 1: {
        const items: TreeNode[] = [];
        for (let k = 1; k <= fields; k++) items.push(node(`${at}[${k - 1}]`, depth + 1));
        return { type: "tuple", items };
      }
      case 2: {
        expect("str", f(1), "type_name");
        const typeName = readStr(f(1));
        expect("map", f(2), "fields");
        const n = readLen(b[take(1, f(2))]!, f(2));
        const out: [string, TreeNode][] = [];
        const seen = new Set<string>();
        for (let k = 0; k < n; k++) {
          const kt = peekType(byteAt(f(2)));
          if (kt === "ext") badExt(f(2));
          if (kt !== "str") fail(`${f(2)}{key ${k}}`, "named tuple field name is not a str", "R-TREE-20");
          const name = readStr(f(2));
          if (seen.has(name)) fail(at + seg(name), `duplicate map key ${JSON.stringify(name)}`, "R-TREE-11");
          seen.add(name);
          out.push([name, node(at + seg(name), depth + 2)]);
        }
        return { type: "named_tuple", typeName, fields: out };
      }
      case 3: {
        expect("bin", f(1), "magnitude");
        const mag = readBin(f(1)); // at most R-LIM-12 bytes (checked before decoding); R-LIM-18 is tighter
        const n = mag.length;
        if (n > MAX_BIG_INT_BYTES) {
          throw new LimitExceeded(file, f(1), `big int magnitude declares ${n} bytes, more than ${MAX_BIG_INT_BYTES}`, "R-LIM-18");
        }
        if (n === 0 || (n >= 2 && ((mag[n - 1] === 0 && mag[n - 2]! < 0x80) || (mag[n - 1] === 0xff && mag[n - 2]! >= 0x80)))) {
          fail(f(1), "big int magnitude is not minimal", "R-TREE-21");
        }
        let v = 0n;
        for (let k = n - 1; k >= 0; k--) v = (v << 8n) | BigInt(mag[k]!);
        v = BigInt.asIntN(n * 8, v);
        if (v >= I64_MIN && v <= U64_MAX) fail(f(1), "big int value lies inside -2^63..2^64-1", "R-TREE-22");
        return { type: "int", value: v };
      }
      case 4: {
        expect("float", f(1), "real");
        const realBits = readFloatBits(f(1));
        expect("float", f(2), "imag");
        return { type: "complex", realBits, imagBits: readFloatBits(f(2)) };
      }
      case 5: {
        expect("str", f(1), "dtype");
        const dtype = dtypeOf(readStr(f(1)), f(1));
        expect("bin", f(2), "raw");
        const raw = readBin(f(2));
        if (raw.length !== ITEMSIZE.get(dtype)) fail(f(2), `raw has ${raw.length} bytes, ${dtype} needs ${ITEMSIZE.get(dtype)}`, "R-TREE-23");
        if (dtype === "bool" && raw[0]! > 1) fail(f(2), "bool scalar byte is not 00 or 01", "R-TREE-24");
        return { type: "scalar", dtype, raw };
      }
      case 6:
        return arrayFields(at);
      case 7: {
        expect("str", f(1), "impl");
        const impl = readStr(f(1));
        expect("array", f(2), "data");
        const q = p;
        const n = readLen(b[take(1, f(2))]!, f(2));
        if (n !== 6 || b[p] !== 0xc7 || b[p + 1] !== 0 || b[p + 2] !== 6) {
          p = q;
          fail(f(2), "PRNG key data is not an array node (tag 6)", "R-TREE-17");
        }
        p += 3;
        const data = arrayFields(f(2));
        if (!(impl === "threefry2x32" || impl === "rbg" || impl === "unsafe_rbg" || IMPL_RE.test(impl))) {
          fail(f(1), `PRNG implementation ${JSON.stringify(impl)} is not allowed`, "R-TREE-25");
        }
        if (data.dtype !== "uint32") fail(f(2), `PRNG key data has dtype ${data.dtype}, not uint32`, "R-TREE-26");
        const last = data.shape[data.shape.length - 1];
        if (impl === "threefry2x32" && last !== 2n) fail(f(2), "threefry2x32 key data needs a last dimension of 2", "R-TREE-27");
        if ((impl === "rbg" || impl === "unsafe_rbg") && last !== 4n) fail(f(2), `${impl} key data needs a last dimension of 4`, "R-TREE-28");
        return { type: "prng_key", impl, data };
      }
      default: {
        expect("str", f(1), "dtype");
        return { type: "dtype", dtype: dtypeOf(readStr(f(1)), f(1)) };
      }
    }
  };

  /** The five fields of an array node (tag 6); the marker is already consumed. */
  const arrayFields = (at: string): ArrayNode => {
    const f = (k: number): string => `${at}/${k}`;
    expect("str", f(1), "dtype");
    const dtype = dtypeOf(readStr(f(1)), f(1));
    expect("array", f(2), "shape");
    const nd = readLen(b[take(1, f(2))]!, f(2));
    const shape: bigint[] = [];
    for (let k = 0; k < nd; k++) {
      const t = peekType(byteAt(f(2)));
      if (t === "ext") badExt(`${f(2)}/${k}`);
      if (t !== "int") fail(`${f(2)}/${k}`, "shape element is not an int", "R-ARR-1");
      const d = readInt(`${f(2)}/${k}`);
      if (d < 0n) fail(`${f(2)}/${k}`, `shape element ${d} is negative`, "R-ARR-1");
      shape.push(d);
    }
    const uintField = (k: number, name: string): bigint => {
      const t = peekType(byteAt(f(k)));
      if (t === "ext") badExt(f(k));
      if (t !== "int") fail(f(k), `${name} must be a msgpack int, found ${t}`, "R-TREE-17");
      const v = readInt(f(k));
      if (v < 0n) fail(f(k), `${name} ${v} is negative`, "R-ARR-2");
      return v;
    };
    const offset = uintField(3, "offset");
    const nbytes = uintField(4, "nbytes");
    const crc = uintField(5, "crc32c");
    if (crc > 0xffffffffn) fail(f(5), `crc32c ${crc} exceeds 2^32-1`, "R-ARR-3");
    const a: ArrayNode = { type: "array", dtype, shape, offset, nbytes, crc32c: crc, at };
    arrays.push(a);
    return a;
  };

  const root = node("$", 1);
  if (p !== b.length) fail("$", `${b.length - p} bytes after the root object`, "R-TREE-2");
  return { root, arrays };
}
