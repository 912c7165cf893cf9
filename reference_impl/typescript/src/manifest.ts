/**
 * The manifest (spec §5–§7): identification (§15 step 5), the self-checksum
 * (step 6), structure (step 7), paths (step 8) and extensions (step 9).
 * One function per step; each raises the class that Table 16-1 assigns.
 */
import { crc32c, crcHex } from "./crc.js";
import { IntegrityError, LimitExceeded, ManifestError, NotACheckpoint, UnsafePath, UnsupportedExtension, UnsupportedVersion } from "./errors.js";
import { type JsonValue, member, typeName } from "./json.js";
import { checkPathGrammar, checkPathLimits, dirPrefixes, foldCase } from "./paths.js";

/** The highest format version this implementation reads (R-VER-3). */
export const FORMAT_VERSION = 1;
export const MAX_COMPONENTS = 100_000; // R-LIM-5
export const MAX_FILE_ENTRIES = 1_000_000; // R-LIM-6

export const NAME_RE = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/;
export const KIND_RE = /^[a-z][a-z0-9-]*(\.[a-z0-9-]+)+\/[a-z0-9_.-]+$/;
const EXT_NAME_RE = /^[a-z][a-z0-9-]*(\.[a-z0-9-]+)+$/;
const ID_RE = /^[A-Za-z0-9._:-]{1,128}$/;
const CREATED_RE = /^([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]{1,9})?Z$/;
const CRC_RE = /^[0-9a-f]{8}$/;
const SHA_RE = /^[0-9a-f]{64}$/;
export const BUILTIN_KINDS = ["tree", "json", "files"];

export interface FileEntry {
  size: number;
  crc32c: string;
  sha256?: string;
}

export interface ComponentRecord {
  name: string;
  kind: string;
  kindVersion: bigint;
  path: string;
  files: [string, FileEntry][];
  hints?: JsonValue;
  metadata?: JsonValue;
}

export interface Manifest {
  json: JsonValue;
  formatVersion: number;
  checkpointId: string;
  createdAt: string;
  producer: JsonValue;
  metadata: JsonValue;
  extensions: JsonValue;
  components: ComponentRecord[];
}

const M = "manifest.json";

/** Step 5: R-MAN-8, R-MAN-9, then R-MAN-10, then R-VER-1/R-VER-3. */
export function identify(doc: JsonValue): number {
  if (doc.t !== "obj") throw new NotACheckpoint(M, "$", "top-level JSON value is not an object", "R-MAN-8");
  const fmt = member(doc, "format");
  if (!fmt || fmt.t !== "str" || fmt.v !== "opencheckpoint") {
    throw new NotACheckpoint(M, "/format", 'member "format" is not "opencheckpoint"', "R-MAN-9");
  }
  const ver = member(doc, "format_version");
  if (!ver || ver.t !== "int" || ver.v < 1n) {
    throw new ManifestError(M, "/format_version", "format_version is not an integer token >= 1", "R-MAN-10");
  }
  if (ver.v > BigInt(FORMAT_VERSION)) {
    throw new UnsupportedVersion(M, "/format_version", `format_version ${ver.v} found; this reader supports format versions up to ${FORMAT_VERSION}`, "R-VER-3");
  }
  return Number(ver.v);
}

const SUFFIX_HEAD = new TextEncoder().encode('"manifest_crc32c": "');

/** Step 6: R-CHK-1, R-CHK-2, then R-CHK-3 — by position, on the raw bytes. */
export function checkManifestChecksum(bytes: Uint8Array): void {
  const n = bytes.length;
  const bad = (why: string, rule: string): never => {
    throw new ManifestError(M, "/manifest_crc32c", why, rule);
  };
  if (n < 32) bad("manifest shorter than the 32-byte checksum suffix", "R-CHK-1");
  const s = bytes.subarray(n - 32);
  const digits = s.subarray(20, 28);
  const ok =
    SUFFIX_HEAD.every((b, i) => s[i] === b) &&
    digits.every((b) => (b >= 0x30 && b <= 0x39) || (b >= 0x61 && b <= 0x66)) &&
    s[28] === 0x22 && s[29] === 0x0a && s[30] === 0x7d && s[31] === 0x0a;
  if (!ok) bad('manifest does not end with "manifest_crc32c": "<8 lowercase hex>"\\n}\\n', "R-CHK-1");
  let p = n - 33;
  while (p >= 0 && (bytes[p] === 0x20 || bytes[p] === 0x09 || bytes[p] === 0x0a || bytes[p] === 0x0d)) p--;
  if (p < 0 || bytes[p] !== 0x2c) bad("the checksum suffix is not preceded by a comma and whitespace", "R-CHK-2");
  const stored = new TextDecoder().decode(digits);
  const computed = crcHex(crc32c(bytes.subarray(0, n - 32)));
  if (stored !== computed) {
    throw new IntegrityError(M, "/manifest_crc32c", `crc32c mismatch: stored ${stored}, computed ${computed}`, "R-CHK-3");
  }
}

