// The conformance protocol command (spec §17.2) as a process: output, exit status, error line.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";

const bin = fileURLToPath(new URL("../bin/conformance", import.meta.url));
const cases = fileURLToPath(new URL("../../../conformance/cases/v1", import.meta.url));
const work = mkdtempSync(join(tmpdir(), "oc-cli-"));
after(() => rmSync(work, { recursive: true, force: true }));
const run = (...args) => spawnSync(bin, args, { encoding: "utf8" });

test("capabilities: exactly the four members, both modes, only sharding skipped (R-RDR-9)", () => {
  const r = run("capabilities");
  assert.equal(r.status, 0);
  const caps = JSON.parse(r.stdout);
  assert.deepEqual(Object.keys(caps).sort(), ["implementation", "modes", "skip", "version"]);
  assert.deepEqual(caps.modes, ["read", "write"]);
  assert.deepEqual(Object.keys(caps.skip), ["sharding"]); // format version 2 is not implemented here
});

test("read failure: exit 1, first stderr line `error: <Class>: <message>`, nothing on stdout (R-RDR-7, R-RDR-12)", () => {
  const r = run("read", join(cases, "reject-data-corrupt", "checkpoint"));
  assert.equal(r.status, 1);
  assert.equal(r.stdout, "");
  assert.match(r.stderr.split("\n")[0], /^error: IntegrityError: \S.*\[R-ARR-14\]$/); // array checksums come before the file checksum (§15 step 16)
  assert.match(run("read", join(work, "absent")).stderr, /^error: NotACheckpoint: /);
});

test("read prints the rendering; write then read round-trips it (R-RDR-6, R-WTR-5)", () => {
  const dir = join(cases, "tree-all-node-types");
  const r = run("read", join(dir, "checkpoint"));
  assert.equal(r.status, 0, r.stderr);
  const expected = JSON.parse(readFileSync(join(dir, "expected.json"), "utf8"));
  const got = JSON.parse(r.stdout);
  assert.deepEqual(got.components.t.files, expected.components.t.files);
  const out = join(work, "rt.zip");
  assert.equal(run("write", join(dir, "expected.json"), out).status, 0);
  const back = JSON.parse(run("read", out).stdout);
  assert.equal(back.form, "archive");
  assert.deepEqual(JSON.stringify(back.components.t.content), JSON.stringify(got.components.t.content));
});

test("usage errors exit 2", () => {
  assert.equal(run("read").status, 2);
  assert.equal(run("frobnicate").status, 2);
});
