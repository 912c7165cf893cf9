/**
 * Strict I-JSON (spec §5.1) parser and a serializer, both exact about numbers.
 *
 * `JSON.parse` cannot be used: it accepts duplicate keys and lone surrogates,
 * rounds integers above 2^53 and forgets whether a number was written `1` or
 * `1.0`, all of which the format distinguishes (R-MAN-4, R-MAN-5, R-MAN-7, B.7).
 * Integers are kept as bigint, other numbers as the nearest binary64.
 */
import { LimitExceeded, ManifestError } from "./errors.js";

export type JsonValue =
  | { t: "null" }
  | { t: "bool"; v: boolean }
  | { t: "int"; v: bigint }
  | { t: "float"; v: number }
  | { t: "str"; v: string }
  | { t: "arr"; v: JsonValue[] }
  | { t: "obj"; v: [string, JsonValue][] };

export const MAX_JSON_DEPTH = 64; // R-LIM-3
export const MAX_JSON_INT = 2n ** 53n - 1n; // R-LIM-4

export interface ParseOptions {
  /** Enforce R-LIM-3 and R-LIM-4 (the manifest and value.json); off for renderings (B.1). */
  limits: boolean;
  /** Reject a duplicate member name (R-MAN-4). */
  file: string;
}

const fatalUtf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** Decode UTF-8 bytes strictly (R-MAN-1): no overlong forms, no encoded surrogates. */
export function decodeUtf8(bytes: Uint8Array, file: string, field = "bytes", rule = "R-MAN-1"): string {
  try {
    return fatalUtf8.decode(bytes);
  } catch {
    throw new ManifestError(file, field, "not valid UTF-8", rule);
  }
}

/** Parse a JSON document from its bytes: BOM (R-MAN-2), UTF-8 (R-MAN-1), then the text. */
export function parseJsonBytes(bytes: Uint8Array, opts: ParseOptions): JsonValue {
  if (bytes.length >= 3 && bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf) {
    throw new ManifestError(opts.file, "$", "begins with a UTF-8 byte order mark", "R-MAN-2");
  }
  return parseJsonText(decodeUtf8(bytes, opts.file), opts);
}

const NUMBER_RE = /-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/y;

