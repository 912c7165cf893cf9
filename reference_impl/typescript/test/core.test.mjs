// Unit tests of the format core: checksums, strict JSON, tree decoding, values. Run: node --test test/*.test.mjs
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  crc32, crc32c, newCrc32c, parseJsonBytes, parseJsonText, stringifyJson, formatFloat,
  decodeFloat16, decodeBfloat16, decodeFloat8, decodeElements, summarize, encodeTree, sealManifest, J,
} from "../dist/index.js";
import { checkDeclaredLimits, decodeTree, float32ToFloat64Bits } from "../dist/tree.js";
import { checkManifestChecksum } from "../dist/manifest.js";

const enc = new TextEncoder();
const bytes = (...xs) => new Uint8Array(xs);
const rejects = (fn, cls, rule) => assert.throws(fn, (e) => e.errorClass === cls && e.rule === rule);

test("crc32c and crc32 check values, incremental in odd chunks", () => {
  assert.equal(crc32c(enc.encode("123456789")), 0xe3069283);
  assert.equal(crc32(enc.encode("123456789")), 0xcbf43926);
  assert.equal(crc32c(new Uint8Array(0)), 0);
  const data = Uint8Array.from({ length: 1000 }, (_, i) => (i * 31) & 0xff);
  const h = newCrc32c();
  for (let i = 0; i < data.length; i += 13) h.update(data.subarray(i, i + 13));
  assert.equal(h.digest(), crc32c(data));
});

test("strict JSON: duplicate keys, lone surrogates, BOM, non-finite numbers", () => {
  const opts = { file: "manifest.json", limits: true };
  rejects(() => parseJsonText('{"a": 1, "a": 2}', opts), "ManifestError", "R-MAN-4");
  rejects(() => parseJsonText('"\\ud800"', opts), "ManifestError", "R-MAN-5");
  rejects(() => parseJsonText('"\\udc00\\ud800"', opts), "ManifestError", "R-MAN-5");
  rejects(() => parseJsonBytes(bytes(0xef, 0xbb, 0xbf, 0x31), opts), "ManifestError", "R-MAN-2");
  rejects(() => parseJsonBytes(bytes(0x22, 0xc0, 0x80, 0x22), opts), "ManifestError", "R-MAN-1");
  rejects(() => parseJsonText("1e400", opts), "ManifestError", "R-MAN-6");
  rejects(() => parseJsonText("NaN", opts), "ManifestError", "R-MAN-3");
  assert.equal(parseJsonText('"\\ud83d\\ude00"', opts).v, "😀");
});

test("strict JSON: integers exact and bounded, int and float kept apart", () => {
  const opts = { file: "value.json", limits: true };
  rejects(() => parseJsonText("9007199254740992", opts), "LimitExceeded", "R-LIM-4");
  assert.deepEqual(parseJsonText("9007199254740991", opts), { t: "int", v: 9007199254740991n });
  assert.deepEqual(parseJsonText("-0", opts), { t: "int", v: 0n });
  assert.deepEqual(parseJsonText("1.0", opts), { t: "float", v: 1 });
  // Renderings have no limits (B.1): a dimension above 2^53 parses exactly.
  assert.deepEqual(parseJsonText("4611686018427387904", { file: "x", limits: false }), { t: "int", v: 2n ** 62n });
  rejects(() => parseJsonText("[".repeat(65) + "]".repeat(65), opts), "LimitExceeded", "R-LIM-3");
  assert.equal(parseJsonText("[".repeat(64) + "]".repeat(64), opts).t, "arr");
});

test("floats are written so that they read back as floats (B.7)", () => {
  assert.equal(formatFloat(-0), "-0.0");
  assert.equal(formatFloat(1), "1.0");
  assert.equal(formatFloat(1e16), "10000000000000000.0");
  assert.equal(formatFloat(1e21), "1e+21");
  assert.equal(formatFloat(0.1), "0.1");
  const text = stringifyJson(J.arr([J.int(1), J.float(1), J.float(-0)]), 0);
  assert.equal(text, "[1, 1.0, -0.0]");
  const back = parseJsonText(text, { file: "x", limits: true });
  assert.deepEqual(back.v.map((x) => x.t), ["int", "float", "float"]);
  assert.ok(Object.is(back.v[2].v, -0));
});

