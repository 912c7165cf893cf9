/**
 * The checkpoint viewer: a static page that opens a checkpoint entirely in the
 * browser (nothing is uploaded). It runs the same reader as `CMD read`:
 * open (§15 steps 1–11), decode (12–15), content verification (16), and shows
 * what each phase found, the manifest, the components and their trees.
 */
import type { Container } from "../container.js";
import { DirectoryContainer } from "../directory.js";
import { CheckpointError } from "../errors.js";
import { type JsonValue, stringifyJson } from "../json.js";
import { type DecodedComponent, decodeComponents, type Opened, openCheckpoint, verifyContent } from "../reader.js";
import { floatText, toHex } from "../render.js";
import type { TreeNode } from "../tree.js";
import { decodeElements, summarize, type Summary } from "../values.js";
import { ArchiveContainer } from "../zip.js";
import { type Group, groupByPrefix, type Leaf, leaves, search, type Totals, totals, verificationBytes } from "./model.js";
import { BlobSource, Cancelled, FileListDirectory, fromDroppedDirectory, fromFolderInput, meter } from "./sources.js";

const MAX_CHILDREN = 200;

type Attrs = Record<string, string>;
function h(tag: string, attrs: Attrs = {}, ...children: (Node | string | null)[]): HTMLElement {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  for (const c of children) if (c !== null) el.append(c);
  return el;
}

const fmtBytes = (n: number): string =>
  n < 1024 ? `${n} B` : n < 1024 ** 2 ? `${(n / 1024).toFixed(1)} KiB` : n < 1024 ** 3 ? `${(n / 1024 ** 2).toFixed(1)} MiB` : `${(n / 1024 ** 3).toFixed(2)} GiB`;
const shapeText = (s: bigint[]): string => `[${s.join(", ")}]`;
const jsonText = (v: JsonValue): string => stringifyJson(v, 2);

function errorBox(e: unknown): HTMLElement {
  if (e instanceof CheckpointError) {
    return h("div", { class: "error", "data-testid": "validation-error" },
      h("strong", { "data-testid": "error-class" }, e.errorClass), " ",
      h("code", { "data-testid": "error-rule" }, e.rule), h("br"),
      h("span", {}, `file: ${e.file}`), h("br"), h("span", {}, `field: ${e.field}`), h("br"), h("span", {}, e.detail));
  }
  return h("div", { class: "error", "data-testid": "validation-error" }, h("strong", {}, "internal error"), " ", String(e));
}

function histogram(s: Summary): HTMLCanvasElement {
  const c = document.createElement("canvas");
  c.width = 400;
  c.height = 120;
  c.setAttribute("data-testid", "histogram");
  const g = c.getContext("2d");
  if (!g) return c;
  const max = Math.max(1, ...s.histogram);
  const w = c.width / s.histogram.length;
  g.fillStyle = "#f4f4f4";
  g.fillRect(0, 0, c.width, c.height);
  g.fillStyle = "#3f51b5";
  s.histogram.forEach((n, k) => {
    const bh = (n / max) * (c.height - 4);
    g.fillRect(k * w + 1, c.height - bh, Math.max(1, w - 2), bh);
  });
  return c;
}

/** Per-array statistics and a histogram, read one chunk at a time (the page never holds a whole array). */
async function fillSummary(out: HTMLElement, l: Leaf, container: Container, verified: Promise<boolean | null>): Promise<void> {
  const a = l.array!;
  try {
    const ok = await verified;
    meter.transient = true; // each chunk is decoded before the next read: one reused buffer
    let s: Summary;
    try {
      s = await summarize(a.dtype, Number(a.nbytes), (off, len) => container.read(l.dataFile, Number(a.offset) + off, len));
    } finally {
      meter.transient = false;
    }
    const fmt = (x: number): string => (Number.isFinite(x) ? x.toPrecision(6) : String(x));
    out.lastChild?.remove();
    out.append(
      h("table", { class: "stats", "data-testid": "array-stats" },
        h("tr", {}, h("th", {}, "elements"), h("td", {}, String(s.count)), h("th", {}, "min"), h("td", { "data-testid": "stat-min" }, fmt(s.min)), h("th", {}, "max"), h("td", { "data-testid": "stat-max" }, fmt(s.max))),
        h("tr", {}, h("th", {}, "mean"), h("td", { "data-testid": "stat-mean" }, fmt(s.mean)), h("th", {}, "NaN"), h("td", { "data-testid": "stat-nan" }, String(s.nan)), h("th", {}, "+Inf / -Inf"), h("td", {}, `${s.posInf} / ${s.negInf}`))),
      histogram(s),
      h("div", { class: "axis" }, h("span", {}, fmt(s.min)), h("span", {}, `${s.histogram.length} bins`), h("span", {}, fmt(s.max))),
      ok === true ? "" : h("p", { class: "warn" }, ok === null ? "Not verified: verification was cancelled." : "These bytes did not pass verification."),
    );
    if (a.dtype.startsWith("complex")) out.append(h("p", { class: "note" }, "Complex arrays: real and imaginary parts are counted as separate values."));
  } catch (e) {
    out.replaceChildren(errorBox(e));
  }
}

