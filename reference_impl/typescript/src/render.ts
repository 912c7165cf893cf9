/** The canonical content rendering of spec Appendix B (what `CMD read` prints). */
import { sha256 } from "@noble/hashes/sha2.js";
import { type Container, streamRange } from "./container.js";
import { J, type JsonValue, member } from "./json.js";
import { fullPath } from "./manifest.js";
import type { DecodedComponent, Opened } from "./reader.js";
import type { TreeNode } from "./tree.js";

export const BLOB_INLINE_MAX = 4096; // B.6

export const toHex = (b: Uint8Array): string => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");

/** B.6: the members of a BLOB for `length` bytes at `offset` of `path`. */
export async function blob(c: Container, path: string, offset: number, length: number): Promise<[string, JsonValue][]> {
  if (length <= BLOB_INLINE_MAX) return [["hex", J.str(toHex(await c.read(path, offset, length)))]];
  const h = sha256.create();
  await streamRange(c, path, offset, length, (chunk) => h.update(chunk));
  const head = await c.read(path, offset, 64);
  const tail = await c.read(path, offset + length - 64, 64);
  return [["sha256", J.str(toHex(h.digest()))], ["head", J.str(toHex(head))], ["tail", J.str(toHex(tail))]];
}

/** A human-readable text for a binary64 bit pattern (B.4 `value`, informative). */
export function floatText(bits: string): string {
  const dv = new DataView(new ArrayBuffer(8));
  dv.setBigUint64(0, BigInt("0x" + bits));
  const f = dv.getFloat64(0);
  if (Number.isNaN(f)) return "nan";
  if (!Number.isFinite(f)) return f > 0 ? "inf" : "-inf";
  return Object.is(f, -0) ? "-0.0" : String(f);
}

async function node(n: TreeNode, c: Container, dataFile: string): Promise<JsonValue> {
  const typed = (type: string, rest: [string, JsonValue][]): JsonValue => J.obj([["type", J.str(type)], ...rest]);
  const items = async (xs: TreeNode[]): Promise<JsonValue> => J.arr(await Promise.all(xs.map((x) => node(x, c, dataFile))));
  switch (n.type) {
    case "none": return typed("none", []);
    case "bool": return typed("bool", [["value", J.bool(n.value)]]);
    case "int": return typed("int", [["value", J.str(n.value.toString())]]);
    case "float": return typed("float", [["bits", J.str(n.bits)], ["value", J.str(floatText(n.bits))]]);
    case "complex":
      return typed("complex", [
        ["real_bits", J.str(n.realBits)], ["imag_bits", J.str(n.imagBits)],
        ["value", J.str(`(${floatText(n.realBits)}+${floatText(n.imagBits)}j)`)],
      ]);
    case "str": return typed("str", [["value", J.str(n.value)]]);
    case "bytes": {
      const data = n.data;
      const b: [string, JsonValue][] = data.length <= BLOB_INLINE_MAX
        ? [["hex", J.str(toHex(data))]]
        : [["sha256", J.str(toHex(sha256(data)))], ["head", J.str(toHex(data.subarray(0, 64)))], ["tail", J.str(toHex(data.subarray(data.length - 64)))]];
      return typed("bytes", [["nbytes", J.int(data.length)], ...b]);
    }
    case "list": return typed("list", [["items", await items(n.items)]]);
    case "tuple": return typed("tuple", [["items", await items(n.items)]]);
    case "dict": {
      const out: JsonValue[] = [];
      for (const [k, v] of n.items) {
        const key = "str" in k ? J.obj([["str", J.str(k.str)]]) : J.obj([["int", J.str(k.int.toString())]]);
        out.push(J.arr([key, await node(v, c, dataFile)]));
      }
      return typed("dict", [["items", J.arr(out)]]);
    }
    case "named_tuple": {
      const out: JsonValue[] = [];
      for (const [k, v] of n.fields) out.push(J.arr([J.str(k), await node(v, c, dataFile)]));
      return typed("named_tuple", [["type_name", J.str(n.typeName)], ["fields", J.arr(out)]]);
    }
    case "scalar": return typed("scalar", [["dtype", J.str(n.dtype)], ["hex", J.str(toHex(n.raw))]]);
    case "array":
      return typed("array", [
        ["dtype", J.str(n.dtype)],
        ["shape", J.arr(n.shape.map((d) => J.int(d)))],
        ["nbytes", J.int(n.nbytes)],
        ...(await blob(c, dataFile, Number(n.offset), Number(n.nbytes))),
      ]);
    case "prng_key": return typed("prng_key", [["impl", J.str(n.impl)], ["data", await node(n.data, c, dataFile)]]);
    case "dtype": return typed("dtype", [["dtype", J.str(n.dtype)]]);
  }
}

/** B.2–B.7: the rendering document of a decoded checkpoint. */
export async function render(o: Opened, comps: DecodedComponent[]): Promise<JsonValue> {
  const { container: c, manifest: m } = o;
  const doc = m.json;
  const get = (k: string): JsonValue => member(doc, k)!;
  const components: [string, JsonValue][] = [];
  for (const { record: r, content } of comps) {
    const files = J.obj(r.files.map(([k, e]) => [k, J.obj([
      ["size", J.int(e.size)], ["crc32c", J.str(e.crc32c)], ...(e.sha256 !== undefined ? [["sha256", J.str(e.sha256)] as [string, JsonValue]] : []),
    ])]));
    let rendered: JsonValue;
    if (content.type === "tree") {
      rendered = J.obj([["type", J.str("tree")], ["root", await node(content.tree.root, c, content.dataFile)]]);
    } else if (content.type === "json") {
      rendered = J.obj([["type", J.str("json")], ["value", content.value]]);
    } else {
      const fs: [string, JsonValue][] = [];
      for (const [k, e] of r.files) fs.push([k, J.obj([["size", J.int(e.size)], ...(await blob(c, fullPath(r, k), 0, e.size))])]);
      rendered = J.obj([["type", J.str(content.type)], ["files", J.obj(fs)]]);
    }
    const rec: [string, JsonValue][] = [
      ["kind", J.str(r.kind)], ["kind_version", J.int(r.kindVersion)], ["path", J.str(r.path)],
    ];
    if (r.hints) rec.push(["hints", r.hints]);
    if (r.metadata) rec.push(["metadata", r.metadata]);
    rec.push(["files", files], ["content", rendered]);
    components.push([r.name, J.obj(rec)]);
  }
  return J.obj([
    ["rendering", J.int(1)],
    ["form", J.str(c.form)],
    ["format_version", get("format_version")],
    ["checkpoint_id", get("checkpoint_id")],
    ["created_at", get("created_at")],
    ["producer", get("producer")],
    ["metadata", get("metadata")],
    ["extensions", get("extensions")],
    ["components", J.obj(components)],
  ]);
}