test("manifest self-checksum: a sealed manifest verifies, one changed byte does not", () => {
  const m = sealManifest(J.obj([["format", J.str("opencheckpoint")], ["format_version", J.int(1)]]));
  checkManifestChecksum(m);
  const text = new TextDecoder().decode(m);
  assert.match(text, /,\n  "manifest_crc32c": "[0-9a-f]{8}"\n}\n$/);
  const bad = m.slice();
  bad[2] ^= 1;
  rejects(() => checkManifestChecksum(bad), "IntegrityError", "R-CHK-3");
});

test("tree: declared limits come before truncation (§8.8)", () => {
  // array 32 declaring 20,000,000 elements in a 7-byte file
  const doc = bytes(0xdd, 0x01, 0x31, 0x2d, 0x00, 0xc0, 0xc0);
  rejects(() => checkDeclaredLimits(doc, "t"), "LimitExceeded", "R-LIM-11");
  rejects(() => checkDeclaredLimits(bytes(0xdb, 0x20, 0, 0, 1), "t"), "LimitExceeded", "R-LIM-12");
  rejects(() => checkDeclaredLimits(new Uint8Array(129).fill(0x91), "t"), "LimitExceeded", "R-LIM-10");
  checkDeclaredLimits(bytes(0x92, 0xc0), "t"); // truncated but within limits: left to decodeTree
  rejects(() => decodeTree(bytes(0x92, 0xc0), "t"), "TreeError", "R-TREE-1");
});

test("tree: tag markers, keys and big ints follow §8", () => {
  rejects(() => decodeTree(bytes(0xc7, 0x00, 0x01), "t"), "TreeError", "R-TREE-15");
  rejects(() => decodeTree(bytes(0x91, 0xc7, 0x00, 0x00), "t"), "TreeError", "R-TREE-14");
  rejects(() => decodeTree(bytes(0x91, 0xc7, 0x00, 0x09), "t"), "TreeError", "R-TREE-18");
  rejects(() => decodeTree(bytes(0x82, 0x01, 0xc0, 0xcd, 0x00, 0x01, 0xc0), "t"), "TreeError", "R-TREE-11");
  rejects(() => decodeTree(bytes(0x81, 0xc0, 0xc0), "t"), "TreeError", "R-TREE-10");
  rejects(() => decodeTree(bytes(0xc0, 0xc0), "t"), "TreeError", "R-TREE-2");
  // 2^64 exactly as the spec's example
  const big = bytes(0x92, 0xc7, 0x00, 0x03, 0xc4, 0x09, 0, 0, 0, 0, 0, 0, 0, 0, 1);
  assert.deepEqual(decodeTree(big, "t").root, { type: "int", value: 2n ** 64n });
  rejects(() => decodeTree(bytes(0x92, 0xc7, 0x00, 0x03, 0xc4, 0x01, 0x05), "t"), "TreeError", "R-TREE-22");
  rejects(() => decodeTree(bytes(0x92, 0xc7, 0x00, 0x08, 0xa4, ...enc.encode("int4")), "t"), "UnknownDtype", "R-DT-1");
});

test("float 32 NaN payloads move to the top of the binary64 fraction, never quieted (R-TREE-8)", () => {
  assert.equal(float32ToFloat64Bits(bytes(0x7f, 0x80, 0x00, 0x01)), "7ff0000020000000");
  assert.equal(float32ToFloat64Bits(bytes(0xff, 0xc0, 0x00, 0x00)), "fff8000000000000");
  assert.equal(float32ToFloat64Bits(bytes(0x3f, 0xc0, 0x00, 0x00)), "3ff8000000000000");
  assert.equal(float32ToFloat64Bits(bytes(0x80, 0x00, 0x00, 0x00)), "8000000000000000");
});

