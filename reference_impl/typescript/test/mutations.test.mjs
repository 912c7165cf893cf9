// Hostile input: mutated archives and trees from the conformance cases only ever fail with a
// CheckpointError subclass (never a RangeError, a TypeError or a hang). Seeded, bounded in count.
import assert from "node:assert/strict";
import { readdirSync, readFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { ArchiveContainer, CheckpointError, decodeCheckpoint, DirectoryContainer, openCheckpoint } from "../dist/index.js";
import { checkDeclaredLimits, decodeTree } from "../dist/tree.js";

const cases = fileURLToPath(new URL("../../../conformance/cases/v1", import.meta.url));

function rng(seed) {
  let s = seed >>> 0;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
}

function mutate(buf, rand) {
  const b = Uint8Array.from(buf);
  const n = 1 + Math.floor(rand() * 3);
  for (let k = 0; k < n; k++) {
    const at = Math.floor(rand() * b.length);
    const r = rand();
    if (r < 0.5) b[at] ^= 1 << Math.floor(rand() * 8);
    else if (r < 0.8) b[at] = [0x00, 0xff, 0x7f, 0x80, 0xc1, 0xdd, 0xdf, 0xc7][Math.floor(rand() * 8)];
    else return b.subarray(0, at); // truncation
  }
  return b;
}

const memory = (bytes) => ({ size: bytes.length, read: async (o, l) => bytes.subarray(o, o + l) });

test("mutated archives fail only with CheckpointError", async () => {
  const zips = ["archive-tree", "archive-mixed", "archive-zip64-end-records", "archive-empty-files"]
    .map((c) => join(cases, c, "checkpoint.zip")).filter(existsSync);
  assert.ok(zips.length >= 3);
  const rand = rng(14);
  let rejected = 0;
  for (let i = 0; i < 400; i++) {
    const bytes = mutate(readFileSync(zips[i % zips.length]), rand);
    try {
      await decodeCheckpoint(await openCheckpoint(new ArchiveContainer("m.zip", memory(bytes))));
    } catch (e) {
      assert.ok(e instanceof CheckpointError, `mutation ${i}: ${e?.stack ?? e}`);
      rejected++;
    }
  }
  assert.ok(rejected > 300, `only ${rejected} of 400 mutations rejected`);
});

test("mutated tree.msgpack documents fail only with CheckpointError", () => {
  const trees = readdirSync(cases)
    .map((c) => join(cases, c, "checkpoint/components/t/tree.msgpack"))
    .filter(existsSync)
    .map((p) => readFileSync(p));
  assert.ok(trees.length > 20);
  const rand = rng(8);
  for (let i = 0; i < 3000; i++) {
    const bytes = mutate(trees[i % trees.length], rand);
    try {
      checkDeclaredLimits(bytes, "t");
      decodeTree(bytes, "t");
    } catch (e) {
      assert.ok(e instanceof CheckpointError, `mutation ${i}: ${e?.stack ?? e}`);
    }
  }
});

/** A directory checkpoint held in memory: relative path -> bytes. */
function memoryDirectory(files) {
  const entries = () => {
    const dirs = new Set();
    for (const p of files.keys()) p.split("/").slice(0, -1).forEach((_, k, segs) => dirs.add(segs.slice(0, k + 1).join("/")));
    return [...[...files].map(([path, b]) => ({ path, type: "file", size: b.length })), ...[...dirs].map((path) => ({ path, type: "dir", size: 0 }))];
  };
  return {
    stat: async (p) => entries().find((e) => e.path === p) ?? null,
    walk: async () => entries(),
    read: async (p, o, l) => files.get(p).subarray(o, o + l),
  };
}

function loadDirectory(root) {
  const files = new Map();
  const visit = (rel) => {
    for (const d of readdirSync(join(root, rel), { withFileTypes: true })) {
      const p = rel ? `${rel}/${d.name}` : d.name;
      if (d.isDirectory()) visit(p);
      else if (d.isFile()) files.set(p, readFileSync(join(root, p)));
    }
  };
  visit("");
  return files;
}

test("mutated directory checkpoints (manifest, trees, value.json) fail only with CheckpointError", async () => {
  const names = ["multi-component", "json-object", "tree-all-node-types", "component-hints-metadata", "prng-keys", "file-sha256"];
  const dirs = names.map((c) => join(cases, c, "checkpoint")).filter(existsSync).map(loadDirectory);
  assert.ok(dirs.length >= 4);
  const rand = rng(21);
  for (let i = 0; i < 600; i++) {
    const files = new Map(dirs[i % dirs.length]);
    const keys = [...files.keys()];
    const victim = keys[Math.floor(rand() * keys.length)];
    files.set(victim, mutate(files.get(victim), rand));
    try {
      await decodeCheckpoint(await openCheckpoint(new DirectoryContainer("m", memoryDirectory(files))));
    } catch (e) {
      assert.ok(e instanceof CheckpointError, `mutation ${i} of ${victim}: ${e?.stack ?? e}`);
    }
  }
});
