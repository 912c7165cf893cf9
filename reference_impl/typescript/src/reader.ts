/**
 * The reader: the validation order of spec §15, steps 2–16, over any container.
 *
 * `openCheckpoint` runs steps 2–11 (open); `decodeCheckpoint` runs steps 12–16
 * for every component (validate + decode, R-RDR-5). Each step runs for every
 * component before the next step starts, so the first failing step is the one
 * reported (R-RDR-11).
 */
import { sha256 } from "@noble/hashes/sha2.js";
import { type Container, streamRange } from "./container.js";
import { crcHex, newCrc32c } from "./crc.js";
import { IntegrityError, LimitExceeded, UnsupportedVersion } from "./errors.js";
import { type JsonValue, parseJsonBytes } from "./json.js";
import { checkArrayContent, LAYOUT_GROUPS, type TreeLayout } from "./layout.js";
import {
  checkExtensions, checkManifestChecksum, checkPaths, checkStructure, type ComponentRecord,
  type FileEntry, fullPath, identify, type Manifest,
} from "./manifest.js";
import { checkDeclaredLimits, type DecodedTree, decodeTree } from "./tree.js";

export const MAX_MANIFEST_BYTES = 64 * 1024 * 1024; // R-LIM-1
export const MAX_VALUE_JSON_BYTES = 64 * 1024 * 1024; // R-LIM-2
export const MAX_TREE_BYTES = 1024 * 1024 * 1024; // R-LIM-9

/** Kinds this implementation decodes, with the highest kind_version of each (R-CMP-19). */
export const IMPLEMENTED_KINDS: ReadonlyMap<string, bigint> = new Map([["tree", 1n], ["json", 1n], ["files", 1n]]);

export interface Opened {
  container: Container;
  manifest: Manifest;
  manifestBytes: Uint8Array;
}

export type Content =
  | { type: "tree"; tree: DecodedTree; treeFile: string; dataFile: string }
  | { type: "json"; value: JsonValue }
  | { type: "files" }
  | { type: "opaque" };

export interface DecodedComponent {
  record: ComponentRecord;
  content: Content;
}

/** §15 steps 2–11. */
export async function openCheckpoint(container: Container): Promise<Opened> {
  const size = await container.open(); // step 2
  if (size > MAX_MANIFEST_BYTES) {
    throw new LimitExceeded("manifest.json", "size", `manifest is ${size} bytes, more than ${MAX_MANIFEST_BYTES}`, "R-LIM-1");
  }
  const bytes = await container.read("manifest.json", 0, size);
  const doc = parseJsonBytes(bytes, { file: "manifest.json", limits: true }); // step 4
  const version = identify(doc); // step 5
  checkManifestChecksum(bytes); // step 6
  const manifest = checkStructure(doc, version); // step 7
  checkPaths(manifest); // step 8
  checkExtensions(manifest); // step 9
  const listed = manifest.components.flatMap((c) => c.files.map(([k]) => fullPath(c, k)));
  await container.checkInventory(listed); // step 10
  for (const c of manifest.components) { // step 11
    for (const [k, e] of c.files) {
      const actual = container.size(fullPath(c, k));
      if (actual !== e.size) {
        throw new IntegrityError(fullPath(c, k), "size", `file has ${actual} bytes, manifest says ${e.size}`, "R-CHK-6");
      }
    }
  }
  return { container, manifest, manifestBytes: bytes };
}

const entryOf = (c: ComponentRecord, key: string): FileEntry => c.files.find(([k]) => k === key)![1];

/** The file a built-in kind decodes first (checked in step 13), if any. */
const payload = (r: ComponentRecord): string | null => (r.kind === "tree" ? "tree.msgpack" : r.kind === "json" ? "value.json" : null);

/** CRC-32C (and SHA-256 when asked) of a whole file, streamed. */
async function digestFile(container: Container, path: string, withSha: boolean): Promise<{ crc: string; sha?: string }> {
  const crc = newCrc32c();
  const sha = withSha ? sha256.create() : null;
  await streamRange(container, path, 0, container.size(path), (chunk) => {
    crc.update(chunk);
    sha?.update(chunk);
  });
  const out: { crc: string; sha?: string } = { crc: crcHex(crc.digest()) };
  if (sha) out.sha = Array.from(sha.digest(), (x) => x.toString(16).padStart(2, "0")).join("");
  return out;
}

function checkDigest(path: string, e: FileEntry, got: { crc: string; sha?: string }, crc: boolean, sha: boolean): void {
  if (crc && got.crc !== e.crc32c) {
    throw new IntegrityError(path, "crc32c", `crc32c mismatch: stored ${e.crc32c}, computed ${got.crc}`, "R-CHK-7");
  }
  if (sha && e.sha256 !== undefined && got.sha !== e.sha256) {
    throw new IntegrityError(path, "sha256", `sha256 mismatch: stored ${e.sha256}, computed ${got.sha}`, "R-CHK-8");
  }
}