test("encoder: shortest ints, float 64 bits, big ints, and a round trip through the decoder", () => {
  const root = {
    type: "dict",
    items: [
      [{ str: "small" }, { type: "int", value: 127n }],
      [{ str: "neg" }, { type: "int", value: -33n }],
      [{ str: "u64" }, { type: "int", value: 2n ** 64n - 1n }],
      [{ str: "big" }, { type: "int", value: -(2n ** 63n) - 1n }],
      [{ int: 7n }, { type: "float", bits: "8000000000000000" }],
      [{ str: "t" }, { type: "tuple", items: [{ type: "none" }, { type: "bool", value: true }] }],
      [{ str: "a" }, { type: "array", dtype: "float32", shape: [2n], data: bytes(0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0) }],
      [{ str: "b" }, { type: "array", dtype: "uint8", shape: [3n], data: bytes(1, 2, 3) }],
    ],
  };
  const { tree, data } = encodeTree(root);
  assert.deepEqual([...tree.subarray(1, 9)], [0xa5, ...enc.encode("small"), 0x7f, 0xa3]);
  assert.equal(data.length, 67); // second array at offset 64 (R-ARR-5), zero padding between
  assert.ok(data.subarray(8, 64).every((x) => x === 0));
  const back = decodeTree(tree, "t");
  assert.deepEqual(back.root.items.slice(0, 5).map(([k, v]) => [k, v]), [
    [{ str: "small" }, { type: "int", value: 127n }],
    [{ str: "neg" }, { type: "int", value: -33n }],
    [{ str: "u64" }, { type: "int", value: 2n ** 64n - 1n }],
    [{ str: "big" }, { type: "int", value: -(2n ** 63n) - 1n }],
    [{ int: 7n }, { type: "float", bits: "8000000000000000" }],
  ]);
  assert.deepEqual(back.arrays.map((a) => [a.offset, a.nbytes, a.crc32c]), [[0n, 8n, 0xaa36f2c9n], [64n, 3n, BigInt(crc32c(bytes(1, 2, 3)))]]);
});

test("half-precision and float8 decoding by hand", () => {
  assert.equal(decodeFloat16(0x3c00), 1);
  assert.equal(decodeFloat16(0xc000), -2);
  assert.equal(decodeFloat16(0x0001), 2 ** -24);
  assert.equal(decodeFloat16(0x7c00), Infinity);
  assert.ok(Number.isNaN(decodeFloat16(0x7e00)));
  assert.equal(decodeBfloat16(0x3f80), 1);
  assert.equal(decodeBfloat16(0xbfc0), -1.5);
  assert.equal(decodeFloat8.float8_e4m3fn(0x7e), 448);
  assert.ok(Number.isNaN(decodeFloat8.float8_e4m3fn(0x7f)));
  assert.equal(decodeFloat8.float8_e5m2(0x7b), 57344);
  assert.equal(decodeFloat8.float8_e5m2(0x7c), Infinity);
  assert.ok(Number.isNaN(decodeFloat8.float8_e4m3fnuz(0x80)));
  assert.equal(decodeFloat8.float8_e4m3fnuz(0x7f), 240);
  assert.equal(decodeFloat8.float8_e5m2fnuz(0x7f), 57344);
  assert.equal(decodeFloat8.float8_e8m0fnu(127), 1);
  assert.ok(Number.isNaN(decodeFloat8.float8_e8m0fnu(0xff)));
  assert.deepEqual([...decodeElements("int64", bytes(0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff))], [-1]);
  assert.deepEqual([...decodeElements("complex64", bytes(0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0))], [1, -2]);
});

test("array summary: min, max, mean, NaN and Inf counts, histogram, read in chunks", async () => {
  // float16: 1.5, NaN, +Inf, -2.0, 0.5
  const raw = bytes(0x00, 0x3e, 0x00, 0x7e, 0x00, 0x7c, 0x00, 0xc0, 0x00, 0x38);
  const reads = [];
  const s = await summarize("float16", raw.length, async (off, len) => {
    reads.push(len);
    return raw.subarray(off, off + len);
  }, 4, 4);
  assert.deepEqual([s.count, s.nan, s.posInf, s.negInf, s.min, s.max], [5, 1, 1, 0, -2, 1.5]);
  assert.equal(s.mean, 0);
  assert.deepEqual(s.histogram, [1, 0, 1, 1]); // bins of width 0.875 from -2
  assert.ok(Math.max(...reads) <= 4);
});
