/**
 * A checkpoint to write, as files in memory: built from component contents,
 * or from a canonical rendering (Appendix B) for `CMD write`.
 */
import { sha256 } from "@noble/hashes/sha2.js";
import { crc32c, crcHex } from "./crc.js";
import { encodeJsonValue, encodeTree, sealManifest, type WriteArray, type WriteNode } from "./encode.js";
import { CheckpointError } from "./errors.js";
import { J, type JsonValue, member } from "./json.js";
import { toHex } from "./render.js";
import type { DictKey } from "./tree.js";

export type ComponentContent =
  | { type: "tree"; root: WriteNode }
  | { type: "json"; value: JsonValue }
  /** `files` kind or a third-party kind: opaque files by inventory key. */
  | { type: "files"; files: [string, Uint8Array][] };

export interface ComponentSpec {
  name: string;
  kind: string;
  kindVersion: bigint;
  path?: string; // default components/<name>
  hints?: JsonValue;
  metadata?: JsonValue;
  /** Inventory keys whose file entry also gets a sha256. */
  sha256?: string[];
  content: ComponentContent;
}

export interface CheckpointSpec {
  checkpointId: string;
  createdAt: string;
  producer: JsonValue;
  metadata?: JsonValue;
  extensions?: JsonValue;
  components: ComponentSpec[];
}

/** Every file of the checkpoint, `manifest.json` last (R-PUB-2, R-ZIP-21). */
export interface FilePlan {
  files: [string, Uint8Array][];
}

export function planCheckpoint(spec: CheckpointSpec): FilePlan {
  const files: [string, Uint8Array][] = [];
  const records: [string, JsonValue][] = [];
  for (const c of spec.components) {
    const path = c.path ?? `components/${c.name}`;
    let own: [string, Uint8Array][];
    if (c.content.type === "tree") {
      const { tree, data } = encodeTree(c.content.root);
      own = [["tree.msgpack", tree], ["data.bin", data]];
    } else if (c.content.type === "json") {
      own = [["value.json", encodeJsonValue(c.content.value)]];
    } else {
      own = c.content.files;
    }
    const inv: [string, JsonValue][] = own.map(([k, b]) => {
      const e: [string, JsonValue][] = [["size", J.int(b.length)], ["crc32c", J.str(crcHex(crc32c(b)))]];
      if (c.sha256?.includes(k)) e.push(["sha256", J.str(toHex(sha256(b)))]);
      return [k, J.obj(e)];
    });
    const rec: [string, JsonValue][] = [["kind", J.str(c.kind)], ["kind_version", J.int(c.kindVersion)], ["path", J.str(path)], ["files", J.obj(inv)]];
    if (c.hints) rec.push(["hints", c.hints]);
    if (c.metadata) rec.push(["metadata", c.metadata]);
    records.push([c.name, J.obj(rec)]);
    for (const [k, b] of own) files.push([`${path}/${k}`, b]);
  }
  const manifest = J.obj([
    ["format", J.str("opencheckpoint")],
    ["format_version", J.int(1)],
    ["checkpoint_id", J.str(spec.checkpointId)],
    ["created_at", J.str(spec.createdAt)],
    ["producer", spec.producer],
    ["metadata", spec.metadata ?? J.obj([])],
    ["extensions", spec.extensions ?? J.obj([])],
    ["components", J.obj(records)],
  ]);
  files.push(["manifest.json", sealManifest(manifest)]);
  return { files };
}

// ---------------------------------------------------------------------------
// From a canonical rendering (Appendix B) to a CheckpointSpec.

const need = (o: JsonValue | undefined, field: string, t: JsonValue["t"]): JsonValue => {
  if (!o || o.t !== t) throw new CheckpointError("(rendering)", field, `expected ${t}`, "B");
  return o;
};
const str = (o: JsonValue, k: string, at: string): string => (need(member(o, k), `${at}.${k}`, "str") as { v: string }).v;
const fromHex = (h: string, at: string): Uint8Array => {
  if (!/^([0-9a-f]{2})*$/.test(h)) throw new CheckpointError("(rendering)", at, "not lowercase hex", "B.5");
  return Uint8Array.from({ length: h.length / 2 }, (_, k) => parseInt(h.slice(2 * k, 2 * k + 2), 16));
};
/** A complete BLOB (B.6): only `hex`; a digest-only BLOB cannot be written. */
const blobBytes = (o: JsonValue, at: string): Uint8Array => {
  const h = member(o, "hex");
  if (!h) throw new CheckpointError("(rendering)", at, "BLOB rendered by digest only: the rendering is not complete (B.6)", "B.6");
  return fromHex((need(h, `${at}.hex`, "str") as { v: string }).v, at);
};
const bigintOf = (o: JsonValue | undefined, at: string): bigint => {
  if (o?.t === "int") return o.v;
  if (o?.t === "str" && /^-?(0|[1-9][0-9]*)$/.test(o.v)) return BigInt(o.v);
  throw new CheckpointError("(rendering)", at, "expected an integer", "B.4");
};

