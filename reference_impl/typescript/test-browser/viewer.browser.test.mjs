// The viewer in a real browser: headless Chromium (Debian's `chromium`) driven by puppeteer-core.
// It opens checkpoints written by the Python reference implementation and checks what the page shows.
// Run: node --test test-browser/*.test.mjs (needs `make ts-build`, chromium and the repository's .venv)
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { armCancelAtFirstPercent, launchChromium, rendererMemory, serveViewer } from "./harness.mjs";

const here = fileURLToPath(new URL(".", import.meta.url));
const repo = resolve(here, "../../..");
const app = join(repo, "docs/viewer-app");
const python = process.env.OC_PYTHON ?? join(repo, ".venv/bin/python");
const outDir = join(here, "out");
const TIMEOUT = 30_000;

let server;
let browser;
let url;
let work;

before(async () => {
  assert.ok(existsSync(join(app, "viewer.js")), "viewer bundle missing: run `make ts-build`");
  work = mkdtempSync(join(tmpdir(), "oc-viewer-"));
  execFileSync(python, [join(here, "make_checkpoints.py"), work], { stdio: "inherit" });
  ({ server, url } = await serveViewer(app));
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
  await new Promise((r) => (server ? server.close(r) : r()));
  if (work) rmSync(work, { recursive: true, force: true });
});

async function openArchive(file) {
  const page = await browser.newPage();
  await page.setViewport({ width: 1100, height: 1400 });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url, { waitUntil: "load" });
  const input = await page.$("#pick-archive");
  await input.uploadFile(file);
  await page.waitForSelector("[data-testid=validation-status].good, [data-testid=validation-status].bad", { timeout: TIMEOUT });
  return { page, errors };
}

test("a checkpoint from the Python reference: components, shapes, totals, one summary for a selection", async () => {
  const { page, errors } = await openArchive(join(work, "good.zip"));
  const status = await page.$eval("[data-testid=validation-status]", (e) => e.textContent);
  assert.match(status, /^valid/);
  assert.equal(await page.$eval("[data-testid=verify-percent]", (e) => e.textContent), "100%");
  const names = await page.$$eval("[data-testid=component-name]", (els) => els.map((e) => e.textContent));
  assert.deepEqual(names.sort(), ["config", "policy", "weights"]);
  const kinds = await page.$$eval("[data-testid=component-kind]", (els) => els.map((e) => e.textContent));
  assert.deepEqual(kinds.sort(), ["json v1", "tree v1", "tree v1"]);
  // Array rows of the component trees (not the search results): paths in the notation of every tool.
  const arrays = await page.$$eval("section.component[data-component=weights] [data-testid=array]", (els) =>
    els.map((e) => [e.dataset.path, e.querySelector("[data-testid=array-dtype]").textContent, e.querySelector("[data-testid=array-shape]").textContent]));
  assert.deepEqual(arrays.sort(), [["$.emb", "bfloat16", "[8, 8]"], ["$.h", "float16", "[4]"], ["$.w", "float32", "[2, 3]"]]);
  // Totals: every array once (the tied head.weight shares encoder.0.weight's storage), bytes by dtype.
  assert.equal(await page.$eval("[data-testid=parameter-count]", (e) => e.textContent), String(6 + 64 + 4 + 12 + 4 + 16));
  const bytes = await page.$$eval("[data-testid=totals] tr[data-dtype]", (rows) =>
    rows.map((r) => [r.dataset.dtype, r.querySelector("[data-testid=dtype-bytes]").textContent]));
  assert.deepEqual(bytes, [["float32", "152 B"], ["bfloat16", "128 B"], ["float16", "8 B"]]);
  assert.match(await page.$eval("[data-testid=shared-note]", (e) => e.textContent), /^1 array name/);
  // One action for the selection: tick two arrays (one in the tree, one found by search), summarize once.
  await page.$eval("section.component [data-testid=array][data-path='$.emb'] [data-testid=select-array]", (b) => b.click());
  await page.type("[data-testid=tree-search]", "weights $.h");
  await page.waitForSelector("[data-testid=search-results] [data-testid=array]", { timeout: TIMEOUT });
  assert.equal(await page.$eval("[data-testid=search-count]", (e) => e.textContent), "1 of 7 arrays match");
  await page.$eval("[data-testid=search-results] [data-testid=select-array]", (b) => b.click());
  assert.equal(await page.$$eval("[data-testid=summarize]", (els) => els.length), 0); // no button per row
  await page.$eval("[data-testid=summarize-selected]", (b) => b.click());
  await page.waitForFunction(() => document.querySelectorAll("[data-testid=summaries] [data-testid=histogram]").length === 2, { timeout: TIMEOUT });
  // Summaries: bfloat16 decoded by hand (linspace(-1, 1) has min -1, max 1), float16 with NaN and Inf.
  const stat = (path, key) => page.$eval(`[data-testid=summary][data-path='${path}'] [data-testid=stat-${key}]`, (e) => e.textContent);
  assert.equal(Number(await stat("$.emb", "min")), -1);
  assert.equal(Number(await stat("$.emb", "max")), 1);
  assert.equal(Number(await stat("$.h", "nan")), 1);
  assert.equal(Number(await stat("$.h", "max")), 1.5);
  assert.deepEqual(errors, []);
  mkdirSync(outDir, { recursive: true });
  await page.screenshot({ path: join(outDir, "viewer.png"), fullPage: true });
  await page.close();
});