function summaryShell(l: Leaf): HTMLElement {
  const a = l.array!;
  return h("div", { class: "array-summary", "data-testid": "summary", "data-path": l.path, "data-component": l.component },
    h("h4", {}, `${l.component} `, h("code", {}, l.path), ` ${a.dtype} ${shapeText(a.shape)}`), "waiting…");
}

/** The arrays of the open checkpoint, the user's selection, and the one action on it. */
class Selection {
  readonly chosen = new Set<string>();
  private readonly byId = new Map<string, Leaf>();
  readonly button = h("button", { type: "button", "data-testid": "summarize-selected", disabled: "" }, "summarize selected (0)");
  readonly panel = h("div", { "data-testid": "summaries" });
  constructor(items: Leaf[], private readonly container: Container, private readonly verified: Promise<boolean | null>) {
    for (const l of items) this.byId.set(l.id, l);
    this.button.addEventListener("click", () => void this.summarize());
  }
  /** A checkbox for an array leaf, kept in step with every other checkbox of the same leaf. */
  box(l: Leaf): HTMLElement {
    const b = h("input", { type: "checkbox", "data-testid": "select-array", "data-id": l.id, title: "select for the summary" }) as HTMLInputElement;
    b.checked = this.chosen.has(l.id);
    b.addEventListener("change", () => this.toggle(l.id, b.checked));
    return b;
  }
  toggle(id: string, on: boolean): void {
    if (on) this.chosen.add(id);
    else this.chosen.delete(id);
    for (const b of Array.from(document.querySelectorAll<HTMLInputElement>("input[data-testid=select-array]"))) {
      if (b.dataset.id === id) b.checked = on;
    }
    this.button.textContent = `summarize selected (${this.chosen.size})`;
    this.button.toggleAttribute("disabled", this.chosen.size === 0);
  }
  /** One panel per selected array, computed one after the other (one chunk in memory at a time). */
  async summarize(): Promise<void> {
    this.button.setAttribute("disabled", "");
    this.panel.replaceChildren();
    const jobs = [...this.chosen].map((id) => [this.byId.get(id)!, summaryShell(this.byId.get(id)!)] as const);
    for (const [, shell] of jobs) this.panel.append(shell);
    for (const [leaf, shell] of jobs) await fillSummary(shell, leaf, this.container, this.verified);
    this.button.toggleAttribute("disabled", this.chosen.size === 0);
  }
}

function leafText(n: TreeNode): string {
  switch (n.type) {
    case "none": return "None";
    case "bool": return n.value ? "True" : "False";
    case "int": return n.value.toString();
    case "float": return floatText(n.bits);
    case "complex": return `(${floatText(n.realBits)}+${floatText(n.imagBits)}j)`;
    case "str": return JSON.stringify(n.value.length > 200 ? n.value.slice(0, 200) + "…" : n.value);
    case "bytes": return `bytes[${n.data.length}] ${toHex(n.data.subarray(0, 16))}${n.data.length > 16 ? "…" : ""}`;
    case "scalar": return `${n.dtype}(${n.dtype === "bool" ? String(n.raw[0] === 1) : String(decodeElements(n.dtype, n.raw)[0])})`;
    case "dtype": return `dtype ${n.dtype}`;
    default: return n.type;
  }
}

