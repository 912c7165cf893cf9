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
import type { ArrayNode, TreeNode } from "../tree.js";
import { decodeElements, summarize, type Summary } from "../values.js";
import { ArchiveContainer } from "../zip.js";
import { BlobSource, FileListDirectory, fromDroppedDirectory, fromFolderInput } from "./sources.js";

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

function arrayPanel(a: ArrayNode, container: Container, dataFile: string, verified: Promise<boolean>): HTMLElement {
  const out = h("div", { class: "array-summary" });
  const btn = h("button", { type: "button", "data-testid": "summarize" }, "summary");
  btn.addEventListener("click", () => {
    btn.remove();
    out.append("computing…");
    void (async () => {
      const ok = await verified;
      const s = await summarize(a.dtype, Number(a.nbytes), (off, len) => container.read(dataFile, Number(a.offset) + off, len));
      out.textContent = "";
      const fmt = (x: number): string => (Number.isFinite(x) ? x.toPrecision(6) : String(x));
      out.append(
        h("table", { class: "stats", "data-testid": "array-stats" },
          h("tr", {}, h("th", {}, "elements"), h("td", {}, String(s.count)), h("th", {}, "min"), h("td", { "data-testid": "stat-min" }, fmt(s.min)), h("th", {}, "max"), h("td", { "data-testid": "stat-max" }, fmt(s.max))),
          h("tr", {}, h("th", {}, "mean"), h("td", { "data-testid": "stat-mean" }, fmt(s.mean)), h("th", {}, "NaN"), h("td", { "data-testid": "stat-nan" }, String(s.nan)), h("th", {}, "+Inf / -Inf"), h("td", {}, `${s.posInf} / ${s.negInf}`))),
        histogram(s),
        h("div", { class: "axis" }, h("span", {}, fmt(s.min)), h("span", {}, `${s.histogram.length} bins`), h("span", {}, fmt(s.max))),
        ok ? "" : h("p", { class: "warn" }, "These bytes did not pass verification."),
      );
      if (a.dtype.startsWith("complex")) out.append(h("p", { class: "note" }, "Complex arrays: real and imaginary parts are counted as separate values."));
    })().catch((e: unknown) => out.replaceChildren(errorBox(e)));
  });
  out.append(btn);
  return out;
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

function treeEl(label: string, n: TreeNode, ctx: { container: Container; dataFile: string; verified: Promise<boolean> }, depth: number): HTMLElement {
  const lab = h("span", { class: "key" }, label);
  const kids = (entries: [string, TreeNode][], kind: string): HTMLElement => {
    const d = h("details", depth < 2 ? { open: "" } : {}, h("summary", {}, lab, ` ${kind} (${entries.length})`));
    for (const [k, v] of entries.slice(0, MAX_CHILDREN)) d.append(treeEl(k, v, ctx, depth + 1));
    if (entries.length > MAX_CHILDREN) d.append(h("div", { class: "more" }, `… ${entries.length - MAX_CHILDREN} more`));
    return h("div", { class: "node" }, d);
  };
  switch (n.type) {
    case "list": case "tuple": return kids(n.items.map((v, k) => [String(k), v]), n.type);
    case "dict": return kids(n.items.map(([k, v]) => ["str" in k ? k.str : `${k.int} (int key)`, v]), "dict");
    case "named_tuple": return kids(n.fields, `named tuple ${n.typeName}`);
    case "array": case "prng_key": {
      const a = n.type === "array" ? n : n.data;
      return h("div", { class: "node leaf", "data-testid": "array", "data-path": label },
        lab, " ", h("span", { class: "type" }, n.type === "prng_key" ? `PRNG key ${n.impl}, data` : "array"), " ",
        h("code", { "data-testid": "array-dtype" }, a.dtype), " ", h("code", { "data-testid": "array-shape" }, shapeText(a.shape)), " ",
        h("span", { class: "size" }, fmtBytes(Number(a.nbytes))), arrayPanel(a, ctx.container, ctx.dataFile, ctx.verified));
    }
    default:
      return h("div", { class: "node leaf" }, lab, " ", h("span", { class: "type" }, n.type), " ", h("code", {}, leafText(n)));
  }
}

function componentSection(d: DecodedComponent, opened: Opened, verified: Promise<boolean>): HTMLElement {
  const r = d.record;
  const sec = h("section", { class: "component", "data-component": r.name },
    h("h3", {}, r.name, " ", h("span", { class: "kind" }, `${r.kind} v${r.kindVersion}`)));
  const files = h("table", { class: "files" }, h("tr", {}, h("th", {}, "file"), h("th", {}, "size"), h("th", {}, "crc32c"), h("th", {}, "sha256")));
  for (const [k, e] of r.files) files.append(h("tr", {}, h("td", {}, `${r.path}/${k}`), h("td", {}, fmtBytes(e.size)), h("td", {}, h("code", {}, e.crc32c)), h("td", {}, e.sha256 ? h("code", {}, e.sha256.slice(0, 16) + "…") : "—")));
  sec.append(files);
  if (r.hints) sec.append(h("p", {}, "hints (informational, never executed): ", h("code", {}, stringifyJson(r.hints, 0))));
  if (r.metadata) sec.append(h("details", {}, h("summary", {}, "metadata"), h("pre", {}, jsonText(r.metadata))));
  const c = d.content;
  if (c.type === "tree") sec.append(h("div", { class: "tree" }, treeEl("root", c.tree.root, { container: opened.container, dataFile: c.dataFile, verified }, 0)));
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
  let resolveVerified: (ok: boolean) => void = () => undefined;
  const verified = new Promise<boolean>((r) => (resolveVerified = r));
  for (const d of decoded) out.append(componentSection(d, opened, verified));
  const total = m.components.reduce((n, c) => n + c.files.reduce((k, [, e]) => k + e.size, 0), 0);
  status.textContent = `verifying every checksum (${fmtBytes(total)}, read in 1 MiB pieces)…`;
  try {
    const rep = await verifyContent(opened, decoded);
    phase(`content: ${rep.arrays} array checksums, zero padding, ${rep.files} file checksums (${fmtBytes(rep.bytes)})${rep.zipMembers ? `, ${rep.zipMembers} ZIP CRC-32s` : ""} (step 16)`);
    status.textContent = "valid — every check of the spec passed, every checksum verified";
    status.className = "status good";
    resolveVerified(true);
  } catch (e) {
    fail(e);
    resolveVerified(false);
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
