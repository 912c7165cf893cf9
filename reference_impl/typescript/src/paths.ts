/** Path grammar and conflicts (spec §4, R-PATH-*, R-LIM-7, R-LIM-8). */
import { LimitExceeded, UnsafePath } from "./errors.js";

export const SEGMENT_RE = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/;
export const MAX_PATH_BYTES = 1024; // R-LIM-7
export const MAX_SEGMENT_BYTES = 128; // R-LIM-8

const utf8 = new TextEncoder();
export const byteLength = (s: string): number => utf8.encode(s).length;

/** ASCII case folding (§2.4): A-Z to a-z, nothing else. */
export const foldCase = (s: string): string => s.replace(/[A-Z]/g, (c) => c.toLowerCase());

/** R-LIM-7 and R-LIM-8 on a manifest string, counted in UTF-8 bytes. */
export function checkPathLimits(path: string, file: string, field: string): void {
  if (byteLength(path) > MAX_PATH_BYTES) {
    throw new LimitExceeded(file, field, `path is longer than ${MAX_PATH_BYTES} bytes`, "R-LIM-7");
  }
  for (const seg of path.split("/")) {
    if (byteLength(seg) > MAX_SEGMENT_BYTES) {
      throw new LimitExceeded(file, field, `path segment is longer than ${MAX_SEGMENT_BYTES} bytes`, "R-LIM-8");
    }
  }
}

/** True when every segment of `path` matches the segment grammar. */
export const isValidPath = (path: string): boolean => path.split("/").every((s) => SEGMENT_RE.test(s));

export function checkPathGrammar(path: string, file: string, field: string, rule: string): void {
  if (!isValidPath(path)) {
    throw new UnsafePath(file, field, `${JSON.stringify(path)} is not a valid path (§4 segment grammar)`, rule);
  }
}

/** Every proper directory prefix of a path: "a/b/c" gives "a" and "a/b". */
export function dirPrefixes(path: string): string[] {
  const segs = path.split("/");
  const out: string[] = [];
  for (let n = 1; n < segs.length; n++) out.push(segs.slice(0, n).join("/"));
  return out;
}