function leafRow(l: Leaf, sel: Selection, label: string): HTMLElement {
  const lab = h("span", { class: "key", title: l.path }, label);
  if (!l.array) return h("div", { class: "node leaf" }, lab, " ", h("span", { class: "type" }, l.node.type), " ", h("code", {}, leafText(l.node)));
  const a = l.array;
  return h("div", { class: "node leaf", "data-testid": "array", "data-path": l.path, "data-component": l.component },
    sel.box(l), " ", lab, " ", h("span", { class: "type" }, l.node.type === "prng_key" ? `PRNG key ${l.node.impl}, data` : "array"), " ",
    h("code", { "data-testid": "array-dtype" }, a.dtype), " ", h("code", { "data-testid": "array-shape" }, shapeText(a.shape)), " ",
    h("span", { class: "size" }, fmtBytes(Number(a.nbytes))));
}

/** Leaves grouped by layer prefix, a group per level (collapsed below the second), at most MAX_CHILDREN each. */
function groupEl(g: Group, sel: Selection, depth: number): HTMLElement {
  const body = h("div", {});
  const kids = [...g.children.values()];
  for (const c of kids.slice(0, MAX_CHILDREN)) body.append(groupEl(c, sel, depth + 1));
  for (const l of g.leaves.slice(0, MAX_CHILDREN)) body.append(leafRow(l, sel, l.groups.at(-1) ?? l.path));
  const hidden = Math.max(0, kids.length - MAX_CHILDREN) + Math.max(0, g.leaves.length - MAX_CHILDREN);
  if (hidden) body.append(h("div", { class: "more" }, `… ${hidden} more (search finds them)`));
  if (g.label === "") return h("div", { class: "tree" }, body);
  return h("div", { class: "node" }, h("details", depth < 2 ? { open: "" } : {},
    h("summary", { "data-testid": "group" }, h("span", { class: "key" }, g.label), ` (${g.arrays} arrays, ${fmtBytes(g.bytes)})`), body));
}

function totalsTable(t: Totals): HTMLElement {
  const table = h("table", { class: "totals", "data-testid": "totals" },
    h("tr", {}, h("th", {}, "dtype"), h("th", {}, "arrays"), h("th", {}, "elements"), h("th", {}, "bytes")));
  for (const d of t.byDtype) {
    table.append(h("tr", { "data-dtype": d.dtype }, h("td", {}, h("code", {}, d.dtype)), h("td", {}, String(d.arrays)),
      h("td", { "data-testid": "dtype-elements" }, d.elements.toLocaleString("en")), h("td", { "data-testid": "dtype-bytes" }, fmtBytes(Number(d.bytes)))));
  }
  table.append(h("tr", { class: "total" }, h("th", {}, "total"), h("th", {}, String(t.arrays - t.shared)),
    h("th", { "data-testid": "parameter-count" }, t.parameters.toLocaleString("en")), h("th", { "data-testid": "total-bytes" }, fmtBytes(Number(t.bytes)))));
  return h("div", {}, table, t.shared ? h("p", { class: "note", "data-testid": "shared-note" },
    `${t.shared} array name(s) share the storage of another and are counted once.`) : "");
}

/** Totals, search over every array path, and the selection's one action. */
function arraysSection(items: Leaf[], sel: Selection): HTMLElement {
  const input = h("input", { type: "search", "data-testid": "tree-search", placeholder: "search array paths, e.g. encoder.0 or weight" }) as HTMLInputElement;
  const results = h("div", { "data-testid": "search-results" });
  const arrays = items.filter((l) => l.array);
  input.addEventListener("input", () => {
    results.replaceChildren();
    if (!input.value.trim()) return;
    const found = search(arrays, input.value);
    results.append(h("p", { class: "note", "data-testid": "search-count" }, `${found.length} of ${arrays.length} arrays match`));
    for (const l of found.slice(0, MAX_CHILDREN)) results.append(leafRow(l, sel, `${l.component} ${l.path}`));
    if (found.length > MAX_CHILDREN) results.append(h("div", { class: "more" }, `… ${found.length - MAX_CHILDREN} more: narrow the search`));
  });
  return h("section", { "data-testid": "arrays" }, h("h3", {}, "Arrays"), totalsTable(totals(items)),
    h("p", {}, input, " ", sel.button), results, sel.panel);
}

