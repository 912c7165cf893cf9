// The browser hosts (Blob.slice reads, a folder's File objects) give the same results as the Node
// hosts. Node ≥ 20 has Blob and File, so this runs without a browser.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { ArchiveContainer, decodeCheckpoint, DirectoryContainer, openCheckpoint, render, stringifyJson } from "../dist/index.js";
import { openPath } from "../dist/node/fs.js";
import { BlobSource, FileListDirectory, fromFolderInput } from "../dist/viewer/sources.js";

const cases = fileURLToPath(new URL("../../../conformance/cases/v1", import.meta.url));
const rendering = async (opened) => {
  const text = stringifyJson(await render(opened, await decodeCheckpoint(opened)));
  await opened.container.close();
  return text;
};

/** What an <input webkitdirectory> gives for the folder `root`: Files with webkitRelativePath. */
function folderFiles(root, name) {
  const out = [];
  const visit = (rel) => {
    for (const d of readdirSync(join(root, rel), { withFileTypes: true })) {
      const p = rel ? `${rel}/${d.name}` : d.name;
      if (d.isDirectory()) visit(p);
      else {
        const f = new File([readFileSync(join(root, p))], d.name);
        Object.defineProperty(f, "webkitRelativePath", { value: `${name}/${p}` });
        out.push(f);
      }
    }
  };
  visit("");
  return out;
}

test("a folder picked in the browser reads like the directory on disk", async () => {
  const dir = join(cases, "tree-all-node-types", "checkpoint");
  const { root, entries } = fromFolderInput(folderFiles(dir, "checkpoint"));
  assert.equal(root, "checkpoint");
  assert.ok(entries.some(([p]) => p === "manifest.json"));
  const viaFiles = await rendering(await openCheckpoint(new DirectoryContainer(root, new FileListDirectory(entries))));
  assert.equal(viaFiles, await rendering(await openPath(dir)));
});

test("an unlisted file in a picked folder is an ExtraFile, as on disk", async () => {
  const dir = join(cases, "json-object", "checkpoint");
  const files = folderFiles(dir, "ck");
  const extra = new File(["x"], ".DS_Store");
  Object.defineProperty(extra, "webkitRelativePath", { value: "ck/.DS_Store" });
  const { root, entries } = fromFolderInput([...files, extra]);
  await assert.rejects(openCheckpoint(new DirectoryContainer(root, new FileListDirectory(entries))), (e) => e.errorClass === "ExtraFile");
});

test("an archive read with Blob.slice reads like the file on disk, range by range", async () => {
  const file = join(cases, "archive-mixed", "checkpoint.zip");
  const blob = new Blob([readFileSync(file)]);
  const requested = [];
  const src = new BlobSource(blob);
  const read = src.read.bind(src);
  src.read = (o, l) => (requested.push(l), read(o, l));
  const viaBlob = await rendering(await openCheckpoint(new ArchiveContainer("a.zip", src)));
  assert.equal(viaBlob, await rendering(await openPath(file)));
  assert.ok(Math.max(...requested) < blob.size, "no single read covers the whole archive");
});
