// The viewer on a big archive (1 GiB by default) in headless Chromium: too slow for `make test`, run by
// `make ts-browser-test-big` (OC_VIEWER_BIG_MIB=N for another size). It checks each viewer promise at
// that size (verification percent and cancel, layer groups and search, totals, one summary for a
// selection) and measures the renderer's memory against a 16 MiB archive of the same layout: peak
// resident memory of the renderer process (/proc VmHWM) and the peak of the JS heap in use (CDP
// Performance.getMetrics JSHeapUsedSize, sampled every 100 ms). The figures are printed (`# ...` lines)
// for docs/viewer.md.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { armCancelAtFirstPercent, launchChromium, rendererMemory as renderer, serveViewer } from "../harness.mjs";

const here = fileURLToPath(new URL(".", import.meta.url));
const repo = resolve(here, "../../../..");
const app = join(repo, "docs/viewer-app");
const python = process.env.OC_PYTHON ?? join(repo, ".venv/bin/python");
const BIG_MIB = Number(process.env.OC_VIEWER_BIG_MIB ?? 1024);
const LONG = 1_800_000; // a 1 GiB pass on a loaded machine

let server;
let url;
let work;
const expected = {};

before(async () => {
  assert.ok(existsSync(join(app, "viewer.js")), "viewer bundle missing: run `make ts-build`");
  work = mkdtempSync(join(tmpdir(), "oc-viewer-big-"));
  execFileSync(python, [join(here, "..", "make_checkpoints.py"), work, "--layered", "small:16", `big:${BIG_MIB}`],
    { stdio: "inherit" });
  for (const name of ["small", "big"]) expected[name] = JSON.parse(readFileSync(join(work, `${name}.json`), "utf8"));
  ({ server, url } = await serveViewer(app));
});

after(async () => {
  await new Promise((r) => (server ? server.close(r) : r()));
  if (work) rmSync(work, { recursive: true, force: true });
});

const launch = () => launchChromium({ protocolTimeout: LONG });

/** The JS heap in use (MiB) sampled every 100 ms while `work` runs: its peak. */
async function heapPeakDuring(page, work) {
  const cdp = await page.createCDPSession();
  await cdp.send("Performance.enable");
  const used = async () => (await cdp.send("Performance.getMetrics")).metrics.find((m) => m.name === "JSHeapUsedSize").value / 2 ** 20;
  let peak = await used();
  let done = false;
  const sampler = (async () => { while (!done) { peak = Math.max(peak, await used()); await new Promise((r) => setTimeout(r, 100)); } })();
  try {
    await work();
  } finally {
    done = true;
    await sampler;
  }
  return peak;
}

/** A new page with `file` picked; `beforePick(page)`, when given, runs between the page's load and the pick. */
async function open(b, file, beforePick = async () => undefined) {
  const page = await b.newPage();
  await page.setViewport({ width: 1100, height: 1400 });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url, { waitUntil: "load" });
  const armed = await beforePick(page);
  await (await page.$("#pick-archive")).uploadFile(file);
  return { page, errors, armed };
}

/** Verify an archive fully, then summarize its bias (a summary of a 256 MiB array takes a quarter of an hour
 * on a loaded machine: the first test does one, this one measures the verification pass); memory before
 * and after. */
async function measure(name) {
  const b = await launch();
  try {
    const page = await b.newPage();
    await page.goto(url, { waitUntil: "load" });
    const before = renderer(b);
    const started = Date.now();
    const heap = await heapPeakDuring(page, async () => {
      await (await page.$("#pick-archive")).uploadFile(join(work, `${name}.zip`));
      await page.waitForSelector("[data-testid=validation-status].good", { timeout: LONG });
    });
    const verified = renderer(b);
    const seconds = (Date.now() - started) / 1000;
    const summaryHeap = await heapPeakDuring(page, async () => {
      await page.$eval("section.component [data-testid=array][data-path=\"$['encoder.0.bias']\"] [data-testid=select-array]", (x) => x.click());
      await page.$eval("[data-testid=summarize-selected]", (x) => x.click());
      await page.waitForSelector("[data-testid=summaries] [data-testid=histogram]", { timeout: LONG });
    });
    return { before, verified, summarized: renderer(b), heap, summaryHeap, seconds };
  } finally {
    await b.close();
  }
}

