/**
 * What the viewer shows of a decoded tree, computed apart from the page: every leaf with its tree path
 * (the notation of every OpenCheckpoint tool, `$.encoder['0.weight']`), the leaves grouped by layer
 * prefix (state-dict keys split at their dots), search, and totals by dtype.
 */
import { ITEMSIZE } from "../dtypes.js";
import { type ArrayNode, seg, type TreeNode } from "../tree.js";

/** One leaf of a component's tree. */
export interface Leaf {
  /** Unique across the checkpoint: component name and tree path. */
  id: string;
  component: string;
  /** `$`-rooted tree path. */
  path: string;
  /** Segments the leaf is grouped by: dict keys split at `.`, indices as text. */
  groups: string[];
  node: TreeNode;
  /** The array of an array or PRNG key leaf. */
  array?: ArrayNode;
  dataFile: string;
}

/** Every leaf of a tree in document order (containers are walked, not listed). */
export function leaves(component: string, root: TreeNode, dataFile: string): Leaf[] {
  const out: Leaf[] = [];
  const walk = (n: TreeNode, path: string, groups: string[]): void => {
    switch (n.type) {
      case "dict":
        for (const [k, v] of n.items) {
          const key = "str" in k ? k.str : k.int;
          walk(v, path + seg(key), [...groups, ...("str" in k ? k.str.split(".") : [k.int.toString()])]);
        }
        return;
      case "list": case "tuple":
        n.items.forEach((v, i) => walk(v, `${path}[${i}]`, [...groups, String(i)]));
        return;
      case "named_tuple":
        for (const [k, v] of n.fields) walk(v, path + seg(k), [...groups, k]);
        return;
      default: {
        const array = n.type === "array" ? n : n.type === "prng_key" ? n.data : undefined;
        out.push({ id: `${component}/${path}`, component, path, groups, node: n, dataFile, ...(array ? { array } : {}) });
      }
    }
  };
  walk(root, "$", []);
  return out;
}

/** A node of the layer tree: leaves whose group segments start with `prefix`. */
export interface Group {
  label: string;
  children: Map<string, Group>;
  leaves: Leaf[];
  arrays: number;
  bytes: number;
}

const newGroup = (label: string): Group => ({ label, children: new Map(), leaves: [], arrays: 0, bytes: 0 });

/**
 * Leaves grouped by layer prefix: `encoder.layers.0.weight` under `encoder` > `layers` > `0`; a chain of
 * groups with one child each is shown as one (`encoder.layers`). Counts and bytes are per group.
 */
export function groupByPrefix(items: Leaf[]): Group {
  const root = newGroup("");
  for (const leaf of items) {
    let g = root;
    const bytes = leaf.array ? Number(leaf.array.nbytes) : 0;
    const add = (x: Group): void => {
      x.arrays += leaf.array ? 1 : 0;
      x.bytes += bytes;
    };
    add(g);
    for (const s of leaf.groups.slice(0, -1)) {
      let next = g.children.get(s);
      if (!next) g.children.set(s, (next = newGroup(s)));
      g = next;
      add(g);
    }
    g.leaves.push(leaf);
  }
  const squash = (g: Group): Group => {
    for (const [k, c] of g.children) g.children.set(k, squash(c));
    if (g.leaves.length === 0 && g.children.size === 1 && g.label !== "") {
      const only = [...g.children.values()][0]!;
      return { ...only, label: `${g.label}.${only.label}` };
    }
    return g;
  };
  return squash(root);
}

/** The leaves whose path contains `query` (case-insensitive); all of them for an empty query. */
export function search(items: Leaf[], query: string): Leaf[] {
  const q = query.trim().toLowerCase();
  return q ? items.filter((l) => `${l.component} ${l.path}`.toLowerCase().includes(q)) : items;
}

export interface DtypeTotal {
  dtype: string;
  arrays: number;
  elements: bigint;
  bytes: bigint;
}

export interface Totals {
  byDtype: DtypeTotal[];
  arrays: number;
  /** Elements of every array, a tied array (one extent, several names) counted once. */
  parameters: bigint;
  bytes: bigint;
  /** Array names that share an earlier name's extent. */
  shared: number;
}

/** Parameter count and bytes by dtype of the array leaves, each extent counted once. */
export function totals(items: Leaf[]): Totals {
  const by = new Map<string, DtypeTotal>();
  const seen = new Set<string>();
  const out: Totals = { byDtype: [], arrays: 0, parameters: 0n, bytes: 0n, shared: 0 };
  for (const l of items) {
    const a = l.array;
    if (!a) continue;
    out.arrays++;
    const key = `${l.dataFile}:${a.offset}:${a.nbytes}`;
    if (a.nbytes > 0n && seen.has(key)) {
      out.shared++;
      continue;
    }
    seen.add(key);
    const elements = a.shape.reduce((x, y) => x * y, 1n);
    const t = by.get(a.dtype) ?? { dtype: a.dtype, arrays: 0, elements: 0n, bytes: 0n };
    t.arrays++;
    t.elements += elements;
    t.bytes += a.nbytes;
    by.set(a.dtype, t);
    out.parameters += elements;
    out.bytes += a.nbytes;
  }
  out.byDtype = [...by.values()].sort((x, y) => (y.bytes > x.bytes ? 1 : y.bytes < x.bytes ? -1 : 0));
  return out;
}

/** The bytes step 16 reads: each tree's data file (extents and padding), every file digested, ZIP members. */
export function verificationBytes(
  dataFileSizes: number[], files: { size: number; payloadWithoutSha: boolean }[], archiveMembers: number,
): number {
  const sum = (xs: number[]): number => xs.reduce((x, y) => x + y, 0);
  return sum(dataFileSizes) + sum(files.filter((f) => !f.payloadWithoutSha).map((f) => f.size)) + archiveMembers;
}

/** Bytes per element of a dtype name (for element counts of arrays the page shows). */
export const itemsize = (dtype: string): number => ITEMSIZE.get(dtype) ?? 1;