function componentSection(d: DecodedComponent, items: Leaf[], sel: Selection): HTMLElement {
  const r = d.record;
  const sec = h("section", { class: "component", "data-component": r.name },
    h("h3", {}, r.name, " ", h("span", { class: "kind" }, `${r.kind} v${r.kindVersion}`)));
  const files = h("table", { class: "files" }, h("tr", {}, h("th", {}, "file"), h("th", {}, "size"), h("th", {}, "crc32c"), h("th", {}, "sha256")));
  for (const [k, e] of r.files) files.append(h("tr", {}, h("td", {}, `${r.path}/${k}`), h("td", {}, fmtBytes(e.size)), h("td", {}, h("code", {}, e.crc32c)), h("td", {}, e.sha256 ? h("code", {}, e.sha256.slice(0, 16) + "…") : "—")));
  sec.append(files);
  if (r.hints) sec.append(h("p", {}, "hints (informational, never executed): ", h("code", {}, stringifyJson(r.hints, 0))));
  if (r.metadata) sec.append(h("details", {}, h("summary", {}, "metadata"), h("pre", {}, jsonText(r.metadata))));
  const c = d.content;
  if (c.type === "tree") sec.append(groupEl(groupByPrefix(items), sel, 0));
  else if (c.type === "json") sec.append(h("pre", { class: "json" }, jsonText(c.value)));
  else sec.append(h("p", { class: "note" }, c.type === "files" ? "Opaque files (kind files); sizes and checksums verified." : `Kind ${r.kind} is not implemented here: shown as opaque files.`));
  return sec;
}

async function show(container: Container, name: string): Promise<void> {
  const out = document.getElementById("out")!;
  const status = h("div", { class: "status", "data-testid": "validation-status" }, "reading…");
  const phases = h("ul", { class: "phases" });
  out.replaceChildren(h("h2", {}, name, " ", h("span", { class: "form" }, container.form)), h("section", {}, h("h3", {}, "Validation"), status, phases));
  const phase = (text: string): void => void phases.append(h("li", {}, "✓ ", text));
  const fail = (e: unknown): void => {
    status.textContent = "invalid";
    status.className = "status bad";
    phases.after(errorBox(e));
  };
  let opened: Opened;
  try {
    opened = await openCheckpoint(container);
  } catch (e) {
    fail(e);
    return;
  }
  const m = opened.manifest;
  phase(`opened: manifest checksum, structure, paths, extensions, inventory of ${m.components.reduce((n, c) => n + c.files.length, 0)} files with their sizes (steps 1–11)`);
  const overview = h("table", { class: "overview" });
  const row = (k: string, v: Node | string): void => void overview.append(h("tr", {}, h("th", {}, k), h("td", {}, v)));
  row("format version", String(m.formatVersion));
  row("checkpoint id", m.checkpointId);
  row("created at", m.createdAt);
  row("producer", h("code", {}, stringifyJson(m.producer, 0)));
  const comps = h("table", { class: "components", "data-testid": "components" }, h("tr", {}, h("th", {}, "component"), h("th", {}, "kind"), h("th", {}, "path"), h("th", {}, "files"), h("th", {}, "size")));
  for (const c of m.components) {
    comps.append(h("tr", {}, h("td", { "data-testid": "component-name" }, c.name), h("td", { "data-testid": "component-kind" }, `${c.kind} v${c.kindVersion}`), h("td", {}, h("code", {}, c.path)), h("td", {}, String(c.files.length)), h("td", {}, fmtBytes(c.files.reduce((n, [, e]) => n + e.size, 0)))));
  }
  out.append(
    h("section", {}, h("h3", {}, "Manifest"), overview),
    h("section", {}, h("h3", {}, "Components"), comps),
    h("details", {}, h("summary", {}, "metadata and extensions"), h("pre", { "data-testid": "metadata" }, jsonText(m.metadata)), h("pre", {}, jsonText(m.extensions))),
  );
  let decoded: DecodedComponent[];
  try {
    decoded = await decodeComponents(opened);
  } catch (e) {
    fail(e);
    return;
  }
  phase("decoded: kind versions, payload checksums, every tree and value.json, array layout (steps 12–15)");
  let resolveVerified: (ok: boolean | null) => void = () => undefined;
  const verified = new Promise<boolean | null>((r) => (resolveVerified = r));
  const items = decoded.flatMap((d) => (d.content.type === "tree" ? leaves(d.record.name, d.content.tree.root, d.content.dataFile) : []));
  const sel = new Selection(items, opened.container, verified);
  out.append(arraysSection(items, sel));
  for (const d of decoded) out.append(componentSection(d, items.filter((l) => l.component === d.record.name), sel));
  resolveVerified(await verifyWithProgress(opened, decoded, status, phase, fail));
}