test("a flat state dict is grouped by layer prefix", async () => {
  const { page, errors } = await openArchive(join(work, "good.zip"));
  const groups = await page.$$eval("section.component[data-component=policy] [data-testid=group] .key", (els) => els.map((e) => e.textContent));
  assert.deepEqual(groups, ["encoder", "0", "1", "head"]);
  const inFirst = await page.$$eval("section.component[data-component=policy] details", (ds) =>
    Array.from(ds[1].querySelectorAll("[data-testid=array]"), (e) => e.dataset.path));
  assert.deepEqual(inFirst, ["$['encoder.0.weight']", "$['encoder.0.bias']"]);
  assert.deepEqual(errors, []);
  await page.close();
});

test("verification shows its percent and can be cancelled; the structure stays", async () => {
  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url, { waitUntil: "load" });
  const cancelled = await armCancelAtFirstPercent(page, TIMEOUT);
  await (await page.$("#pick-archive")).uploadFile(join(work, "big.zip"));
  await cancelled();
  await page.waitForSelector("[data-testid=validation-status].cancelled", { timeout: TIMEOUT });
  const status = await page.$eval("[data-testid=validation-status]", (e) => e.textContent);
  const at = Number(/cancelled at (\d+)%/.exec(status)[1]);
  assert.ok(at > 0 && at < 100, status);
  assert.deepEqual(await page.$$eval("[data-testid=component-name]", (els) => els.map((e) => e.textContent)), ["model"]);
  assert.deepEqual(errors, []);
  await page.close();
});

test("a corrupted checkpoint shows the validation error with its class and rule", async () => {
  const { page, errors } = await openArchive(join(work, "corrupt.zip"));
  assert.equal(await page.$eval("[data-testid=validation-status]", (e) => e.textContent), "invalid");
  assert.equal(await page.$eval("[data-testid=error-class]", (e) => e.textContent), "IntegrityError");
  assert.equal(await page.$eval("[data-testid=error-rule]", (e) => e.textContent), "R-ARR-14");
  // The structure is still shown: the defect is in the array bytes, not in the manifest or the tree.
  const names = await page.$$eval("[data-testid=component-name]", (els) => els.map((e) => e.textContent));
  assert.deepEqual(names.sort(), ["config", "policy", "weights"]);
  assert.deepEqual(errors, []);
  await page.close();
});

/** Verify an archive and summarize its one array in a fresh browser; the renderer's peak memory. */
async function peakFor(file) {
  const b = await launchChromium({ protocolTimeout: 600_000 });
  try {
    const page = await b.newPage();
    await page.goto(url, { waitUntil: "load" });
    await (await page.$("#pick-archive")).uploadFile(file);
    await page.waitForSelector("[data-testid=validation-status].good", { timeout: 600_000 });
    await page.$eval("[data-testid=select-array]", (x) => x.click());
    await page.$eval("[data-testid=summarize-selected]", (x) => x.click());
    await page.waitForSelector("[data-testid=summaries] [data-testid=histogram]", { timeout: 600_000 });
    return rendererMemory(b).hwm;
  } finally {
    await b.close();
  }
}

test("renderer memory does not grow with the file: 16 MiB and 256 MiB archives, verified and summarized", { skip: !existsSync("/proc/self/status") }, async () => {
  const small = await peakFor(join(work, "small.zip"));
  const big = await peakFor(join(work, "big.zip"));
  // Each read is one chunk (1 MiB) into one reused buffer, decoded into one reused array: a file 240 MiB
  // larger may cost the renderer some collector slack, never the file (it grew by 116 MiB before).
  assert.ok(big - small < 64, `renderer peak ${small.toFixed(0)} MiB for 16 MiB, ${big.toFixed(0)} MiB for 256 MiB`);
  console.log(`# renderer peak RSS: ${small.toFixed(0)} MiB (16 MiB archive), ${big.toFixed(0)} MiB (256 MiB archive)`);
});