function nodeFromRendering(n: JsonValue, at: string): WriteNode {
  const type = str(n, "type", at);
  const items = (k: string): WriteNode[] => (need(member(n, k), `${at}.${k}`, "arr") as { v: JsonValue[] }).v.map((x, i) => nodeFromRendering(x, `${at}.${k}[${i}]`));
  const arrayOf = (o: JsonValue, p: string): WriteArray => ({
    type: "array",
    dtype: str(o, "dtype", p),
    shape: (need(member(o, "shape"), `${p}.shape`, "arr") as { v: JsonValue[] }).v.map((d, i) => bigintOf(d, `${p}.shape[${i}]`)),
    data: blobBytes(o, p),
  });
  switch (type) {
    case "none": return { type };
    case "bool": return { type, value: (need(member(n, "value"), `${at}.value`, "bool") as { v: boolean }).v };
    case "int": return { type, value: bigintOf(member(n, "value"), `${at}.value`) };
    case "float": return { type, bits: str(n, "bits", at) };
    case "complex": return { type, realBits: str(n, "real_bits", at), imagBits: str(n, "imag_bits", at) };
    case "str": return { type, value: str(n, "value", at) };
    case "bytes": return { type, data: blobBytes(n, at) };
    case "list": return { type, items: items("items") };
    case "tuple": return { type, items: items("items") };
    case "dict": {
      const entries = (need(member(n, "items"), `${at}.items`, "arr") as { v: JsonValue[] }).v;
      return {
        type,
        items: entries.map((e, i) => {
          const [k, v] = (need(e, `${at}.items[${i}]`, "arr") as { v: JsonValue[] }).v;
          const ks = member(k!, "str");
          const key: DictKey = ks ? { str: (need(ks, `${at}.items[${i}][0]`, "str") as { v: string }).v } : { int: bigintOf(member(k!, "int"), `${at}.items[${i}][0]`) };
          return [key, nodeFromRendering(v!, `${at}.items[${i}][1]`)] as [DictKey, WriteNode];
        }),
      };
    }
    case "named_tuple": {
      const fields = (need(member(n, "fields"), `${at}.fields`, "arr") as { v: JsonValue[] }).v;
      return {
        type,
        typeName: str(n, "type_name", at),
        fields: fields.map((f, i) => {
          const [k, v] = (need(f, `${at}.fields[${i}]`, "arr") as { v: JsonValue[] }).v;
          return [(need(k, `${at}.fields[${i}][0]`, "str") as { v: string }).v, nodeFromRendering(v!, `${at}.fields[${i}][1]`)] as [string, WriteNode];
        }),
      };
    }
    case "scalar": return { type, dtype: str(n, "dtype", at), raw: fromHex(str(n, "hex", at), at) };
    case "array": return arrayOf(n, at);
    case "prng_key": return { type, impl: str(n, "impl", at), data: arrayOf(need(member(n, "data"), `${at}.data`, "obj"), `${at}.data`) };
    case "dtype": return { type, dtype: str(n, "dtype", at) };
    default: throw new CheckpointError("(rendering)", `${at}.type`, `unknown node type ${JSON.stringify(type)}`, "B.4");
  }
}

/** Appendix B document -> what to write. */
export function specFromRendering(doc: JsonValue): CheckpointSpec {
  need(doc, "$", "obj");
  const comps = need(member(doc, "components"), "$.components", "obj") as { v: [string, JsonValue][] };
  const components: ComponentSpec[] = comps.v.map(([name, r]) => {
    const at = `$.components.${name}`;
    const content = need(member(r, "content"), `${at}.content`, "obj");
    const ctype = str(content, "type", `${at}.content`);
    const files = member(r, "files");
    const shaKeys = files?.t === "obj" ? files.v.filter(([, e]) => member(e, "sha256")).map(([k]) => k) : [];
    let cc: ComponentContent;
    if (ctype === "tree") cc = { type: "tree", root: nodeFromRendering(need(member(content, "root"), `${at}.content.root`, "obj"), `${at}.content.root`) };
    else if (ctype === "json") cc = { type: "json", value: member(content, "value") ?? J.null() };
    else {
      const fs = need(member(content, "files"), `${at}.content.files`, "obj") as { v: [string, JsonValue][] };
      cc = { type: "files", files: fs.v.map(([k, b]) => [k, blobBytes(b, `${at}.content.files.${k}`)]) };
    }
    const spec: ComponentSpec = {
      name,
      kind: str(r, "kind", at),
      kindVersion: bigintOf(member(r, "kind_version"), `${at}.kind_version`),
      path: str(r, "path", at),
      sha256: shaKeys,
      content: cc,
    };
    const hints = member(r, "hints");
    const meta = member(r, "metadata");
    if (hints) spec.hints = hints;
    if (meta) spec.metadata = meta;
    return spec;
  });
  return {
    checkpointId: str(doc, "checkpoint_id", "$"),
    createdAt: str(doc, "created_at", "$"),
    producer: need(member(doc, "producer"), "$.producer", "obj"),
    metadata: need(member(doc, "metadata"), "$.metadata", "obj"),
    extensions: need(member(doc, "extensions"), "$.extensions", "obj"),
    components,
  };
}