test(`a ${BIG_MIB} MiB archive: percent and cancel, layer groups, search, totals, one summary action`, { timeout: LONG }, async () => {
  const b = await launch();
  try {
    const { page, errors, armed } = await open(b, join(work, "big.zip"), (p) => armCancelAtFirstPercent(p, LONG));
    // The structure is on the page before the content pass ends; the pass shows its percent and stops on cancel.
    await armed();
    await page.waitForSelector("[data-testid=validation-status].cancelled", { timeout: LONG });
    const status = await page.$eval("[data-testid=validation-status]", (e) => e.textContent);
    const at = Number(/cancelled at (\d+)%/.exec(status)[1]);
    assert.ok(at > 0 && at < 100, status);
    // Layer groups: encoder > 0, 1 and head, each with its arrays.
    const groups = await page.$$eval("section.component[data-component=policy] [data-testid=group] .key", (els) => els.map((e) => e.textContent));
    assert.deepEqual(groups, ["encoder", "0", "1", "head"]);
    // Totals: the parameter count and the bytes of each dtype, as Python counted them.
    const want = expected.big;
    assert.equal(await page.$eval("[data-testid=parameter-count]", (e) => e.textContent), want.parameters.toLocaleString("en"));
    const bytes = Object.fromEntries(await page.$$eval("[data-testid=totals] tr[data-dtype]", (rows) =>
      rows.map((r) => [r.dataset.dtype, r.querySelector("[data-testid=dtype-elements]").textContent])));
    const size = { float32: 4, float16: 2, bfloat16: 2 };
    assert.deepEqual(bytes, Object.fromEntries(Object.entries(want.bytes).map(([d, n]) => [d, (n / size[d]).toLocaleString("en")])));
    // Search finds one array among four; ticking it and one tree row gives one action for both.
    await page.type("[data-testid=tree-search]", "head");
    await page.waitForSelector("[data-testid=search-results] [data-testid=array]", { timeout: LONG });
    assert.equal(await page.$eval("[data-testid=search-count]", (e) => e.textContent), "1 of 4 arrays match");
    await page.$eval("[data-testid=search-results] [data-testid=select-array]", (x) => x.click());
    await page.$eval("section.component [data-testid=array][data-path=\"$['encoder.0.bias']\"] [data-testid=select-array]", (x) => x.click());
    assert.equal(await page.$$eval("[data-testid=summarize]", (els) => els.length), 0); // no button per row
    assert.equal(await page.$eval("[data-testid=summarize-selected]", (e) => e.textContent), "summarize selected (2)");
    await page.$eval("[data-testid=summarize-selected]", (x) => x.click());
    await page.waitForFunction(() => document.querySelectorAll("[data-testid=summaries] [data-testid=histogram]").length === 2, { timeout: LONG });
    const stat = (path, key) => page.$eval(`[data-testid=summary][data-path="${path}"] [data-testid=stat-${key}]`, (e) => e.textContent);
    assert.equal(Number(await stat("$['head.weight']", "min")), -1);
    assert.equal(Number(await stat("$['head.weight']", "max")), 1);
    assert.deepEqual(errors, []);
  } finally {
    await b.close();
  }
});

test(`renderer memory: ${BIG_MIB} MiB against 16 MiB, verified`, { timeout: LONG, skip: !existsSync("/proc/self/status") }, async () => {
  const small = await measure("small");
  const big = await measure("big");
  for (const [name, m] of [["16 MiB", small], [`${BIG_MIB} MiB`, big]]) {
    console.log(`# ${name} archive: verified in ${m.seconds.toFixed(0)} s; renderer RSS ${m.before.rss.toFixed(0)} MiB before, ` +
      `${m.verified.rss.toFixed(0)} MiB after verifying, ${m.summarized.rss.toFixed(0)} MiB after summarizing, peak ${m.summarized.hwm.toFixed(0)} MiB; ` +
      `JS heap in use at most ${m.heap.toFixed(1)} MiB verifying, ${m.summaryHeap.toFixed(1)} MiB summarizing`);
  }
  // Bounded by the chunk (1 MiB, one reused buffer), not the file: a file 64 times larger may cost collector
  // slack, never a share of the file.
  assert.ok(big.summarized.hwm - small.summarized.hwm < 64, `renderer peak ${small.summarized.hwm.toFixed(0)} vs ${big.summarized.hwm.toFixed(0)} MiB`);
  assert.ok(big.heap < small.heap + 32 && big.summaryHeap < small.summaryHeap + 32, "JS heap grows with the file");
});
