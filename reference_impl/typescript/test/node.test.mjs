// Node hosts: reading checkpoints on disk, publishing new ones. Run: node --test test/*.test.mjs
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { decodeCheckpoint, J, render, stringifyJson } from "../dist/index.js";
import { openPath } from "../dist/node/fs.js";
import { writeCheckpoint } from "../dist/node/write.js";
import { VERSION } from "../dist/version.js";

const repo = fileURLToPath(new URL("../../..", import.meta.url));
const work = mkdtempSync(join(tmpdir(), "oc-ts-"));
after(() => rmSync(work, { recursive: true, force: true }));

const readAll = async (p) => {
  const o = await openPath(p);
  return { o, comps: await decodeCheckpoint(o) };
};
const idOf = async (p) => {
  const o = await openPath(p);
  await o.container.close();
  return o.manifest.checkpointId;
};

const spec = (id) => ({
  checkpointId: id,
  createdAt: "2026-01-01T00:00:00Z",
  producer: J.obj([["name", J.str("unit-test")], ["version", J.str("1")]]),
  metadata: J.obj([["step", J.int(7)], ["lr", J.float(1)]]),
  components: [
    {
      name: "model",
      kind: "tree",
      kindVersion: 1n,
      content: {
        type: "tree",
        root: {
          type: "dict",
          items: [
            [{ str: "w" }, { type: "array", dtype: "float32", shape: [2n], data: new Uint8Array([0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0]) }],
            [{ str: "10" }, { type: "int", value: 2n ** 70n }],
            [{ str: "a" }, { type: "tuple", items: [{ type: "str", value: "😀" }] }],
          ],
        },
      },
    },
    { name: "config", kind: "json", kindVersion: 1n, content: { type: "json", value: J.obj([["lr", J.float(0.001)]]) } },
    { name: "blob", kind: "com.example/thing", kindVersion: 3n, content: { type: "files", files: [["x/y.bin", new Uint8Array([1, 2, 3])]] } },
  ],
});

test("package version and the protocol's version agree", () => {
  assert.equal(JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")).version, VERSION);
});

test("the spec's worked example (Appendix A) reads as the appendix says", async () => {
  const { o, comps } = await readAll(join(repo, "spec/examples/worked-example"));
  await o.container.close();
  assert.equal(o.manifest.checkpointId, "example-0001");
  const model = comps.find((c) => c.record.name === "model").content.tree;
  assert.deepEqual(model.root.items.map(([k, v]) => [k.str, v.type]), [["w", "array"], ["step", "int"], ["betas", "tuple"]]);
  const w = model.arrays[0];
  assert.deepEqual([w.dtype, w.shape, w.offset, w.nbytes, w.crc32c], ["float32", [2n], 0n, 8n, 0xaa36f2c9n]);
  assert.deepEqual(model.root.items[2][1].items.map((f) => f.bits), ["3feccccccccccccd", "3feff7ced916872b"]);
});

for (const name of ["dir-form", "archive.zip"]) {
  test(`write then read back: ${name}`, async () => {
    const target = join(work, name);
    await writeCheckpoint(spec("t-" + name.replace(".", "-")), target);
    const { o, comps } = await readAll(target);
    assert.equal(o.container.form, name.endsWith(".zip") ? "archive" : "directory");
    const doc = JSON.parse(stringifyJson(await render(o, comps)));
    await o.container.close();
    const root = doc.components.model.content.root;
    assert.deepEqual(root.items.map(([k]) => k.str), ["w", "10", "a"]); // stored order, "10" not moved first
    assert.equal(root.items[1][1].value, (2n ** 70n).toString());
    assert.equal(root.items[0][1].hex, "0000803f000000c0");
    assert.equal(doc.components.blob.content.type, "opaque");
    assert.equal(doc.components.blob.content.files["x/y.bin"].hex, "010203");
    assert.match(readFileSync(name.endsWith(".zip") ? target : join(target, "components/config/value.json"), "latin1"), /0\.001/);
    assert.deepEqual(readdirSync(work).filter((n) => n.includes(".oc-")), []); // no staging debris
  });
}

test("replacing a checkpoint publishes the new one and leaves nothing behind", async () => {
  const target = join(work, "replace");
  await writeCheckpoint(spec("first"), target);
  await writeCheckpoint(spec("second"), target);
  assert.equal(await idOf(target), "second");
  assert.deepEqual(readdirSync(work).filter((n) => n.startsWith(".replace")), []);
});

test("a save never replaces something that is not a checkpoint", async () => {
  const target = join(work, "foreign");
  mkdirSync(target);
  writeFileSync(join(target, "notes.txt"), "mine");
  await assert.rejects(writeCheckpoint(spec("x"), target), (e) => e.errorClass === "NotACheckpoint");
  assert.equal(readFileSync(join(target, "notes.txt"), "utf8"), "mine");
});

test("a writer input that breaks a rule is refused before anything is published", async () => {
  const bad = spec("bad");
  bad.components[0].content.root.items[0][1].shape = [3n]; // 8 bytes cannot be 3 float32
  const target = join(work, "never");
  await assert.rejects(writeCheckpoint(bad, target), (e) => e.errorClass === "CheckpointError");
  assert.deepEqual(readdirSync(work).filter((n) => n.includes("never")), []);
});

test("locate: staging names are never checkpoints; one .oc-old-* entry is read in place of a missing target", async () => {
  const staging = join(work, ".x.oc-staging-1-abcdefgh");
  await writeCheckpoint(spec("s"), staging);
  await assert.rejects(openPath(staging), (e) => e.errorClass === "NotACheckpoint" && e.rule === "R-PUB-12");
  const parent = join(work, "fallback");
  mkdirSync(parent);
  await writeCheckpoint(spec("old"), join(parent, ".ck.oc-old-abc"));
  assert.equal(await idOf(join(parent, "ck")), "old");
  await writeCheckpoint(spec("old2"), join(parent, ".ck.oc-old-def"));
  await assert.rejects(openPath(join(parent, "ck")), (e) => e.errorClass === "NotACheckpoint" && e.rule === "R-PUB-14");
  await assert.rejects(openPath(join(work, "missing")), (e) => e.errorClass === "NotACheckpoint" && e.rule === "R-PUB-10");
});
