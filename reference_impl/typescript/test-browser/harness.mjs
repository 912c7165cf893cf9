// What the viewer's browser tests share: the viewer page served on loopback, headless Chromium
// (Debian's `chromium`, driven by puppeteer-core), the renderer's resident memory read from /proc,
// and cancelling a verification from inside the page.
import { createReadStream, existsSync, readdirSync, readFileSync } from "node:fs";
import { createServer } from "node:http";
import { extname, join } from "node:path";
import puppeteer from "puppeteer-core";

const chromium = process.env.CHROMIUM ?? "/usr/bin/chromium";
const TYPES = { ".html": "text/html", ".js": "text/javascript" };

/** Serve the files of `app` (the built viewer) on 127.0.0.1; `{ server, url }` of its index page. */
export async function serveViewer(app) {
  const server = createServer((req, res) => {
    const name = new URL(req.url, "http://x").pathname.replace(/^\/+/, "") || "index.html";
    const file = join(app, name);
    if (!file.startsWith(app) || !existsSync(file)) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { "content-type": TYPES[extname(file)] ?? "application/octet-stream" });
    createReadStream(file).pipe(res);
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return { server, url: `http://127.0.0.1:${server.address().port}/index.html` };
}

/** Headless Chromium as the tests run it (`options` for puppeteer, e.g. a longer protocolTimeout). */
export function launchChromium(options = {}) {
  return puppeteer.launch({ executablePath: chromium, headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"], ...options });
}

/** Resident memory (VmRSS and its peak VmHWM, MiB) of the largest renderer process of browser `b`. */
export function rendererMemory(b) {
  const parent = new Map();
  for (const d of readdirSync("/proc").filter((x) => /^\d+$/.test(x))) {
    try {
      parent.set(Number(d), Number(/PPid:\s+(\d+)/.exec(readFileSync(`/proc/${d}/status`, "utf8"))[1]));
    } catch { /* exited meanwhile */ }
  }
  const root = b.process().pid;
  const under = (p) => { for (let q = p; q > 1; q = parent.get(q) ?? 0) if (q === root) return true; return false; };
  let best = { rss: 0, hwm: 0 };
  for (const p of parent.keys()) {
    if (p === root || !under(p)) continue;
    try {
      if (!readFileSync(`/proc/${p}/cmdline`, "utf8").includes("--type=renderer")) continue;
      const status = readFileSync(`/proc/${p}/status`, "utf8");
      const mib = (key) => Number(new RegExp(`${key}:\\s+(\\d+)`).exec(status)[1]) / 1024;
      if (mib("VmHWM") > best.hwm) best = { rss: mib("VmRSS"), hwm: mib("VmHWM") };
    } catch { /* exited meanwhile */ }
  }
  return best;
}

/** Arrange for the verification's cancel button to be clicked from inside the page, in the turn the first
 * percent above 0 shows; call it before the file is picked, then await what it returns. A click sent over the
 * DevTools protocol after that could arrive once a fast verification had already finished; so could the
 * watcher itself, were it installed after the pick (a loaded machine's round trip outlasted a whole
 * verification once): the page's own MutationObserver is in place before anything starts. */
export async function armCancelAtFirstPercent(page, timeout) {
  await page.evaluate(() => {
    window.__cancelled = false;
    const observer = new MutationObserver(() => {
      const percent = document.querySelector("[data-testid=verify-percent]");
      const cancel = document.querySelector("[data-testid=verify-cancel]");
      if (!percent || !cancel || !(parseInt(percent.textContent, 10) > 0)) return;
      cancel.click();
      window.__cancelled = true;
      observer.disconnect();
    });
    observer.observe(document.body, { subtree: true, childList: true, characterData: true });
  });
  return () => page.waitForFunction(() => window.__cancelled === true, { timeout });
}