const TOP_MEMBERS = ["format", "format_version", "checkpoint_id", "created_at", "producer", "metadata", "extensions", "components", "manifest_crc32c"];
const COMPONENT_MEMBERS = ["kind", "kind_version", "path", "files", "hints", "metadata"];
const ENTRY_MEMBERS = ["size", "crc32c", "sha256"];
const EXT_MEMBERS = ["version", "must_understand", "data"];

const ptr = (...parts: string[]): string => "/" + parts.map((p) => p.replace(/~/g, "~0").replace(/\//g, "~1")).join("/");

function daysIn(year: number, month: number): number {
  const leap = (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
  return [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1] ?? 0;
}

/** Step 7: every member rule of §5.3–§7.1 (R-MAN-7, R-MAN-11…23, R-CMP-1…5, 9…11, 13…17, R-CHK-4/5, R-EXT-1…5, R-LIM-5/6). */
export function checkStructure(doc: JsonValue, formatVersion: number): Manifest {
  if (doc.t !== "obj") throw new Error("internal: identify() first");
  const err = (field: string, why: string, rule: string): never => {
    throw new ManifestError(M, field, why, rule);
  };
  const comps = member(doc, "components");
  // Limits first (R-LIM-0): counts bound all later per-entry work.
  if (comps?.t === "obj") {
    if (comps.v.length > MAX_COMPONENTS) throw new LimitExceeded(M, "/components", `more than ${MAX_COMPONENTS} components`, "R-LIM-5");
    let entries = 0;
    for (const [, rec] of comps.v) {
      const f = member(rec, "files");
      if (f?.t === "obj") entries += f.v.length;
    }
    if (entries > MAX_FILE_ENTRIES) throw new LimitExceeded(M, "/components", `more than ${MAX_FILE_ENTRIES} file entries`, "R-LIM-6");
  }
  for (const name of TOP_MEMBERS) if (!member(doc, name)) err(ptr(name), `required member "${name}" is missing`, "R-MAN-11");
  for (const [name] of doc.v) if (!TOP_MEMBERS.includes(name)) err(ptr(name), `unknown member "${name}"`, "R-MAN-12");

  const id = member(doc, "checkpoint_id")!;
  if (id.t !== "str" || !ID_RE.test(id.v)) err("/checkpoint_id", "checkpoint_id must be 1-128 characters of [A-Za-z0-9._:-]", "R-MAN-13");
  const created = member(doc, "created_at")!;
  const cm = created.t === "str" ? CREATED_RE.exec(created.v) : null;
  if (!cm) return err("/created_at", "created_at is not an RFC 3339 UTC timestamp of the required form", "R-MAN-14");
  const [y, mo, d, h, mi, s] = cm.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  if (mo < 1 || mo > 12 || d < 1 || d > daysIn(y, mo) || h > 23 || mi > 59 || s > 59) {
    err("/created_at", "created_at is not a valid date and time", "R-MAN-15");
  }

  const producer = member(doc, "producer")!;
  if (producer.t !== "obj") return err("/producer", "producer is not an object", "R-MAN-16");
  for (const [key, rule] of [["name", "R-MAN-17"], ["version", "R-MAN-18"]] as const) {
    const v = member(producer, key);
    const len = v?.t === "str" ? [...v.v].length : 0;
    if (len < 1 || len > 128) err(ptr("producer", key), `producer.${key} must be a string of 1-128 code points`, rule);
  }
  const env = member(producer, "environment");
  if (env && (env.t !== "obj" || env.v.some(([, v]) => v.t !== "str"))) {
    err("/producer/environment", "producer.environment must be an object of strings", "R-MAN-19");
  }
  for (const [k] of producer.v) if (!["name", "version", "environment"].includes(k)) err(ptr("producer", k), `unknown member "${k}"`, "R-MAN-20");
  const metadata = member(doc, "metadata")!;
  if (metadata.t !== "obj") err("/metadata", "metadata is not an object", "R-MAN-21");
  const extensions = member(doc, "extensions")!;
  if (extensions.t !== "obj") return err("/extensions", "extensions is not an object", "R-MAN-22");
  if (comps!.t !== "obj") return err("/components", "components is not an object", "R-MAN-23");

  for (const [name, rec] of extensions.v) {
    const at = (k?: string): string => (k ? ptr("extensions", name, k) : ptr("extensions", name));
    if (!EXT_NAME_RE.test(name)) err(at(), `extension name ${JSON.stringify(name)} is not a reverse-DNS name`, "R-EXT-1");
    if (rec.t !== "obj") return err(at(), "extension record is not an object", "R-EXT-2");
    for (const k of EXT_MEMBERS) if (!member(rec, k)) err(at(k), `required member "${k}" is missing`, "R-EXT-2");
    for (const [k] of rec.v) if (!EXT_MEMBERS.includes(k)) err(at(k), `unknown member "${k}"`, "R-EXT-3");
    const v = member(rec, "version")!;
    if (v.t !== "int" || v.v < 1n) err(at("version"), "version is not an integer >= 1", v.t === "float" ? "R-MAN-7" : "R-EXT-4");
    if (member(rec, "must_understand")!.t !== "bool") err(at("must_understand"), "must_understand is not a boolean", "R-EXT-5");
  }

  const components: ComponentRecord[] = [];
  for (const [name, rec] of comps!.v) {
    const at = (...k: string[]): string => ptr("components", name, ...k);
    if (!NAME_RE.test(name)) err(at(), `component name ${JSON.stringify(name)} does not match the name grammar`, "R-CMP-1");
    if (rec.t !== "obj") return err(at(), "component record is not an object", "R-CMP-2");
    for (const k of ["kind", "kind_version", "path", "files"]) if (!member(rec, k)) err(at(k), `required member "${k}" is missing`, "R-CMP-2");
    for (const [k] of rec.v) if (!COMPONENT_MEMBERS.includes(k)) err(at(k), `unknown member "${k}"`, "R-CMP-3");
    const kind = member(rec, "kind")!;
    if (kind.t !== "str" || !(BUILTIN_KINDS.includes(kind.v) || KIND_RE.test(kind.v))) {
      err(at("kind"), "kind is neither a built-in kind nor a namespaced kind", "R-CMP-4");
    }
    const kv = member(rec, "kind_version")!;
    if (kv.t !== "int" || kv.v < 1n) err(at("kind_version"), "kind_version is not an integer >= 1", kv.t === "float" ? "R-MAN-7" : "R-CMP-5");
    const path = member(rec, "path")!;
    if (path.t !== "str") err(at("path"), "path is not a string", "R-CMP-2");
    const files = member(rec, "files")!;
    if (files.t !== "obj") return err(at("files"), "files is not an object", "R-CMP-9");
    const hints = member(rec, "hints");
    if (hints && (hints.t !== "obj" || hints.v.some(([, v]) => v.t !== "str"))) err(at("hints"), "hints must be an object of strings", "R-CMP-10");
    const meta = member(rec, "metadata");
    if (meta && meta.t !== "obj") err(at("metadata"), "metadata is not an object", "R-CMP-11");
    const entries: [string, FileEntry][] = [];
    for (const [key, fe] of files.v) {
      if (fe.t !== "obj") return err(at("files", key), "file entry is not an object", "R-CMP-13");
      for (const k of ["size", "crc32c"]) if (!member(fe, k)) err(at("files", key, k), `required member "${k}" is missing`, "R-CMP-13");
      for (const [k] of fe.v) if (!ENTRY_MEMBERS.includes(k)) err(at("files", key, k), `unknown member "${k}"`, "R-CMP-14");
      const size = member(fe, "size")!;
      if (size.t === "float") err(at("files", key, "size"), "size is not an integer token", "R-MAN-7");
      if (size.t !== "int" || size.v < 0n || size.v > 2n ** 53n - 1n) err(at("files", key, "size"), "size is not an integer in 0..2^53-1", "R-CMP-15");
      const crc = member(fe, "crc32c")!;
      if (crc.t !== "str" || !CRC_RE.test(crc.v)) err(at("files", key, "crc32c"), "crc32c is not 8 lowercase hex digits", "R-CHK-4");
      const sha = member(fe, "sha256");
      if (sha && (sha.t !== "str" || !SHA_RE.test(sha.v))) err(at("files", key, "sha256"), "sha256 is not 64 lowercase hex digits", "R-CHK-5");
      const entry: FileEntry = { size: Number((size as { v: bigint }).v), crc32c: (crc as { v: string }).v };
      if (sha) entry.sha256 = (sha as { v: string }).v;
      entries.push([key, entry]);
    }
    const k = (kind as { v: string }).v;
    const kvn = (kv as { v: bigint }).v;
    const keys = entries.map(([key]) => key).sort().join(",");
    if (k === "tree" && kvn === 1n && keys !== "data.bin,tree.msgpack") {
      err(at("files"), "a tree component lists exactly tree.msgpack and data.bin", "R-CMP-16");
    }
    if (k === "json" && kvn === 1n && keys !== "value.json") err(at("files"), "a json component lists exactly value.json", "R-CMP-17");
    const c: ComponentRecord = { name, kind: k, kindVersion: kvn, path: (path as { v: string }).v, files: entries };
    if (hints) c.hints = hints;
    if (meta) c.metadata = meta;
    components.push(c);
  }
  return {
    json: doc,
    formatVersion,
    checkpointId: (id as { v: string }).v,
    createdAt: (created as { v: string }).v,
    producer,
    metadata,
    extensions,
    components,
  };
}

export const fullPath = (c: ComponentRecord, key: string): string => `${c.path}/${key}`;

/** Step 8: R-LIM-7, R-LIM-8, then R-PATH-1 … R-PATH-4 and R-CMP-6 … R-CMP-8. */
export function checkPaths(m: Manifest): void {
  for (const c of m.components) {
    checkPathLimits(c.path, M, ptr("components", c.name, "path"));
    for (const [key] of c.files) {
      checkPathLimits(key, M, ptr("components", c.name, "files", key));
      checkPathLimits(fullPath(c, key), M, ptr("components", c.name, "files", key));
    }
  }
  for (const c of m.components) {
    checkPathGrammar(c.path, M, ptr("components", c.name, "path"), "R-PATH-1");
    for (const [key] of c.files) checkPathGrammar(key, M, ptr("components", c.name, "files", key), "R-PATH-2");
  }
  const unsafe = (field: string, why: string, rule: string): never => {
    throw new UnsafePath(M, field, why, rule);
  };
  // R-PATH-3 / R-PATH-4 over the full file paths and manifest.json.
  const files = new Map<string, string>([["manifest.json", "manifest.json"]]);
  for (const c of m.components) {
    for (const [key] of c.files) {
      const f = foldCase(fullPath(c, key));
      if (files.has(f)) unsafe(ptr("components", c.name, "files", key), `${fullPath(c, key)} collides with ${files.get(f)} after case folding`, "R-PATH-3");
      files.set(f, fullPath(c, key));
    }
  }
  for (const [folded, orig] of files) {
    for (const pre of dirPrefixes(folded)) {
      if (files.has(pre)) unsafe("/components", `${files.get(pre)} is a directory prefix of ${orig}`, "R-PATH-4");
    }
  }
  // R-CMP-6 … R-CMP-8 over the component paths.
  const paths = new Map<string, string>();
  for (const c of m.components) {
    const f = foldCase(c.path);
    if (f === "manifest.json") unsafe(ptr("components", c.name, "path"), "component path is manifest.json", "R-CMP-8");
    if (paths.has(f)) unsafe(ptr("components", c.name, "path"), `same path as component ${paths.get(f)}`, "R-CMP-6");
    paths.set(f, c.name);
  }
  for (const c of m.components) {
    for (const pre of dirPrefixes(foldCase(c.path))) {
      if (paths.has(pre)) unsafe(ptr("components", c.name, "path"), `path of component ${paths.get(pre)} is a prefix of this one`, "R-CMP-7");
    }
  }
}

/** Extensions this reader understands: none (R-EXT-9 forbids the reserved ones anyway). */
export const UNDERSTOOD_EXTENSIONS: ReadonlyMap<string, bigint> = new Map();

/** Step 9: R-EXT-7 — a must_understand extension this reader does not understand. */
export function checkExtensions(m: Manifest): void {
  if (m.extensions.t !== "obj") return;
  for (const [name, rec] of m.extensions.v) {
    const mu = member(rec, "must_understand");
    const ver = member(rec, "version");
    const known = UNDERSTOOD_EXTENSIONS.get(name);
    const understood = !name.startsWith("org.opencheckpoint.") && known !== undefined && ver?.t === "int" && ver.v <= known;
    if (mu?.t === "bool" && mu.v && !understood) {
      throw new UnsupportedExtension(M, ptr("extensions", name), `extension ${name} must be understood and is not`, "R-EXT-7");
    }
  }
}

export { typeName };