/** Bytes step 16 reads for these components (the percent of the progress bar). */
function expectedBytes(opened: Opened, decoded: DecodedComponent[]): number {
  const { container: c, manifest: m } = opened;
  const data = decoded.flatMap((d) => (d.content.type === "tree" ? [c.size(d.content.dataFile)] : []));
  const payloads = new Map([["tree", "tree.msgpack"], ["json", "value.json"]]);
  const files = m.components.flatMap((r) => r.files.map(([k, e]) => ({ size: e.size, payloadWithoutSha: payloads.get(r.kind) === k && e.sha256 === undefined })));
  const members = c.form === "archive" ? m.components.reduce((n, r) => n + r.files.reduce((k, [, e]) => k + e.size, 0), 0) + opened.manifestBytes.length : 0;
  return verificationBytes(data, files, members);
}

/**
 * Step 16 with a progress bar (percent of the bytes it reads) and a cancel button. Resolves true (valid),
 * false (a check failed) or null (cancelled: the structure stays on the page, the content is not verified).
 */
async function verifyWithProgress(opened: Opened, decoded: DecodedComponent[], status: HTMLElement,
  phase: (text: string) => void, fail: (e: unknown) => void): Promise<boolean | null> {
  const total = Math.max(1, expectedBytes(opened, decoded));
  const bar = h("progress", { max: "100", value: "0", "data-testid": "verify-progress" }) as HTMLProgressElement;
  const percent = h("span", { "data-testid": "verify-percent" }, "0%");
  const cancel = h("button", { type: "button", "data-testid": "verify-cancel" }, "cancel");
  const row = h("div", { class: "progress" }, bar, " ", percent, " ", cancel);
  status.after(row);
  const controller = new AbortController();
  cancel.addEventListener("click", () => controller.abort());
  const start = meter.bytes;
  const tick = (): number => {
    const p = Math.min(100, Math.floor((100 * (meter.bytes - start)) / total));
    bar.value = p;
    percent.textContent = `${p}%`;
    return p;
  };
  const timer = setInterval(tick, 100);
  meter.signal = controller.signal;
  meter.transient = true; // every read of step 16 is consumed before the next: one reused buffer
  status.textContent = `verifying every checksum (${fmtBytes(total)} to read, in 1 MiB pieces)…`;
  try {
    const rep = await verifyContent(opened, decoded);
    phase(`content: ${rep.arrays} array checksums, zero padding, ${rep.files} file checksums (${fmtBytes(rep.bytes)})${rep.zipMembers ? `, ${rep.zipMembers} ZIP CRC-32s` : ""} (step 16)`);
    status.textContent = "valid — every check of the spec passed, every checksum verified";
    status.className = "status good";
    bar.value = 100;
    percent.textContent = "100%";
    return true;
  } catch (e) {
    if (e instanceof Cancelled) {
      status.textContent = `verification cancelled at ${tick()}%: structure checked (steps 1–15), content not verified`;
      status.className = "status cancelled";
      return null;
    }
    fail(e);
    return false;
  } finally {
    clearInterval(timer);
    meter.signal = null;
    meter.transient = false;
    cancel.remove();
  }
}

async function openFiles(files: FileList | null): Promise<void> {
  const f = files?.[0];
  if (!f) return;
  await show(new ArchiveContainer(f.name, new BlobSource(f)), f.name);
}

function init(): void {
  const archive = document.getElementById("pick-archive") as HTMLInputElement;
  const folder = document.getElementById("pick-folder") as HTMLInputElement;
  archive.addEventListener("change", () => void openFiles(archive.files));
  folder.addEventListener("change", () => {
    const { root, entries } = fromFolderInput(folder.files!);
    void show(new DirectoryContainer(root, new FileListDirectory(entries)), root);
  });
  const drop = document.getElementById("drop")!;
  drop.addEventListener("dragover", (e) => {
    e.preventDefault();
    drop.classList.add("over");
  });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => {
    e.preventDefault();
    drop.classList.remove("over");
    const item = e.dataTransfer?.items?.[0];
    const entry = item?.webkitGetAsEntry?.();
    if (entry?.isDirectory) {
      void fromDroppedDirectory(entry as FileSystemDirectoryEntry).then((entries) => show(new DirectoryContainer(entry.name, new FileListDirectory(entries)), entry.name));
    } else {
      void openFiles(e.dataTransfer?.files ?? null);
    }
  });
}

init();