/** Parse JSON text per RFC 8259 with the I-JSON rules of §5.1. */
export function parseJsonText(text: string, opts: ParseOptions): JsonValue {
  let i = 0;
  const path: string[] = [];
  const where = (): string => "/" + path.map((p) => p.replace(/~/g, "~0").replace(/\//g, "~1")).join("/");
  const fail = (msg: string, rule = "R-MAN-3"): never => {
    throw new ManifestError(opts.file, path.length ? where() : "$", `${msg} at character ${i}`, rule);
  };
  const ws = (): void => {
    for (;;) {
      const c = text.charCodeAt(i);
      if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) i++;
      else return;
    }
  };

  const parseString = (): string => {
    // Called with text[i] === '"'.
    i++;
    let out = "";
    let start = i;
    for (;;) {
      if (i >= text.length) fail("unterminated string");
      const c = text.charCodeAt(i);
      if (c === 0x22) {
        out += text.slice(start, i);
        i++;
        return out;
      }
      if (c < 0x20) fail("control character in string");
      if (c !== 0x5c) {
        i++;
        continue;
      }
      out += text.slice(start, i);
      const e = text[i + 1];
      i += 2;
      switch (e) {
        case '"': out += '"'; break;
        case "\\": out += "\\"; break;
        case "/": out += "/"; break;
        case "b": out += "\b"; break;
        case "f": out += "\f"; break;
        case "n": out += "\n"; break;
        case "r": out += "\r"; break;
        case "t": out += "\t"; break;
        case "u": {
          const hi = readHex4();
          if (hi >= 0xdc00 && hi <= 0xdfff) fail("unpaired low surrogate escape", "R-MAN-5");
          if (hi >= 0xd800 && hi <= 0xdbff) {
            if (text[i] !== "\\" || text[i + 1] !== "u") fail("unpaired high surrogate escape", "R-MAN-5");
            i += 2;
            const lo = readHex4();
            if (lo < 0xdc00 || lo > 0xdfff) fail("unpaired high surrogate escape", "R-MAN-5");
            out += String.fromCharCode(hi, lo);
          } else {
            out += String.fromCharCode(hi);
          }
          break;
        }
        default:
          i -= 1;
          fail("invalid escape");
      }
      start = i;
    }
  };
  const readHex4 = (): number => {
    const h = text.slice(i, i + 4);
    if (!/^[0-9a-fA-F]{4}$/.test(h)) fail("invalid \\u escape");
    i += 4;
    return parseInt(h, 16);
  };

  const parseNumber = (): JsonValue => {
    NUMBER_RE.lastIndex = i;
    const m = NUMBER_RE.exec(text);
    if (!m) return fail("invalid number");
    const tok = m[0];
    i += tok.length;
    if (m[1] === undefined && m[2] === undefined) {
      const v = BigInt(tok);
      const mag = v < 0n ? -v : v;
      // §5.1: an integer token is judged by R-LIM-4 first, also when it is beyond binary64 (R-MAN-6).
      if (opts.limits && mag > MAX_JSON_INT) {
        throw new LimitExceeded(opts.file, where(), `integer ${tok} exceeds 2^53-1`, "R-LIM-4");
      }
      if (!Number.isFinite(Number(tok))) fail(`number ${tok.slice(0, 20)}… is not a finite binary64`, "R-MAN-6");
      return { t: "int", v };
    }
    const f = Number(tok);
    if (!Number.isFinite(f)) fail(`number ${tok} is not a finite binary64`, "R-MAN-6");
    return { t: "float", v: f };
  };

  const parseValue = (depth: number): JsonValue => {
    ws();
    const c = text[i];
    if (c === "{" || c === "[") {
      if (opts.limits && depth > MAX_JSON_DEPTH) {
        throw new LimitExceeded(opts.file, where(), `JSON nesting depth exceeds ${MAX_JSON_DEPTH}`, "R-LIM-3");
      }
    }
    if (c === "{") {
      i++;
      const members: [string, JsonValue][] = [];
      const seen = new Set<string>();
      ws();
      if (text[i] === "}") {
        i++;
        return { t: "obj", v: members };
      }
      for (;;) {
        ws();
        if (text[i] !== '"') fail("expected a member name");
        const key = parseString();
        if (seen.has(key)) {
          path.push(key);
          fail(`duplicate member name ${JSON.stringify(key)}`, "R-MAN-4");
        }
        seen.add(key);
        ws();
        if (text[i] !== ":") fail("expected ':'");
        i++;
        path.push(key);
        members.push([key, parseValue(depth + 1)]);
        path.pop();
        ws();
        if (text[i] === ",") {
          i++;
          continue;
        }
        if (text[i] === "}") {
          i++;
          return { t: "obj", v: members };
        }
        fail("expected ',' or '}'");
      }
    }
    if (c === "[") {
      i++;
      const items: JsonValue[] = [];
      ws();
      if (text[i] === "]") {
        i++;
        return { t: "arr", v: items };
      }
      for (;;) {
        path.push(String(items.length));
        items.push(parseValue(depth + 1));
        path.pop();
        ws();
        if (text[i] === ",") {
          i++;
          continue;
        }
        if (text[i] === "]") {
          i++;
          return { t: "arr", v: items };
        }
        fail("expected ',' or ']'");
      }
    }
    if (c === '"') return { t: "str", v: parseString() };
    if (c === "-" || (c !== undefined && c >= "0" && c <= "9")) return parseNumber();
    if (text.startsWith("true", i)) {
      i += 4;
      return { t: "bool", v: true };
    }
    if (text.startsWith("false", i)) {
      i += 5;
      return { t: "bool", v: false };
    }
    if (text.startsWith("null", i)) {
      i += 4;
      return { t: "null" };
    }
    return fail(c === undefined ? "unexpected end of document" : `unexpected character ${JSON.stringify(c)}`);
  };

  const value = parseValue(1);
  ws();
  if (i !== text.length) fail("data after the JSON value");
  return value;
}

// ---------------------------------------------------------------------------
// Accessors used by the validators.

export const member = (o: JsonValue, name: string): JsonValue | undefined =>
  o.t === "obj" ? o.v.find(([k]) => k === name)?.[1] : undefined;

export const typeName = (v: JsonValue): string =>
  ({ null: "null", bool: "boolean", int: "integer", float: "number", str: "string", arr: "array", obj: "object" })[v.t];

// ---------------------------------------------------------------------------
// Serializer.

/**
 * Format a binary64 so that it reads back as a non-integer number token (B.7):
 * the shortest round-trip digits (ECMAScript Number::toString), with `.0`
 * added where that text would be an integer token, and `-0.0` for negative zero.
 */
export function formatFloat(f: number): string {
  if (!Number.isFinite(f)) throw new RangeError(`${f} has no JSON form`);
  if (Object.is(f, -0)) return "-0.0";
  const s = String(f);
  return /[.eE]/.test(s) ? s : s + ".0";
}

function quote(s: string): string {
  // Like Python's json.dumps(ensure_ascii=False): only '"', '\\' and controls are escaped.
  return JSON.stringify(s);
}

/** Serialize with `indent` spaces per level (Python json.dumps layout), or compact when 0. */
export function stringifyJson(v: JsonValue, indent = 2): string {
  const out: string[] = [];
  const nl = (level: number): string => (indent ? "\n" + " ".repeat(indent * level) : "");
  const walk = (x: JsonValue, level: number): void => {
    switch (x.t) {
      case "null": out.push("null"); return;
      case "bool": out.push(x.v ? "true" : "false"); return;
      case "int": out.push(x.v.toString()); return;
      case "float": out.push(formatFloat(x.v)); return;
      case "str": out.push(quote(x.v)); return;
      case "arr":
        if (!x.v.length) { out.push("[]"); return; }
        out.push("[");
        x.v.forEach((e, n) => {
          out.push((n ? (indent ? "," : ", ") : "") + nl(level + 1));
          walk(e, level + 1);
        });
        out.push(nl(level) + "]");
        return;
      case "obj":
        if (!x.v.length) { out.push("{}"); return; }
        out.push("{");
        x.v.forEach(([k, e], n) => {
          out.push((n ? (indent ? "," : ", ") : "") + nl(level + 1) + quote(k) + ": ");
          walk(e, level + 1);
        });
        out.push(nl(level) + "}");
        return;
    }
  };
  walk(v, 0);
  return out.join("");
}

// Small constructors for building documents in code.
export const J = {
  null: (): JsonValue => ({ t: "null" }),
  bool: (v: boolean): JsonValue => ({ t: "bool", v }),
  int: (v: bigint | number): JsonValue => ({ t: "int", v: BigInt(v) }),
  float: (v: number): JsonValue => ({ t: "float", v }),
  str: (v: string): JsonValue => ({ t: "str", v }),
  arr: (v: JsonValue[]): JsonValue => ({ t: "arr", v }),
  obj: (v: [string, JsonValue][]): JsonValue => ({ t: "obj", v }),
};
