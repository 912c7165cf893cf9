/**
 * Publishing a checkpoint on disk (spec §12): staging name, fsync of every
 * file and directory, manifest written last, then rename into place.
 * Before publishing, the staged checkpoint is read back with the full
 * validation of §15, so a defect in the input never reaches the target (R-WTR-1).
 */
import { randomBytes } from "node:crypto";
import { promises as fsp, readFileSync } from "node:fs";
import * as nodePath from "node:path";
import type { Container } from "../container.js";
import { DirectoryContainer } from "../directory.js";
import { J, parseJsonText } from "../json.js";
import { type CheckpointSpec, planCheckpoint, specFromRendering } from "../plan.js";
import { decodeCheckpoint, openCheckpoint } from "../reader.js";
import { ArchiveContainer } from "../zip.js";
import { zipArchive } from "../zipwrite.js";
import { IMPLEMENTATION, VERSION } from "../version.js";
import { NodeDirectory, NodeFile, openPath } from "./fs.js";


const randomName = (): string => randomBytes(12).toString("base64").replace(/[^A-Za-z0-9]/g, "").slice(0, 12).padEnd(8, "x");

async function fsyncPath(p: string): Promise<void> {
  const h = await fsp.open(p, "r");
  try {
    await h.sync();
  } finally {
    await h.close();
  }
}

async function writeFileSynced(p: string, chunks: Uint8Array[]): Promise<void> {
  const h = await fsp.open(p, "wx");
  try {
    for (const c of chunks) await h.write(c);
    await h.sync();
  } finally {
    await h.close();
  }
}

const exists = async (p: string): Promise<boolean> => fsp.lstat(p).then(() => true, () => false);

/** Write `spec` to `target`: the archive form when it ends in `.zip` (R-WTR-4), else a directory. */
export async function writeCheckpoint(spec: CheckpointSpec, target: string): Promise<void> {
  const trimmed = target.replace(/\/+$/, "");
  const parent = nodePath.dirname(trimmed);
  const name = nodePath.basename(trimmed);
  const archive = name.endsWith(".zip");
  const { files } = planCheckpoint(spec);
  // A save replaces only nothing or a checkpoint (never a foreign file or directory).
  if (await exists(trimmed)) await (await openPath(trimmed)).container.close();
  await fsp.mkdir(parent, { recursive: true });
  const staging = nodePath.join(parent, `.${name}.oc-staging-${process.pid}-${randomName()}`);
  try {
    if (archive) {
      await writeFileSynced(staging, zipArchive(files));
      const st = await fsp.stat(staging);
      await readBack(new ArchiveContainer(target, new NodeFile(staging, st.size)));
      await fsp.rename(staging, trimmed); // atomic replacement (R-PUB-9)
    } else {
      await fsp.mkdir(staging);
      const dirs = new Set<string>([staging]);
      for (const [rel, bytes] of files) { // manifest.json is last (R-PUB-2)
        const p = nodePath.join(staging, ...rel.split("/"));
        await fsp.mkdir(nodePath.dirname(p), { recursive: true });
        for (let d = nodePath.dirname(p); d.startsWith(staging); d = nodePath.dirname(d)) dirs.add(d);
        await writeFileSynced(p, [bytes]);
      }
      for (const d of [...dirs].sort().reverse()) await fsyncPath(d); // R-PUB-3
      await readBack(new DirectoryContainer(target, new NodeDirectory(staging)));
      await publishDirectory(staging, parent, name, trimmed);
    }
    await fsyncPath(parent); // R-PUB-7
  } catch (e) {
    await fsp.rm(staging, { recursive: true, force: true });
    throw e;
  }
}

/** The full validation of §15 over the staged checkpoint (R-WTR-1). */
async function readBack(c: Container): Promise<void> {
  try {
    await decodeCheckpoint(await openCheckpoint(c));
  } finally {
    await c.close();
  }
}

/** R-PUB-4 / R-PUB-6 (Node has no renameat2 RENAME_EXCHANGE binding, so R-PUB-5 does not apply). */
async function publishDirectory(staging: string, parent: string, name: string, target: string): Promise<void> {
  if (!(await exists(target))) {
    await fsp.rename(staging, target);
    return;
  }
  const prefix = `.${name}.oc-old-`;
  for (const n of await fsp.readdir(parent)) {
    if (n.startsWith(prefix)) await fsp.rm(nodePath.join(parent, n), { recursive: true, force: true });
  }
  const old = nodePath.join(parent, prefix + randomName());
  await fsp.rename(target, old);
  await fsp.rename(staging, target);
  await fsp.rm(old, { recursive: true, force: true });
}

/** `CMD write EXPECTED_JSON OUT_PATH` (spec §17.2). */
export async function writeFromRendering(expectedJson: string, outPath: string): Promise<void> {
  const text = readFileSync(expectedJson, "utf8");
  const doc = parseJsonText(text, { file: expectedJson, limits: false });
  const spec = specFromRendering(doc);
  spec.producer = J.obj([["name", J.str(IMPLEMENTATION)], ["version", J.str(VERSION)]]);
  await writeCheckpoint(spec, outPath);
}