/** §15 steps 12–16 for every component: validate everything and decode what this implementation implements. */
export async function decodeCheckpoint(o: Opened): Promise<DecodedComponent[]> {
  const comps = await decodeComponents(o);
  await verifyContent(o, comps);
  return comps;
}

/** §15 steps 12–15: kind versions, payload checksums, parsing and array layout of every component. */
export async function decodeComponents(o: Opened): Promise<DecodedComponent[]> {
  const { container: c, manifest } = o;
  const comps = manifest.components;
  // Step 12: kind versions (R-CMP-19). Unknown kinds are rendered opaque (R-RDR-8), never decoded.
  for (const r of comps) {
    const max = IMPLEMENTED_KINDS.get(r.kind);
    if (max !== undefined && r.kindVersion > max) {
      throw new UnsupportedVersion("manifest.json", `/components/${r.name}/kind_version`, `${r.kind} kind_version ${r.kindVersion}; this reader implements up to ${max}`, "R-CMP-19");
    }
  }
  // Steps 13–15 each run over every component before the next step; inside a step the groups
  // ("then") run per component: all groups for one component before the next one (§15).
  // Step 13: payload size (R-LIM-9 / R-LIM-2), then its CRC-32C (R-CHK-7).
  const payloads = new Map<string, Uint8Array>();
  for (const r of comps) {
    const key = payload(r);
    if (!key) continue;
    const max = key === "tree.msgpack" ? MAX_TREE_BYTES : MAX_VALUE_JSON_BYTES;
    const size = entryOf(r, key).size;
    if (size > max) throw new LimitExceeded(fullPath(r, key), "size", `${key} is ${size} bytes, more than ${max}`, key === "tree.msgpack" ? "R-LIM-9" : "R-LIM-2");
    const path = fullPath(r, key);
    const bytes = await c.read(path, 0, c.size(path));
    const got = crcHex(newCrc32c().update(bytes).digest());
    checkDigest(path, entryOf(r, key), { crc: got }, true, false);
    payloads.set(r.name, bytes);
  }
  // Step 14: parse. A tree's declared limits, then its node rules.
  const contents = new Map<string, Content>();
  for (const r of comps) {
    const path = fullPath(r, payload(r) ?? "");
    if (r.kind === "json") contents.set(r.name, { type: "json", value: parseJsonBytes(payloads.get(r.name)!, { file: path, limits: true }) });
    if (r.kind !== "tree") continue;
    checkDeclaredLimits(payloads.get(r.name)!, path);
    contents.set(r.name, { type: "tree", tree: decodeTree(payloads.get(r.name)!, path), treeFile: path, dataFile: fullPath(r, "data.bin") });
  }
  // Step 15: array layout, group by group for each tree.
  for (const r of comps) {
    const ct = contents.get(r.name);
    if (ct?.type !== "tree") continue;
    const t: TreeLayout = { treeFile: ct.treeFile, dataFile: ct.dataFile, arrays: ct.tree.arrays };
    for (const group of LAYOUT_GROUPS) group(t, c.size(t.dataFile));
  }
  return comps.map((record) => ({
    record,
    content: contents.get(record.name) ?? { type: record.kind === "files" ? "files" : "opaque" },
  }));
}

/** What step 16 verified, for display. */
export interface ContentReport {
  arrays: number;
  files: number;
  bytes: number;
  zipMembers: number;
}

/** §15 step 16: array checksums and bool bytes, zero padding, every file's checksums, the archive's CRC-32s. */
export async function verifyContent(o: Opened, decoded: DecodedComponent[]): Promise<ContentReport> {
  const { container: c, manifest } = o;
  const comps = manifest.components;
  const report: ContentReport = { arrays: 0, files: 0, bytes: 0, zipMembers: 0 };
  for (const d of decoded) {
    if (d.content.type !== "tree") continue;
    const t = { treeFile: d.content.treeFile, dataFile: d.content.dataFile, arrays: d.content.tree.arrays };
    await checkArrayContent(c, t);
    report.arrays += t.arrays.length;
  }
  for (const r of comps) {
    for (const [key, e] of r.files) {
      const path = fullPath(r, key);
      const isPayload = key === payload(r);
      report.files++; // payload files were verified in step 13; count them too
      report.bytes += e.size;
      if (isPayload && e.sha256 === undefined) continue;
      checkDigest(path, e, await digestFile(c, path, e.sha256 !== undefined), !isPayload, true);
    }
  }
  report.zipMembers = await c.verifyContainer();
  return report;
}
