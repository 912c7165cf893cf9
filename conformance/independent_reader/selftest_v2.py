"""Self-made format version 2 (sharded arrays, spec/opencheckpoint-v2.md) cases; registered by importing
this module (see selftest.py). Each builds a small checkpoint with the spec's own layout and breaks one rule."""
from __future__ import annotations

import struct

from stkit import M, arr, base_manifest, case, crc32c, crc32c_hex, manifest_bytes, pk, write_dir, write_zip

# S.11, the 91 bytes of components/model/tree.msgpack as printed in the spec
WORKED_TREE = bytes.fromhex(
    "81a177" "94c7000a" "a7666c6f61743332" "920204" "92"
    "96b5736861726473" "2f72616e6b2d3030303030" "2e62696e" "92000092010400" "10ce515dc834"
    "96b5736861726473" "2f72616e6b2d3030303031" "2e62696e" "92010092010400" "10ce7e90041c")
RANK = "shards/rank-{:05d}.bin".format


def shard(file, start, size, off, nb, buf):
    """A shard record [file, start, size, offset, nbytes, crc32c] over buf[off:off+nb] (S.4)."""
    return [file, start, size, off, nb, crc32c(buf[off:off + nb]) if nb else 0]


def sharded(dtype, shape, records):
    return [M(10), dtype, shape, records]


def v2_ckpt(tree, shards, data=b"", path="components/model"):
    """A format version 2 checkpoint with one tree component of kind_version 2 (S.3)."""
    tb = tree if isinstance(tree, bytes) else pk(tree)
    entries = {"tree.msgpack": tb, "data.bin": data, **shards}
    rec = {"kind": "tree", "kind_version": 2, "path": path,
           "files": {k: {"size": len(b), "crc32c": crc32c_hex(b)} for k, b in entries.items()}}
    man = base_manifest({"model": rec})
    man["format_version"] = 2
    return man, {f"{path}/{k}": b for k, b in entries.items()}


def rows_example(records=None, shape=None, dtype="float32"):
    """Two ranks holding one row each of a float32 [2, 4] array (S.11), records overridable."""
    r0, r1 = struct.pack("<4f", 0, 1, 2, 3), struct.pack("<4f", 4, 5, 6, 7)
    recs = records or [shard(RANK(0), [0, 0], [1, 4], 0, 16, r0), shard(RANK(1), [1, 0], [1, 4], 0, 16, r1)]
    return v2_ckpt({"w": sharded(dtype, shape or [2, 4], recs)}, {RANK(0): r0, RANK(1): r1})


def verify_worked(doc):
    c = doc["components"]["model"]
    w = c["content"]["root"]["items"][0][1]
    return (doc["format_version"] == 2 and c["files"]["tree.msgpack"]["crc32c"] == "767421b3"
            and c["files"][RANK(0)]["crc32c"] == "515dc834" and c["files"][RANK(1)]["crc32c"] == "7e90041c"
            and w == {"type": "array", "dtype": "float32", "shape": [2, 4], "nbytes": 32,
                      "hex": struct.pack("<8f", *range(8)).hex()})


@case("OK", verify=verify_worked)
def v2_worked_example(d):
    man, files = v2_ckpt(WORKED_TREE, {RANK(0): struct.pack("<4f", 0, 1, 2, 3),
                                       RANK(1): struct.pack("<4f", 4, 5, 6, 7)})
    write_dir(d, man, files)


def verify_grid(doc):
    w = doc["components"]["model"]["content"]["root"]["items"][0][1]
    return w["shape"] == [4, 6] and w["hex"] == bytes(range(24)).hex()


@case("OK", "zip", verify=verify_grid)
def v2_grid_replicas_zip(d):
    """A uint8 [4, 6] array in a 2 x 2 grid of irregular tiles, one tile replicated, shards in data.bin too."""
    full = bytes(range(24))
    tile = lambda r0, r1, c0, c1: b"".join(full[r * 6 + c0:r * 6 + c1] for r in range(r0, r1))  # noqa: E731
    a, b, c, e = tile(0, 1, 0, 2), tile(0, 1, 2, 6), tile(1, 4, 0, 5), tile(1, 4, 5, 6)
    f0 = a + b"\0" * 62 + b          # two shards in rank 0, the second at offset 64
    data = c
    recs = [shard(RANK(0), [0, 0], [1, 2], 0, 2, f0), shard(RANK(0), [0, 2], [1, 4], 64, 4, f0),
            shard("data.bin", [1, 0], [3, 5], 0, 15, data), shard(RANK(1), [1, 5], [3, 1], 0, 3, e),
            shard(RANK(2), [1, 5], [3, 1], 0, 3, e)]
    man, files = v2_ckpt({"w": sharded("uint8", [4, 6], recs)}, {RANK(0): f0, RANK(1): e, RANK(2): e}, data)
    write_zip(d, man, files)


def verify_zero_d(doc):
    items = dict((k["str"], v) for k, v in doc["components"]["model"]["content"]["root"]["items"])
    return (items["s"] == {"type": "array", "dtype": "float64", "shape": [], "nbytes": 8,
                           "hex": struct.pack("<d", 2.5).hex()}
            and items["e"] == {"type": "array", "dtype": "int32", "shape": [3, 0], "nbytes": 0, "hex": ""})


@case("OK", verify=verify_zero_d)
def v2_zero_d_and_empty(d):
    """A 0-d sharded array (one record, empty start/size), an empty one (no records), a listed unused empty file."""
    one = struct.pack("<d", 2.5)
    man, files = v2_ckpt({"s": sharded("float64", [], [shard(RANK(0), [], [], 0, 8, one)]),
                          "e": sharded("int32", [3, 0], []), "t": arr("int8", [0], 0, 0, b"")},
                         {RANK(0): one, RANK(7): b""})
    write_dir(d, man, files)


@case("ArrayLayoutError")
def v2_partial_overlap_3d(d):
    buf = bytes(64 + 8)
    recs = [shard(RANK(0), [0, 0, 0], [2, 2, 2], 0, 8, buf), shard(RANK(0), [1, 1, 1], [1, 1, 1], 64, 1, buf)]
    man, files = v2_ckpt({"w": sharded("uint8", [2, 2, 2], recs)}, {RANK(0): buf[:65]})
    write_dir(d, man, files)


@case("ArrayLayoutError")
def v2_gap(d):
    """The two rows of S.11 declared as a [3, 4] array: row 2 is held by no shard (R-SHD-11)."""
    man, files = rows_example(shape=[3, 4])
    write_dir(d, man, files)


@case("IntegrityError")
def v2_shard_crc(d):
    r0 = struct.pack("<4f", 0, 1, 2, 3)
    bad = shard(RANK(0), [0, 0], [1, 4], 0, 16, r0)
    bad[5] ^= 1
    man, files = rows_example([bad, shard(RANK(1), [1, 0], [1, 4], 0, 16, struct.pack("<4f", 4, 5, 6, 7))])
    write_dir(d, man, files)


@case("ArrayLayoutError")
def v2_bool_byte(d):
    buf = b"\x01\x02"
    man, files = v2_ckpt({"m": sharded("bool", [2], [shard(RANK(0), [0], [2], 0, 2, buf)])}, {RANK(0): buf})
    write_dir(d, man, files)


@case("ArrayLayoutError")
def v2_padding(d):
    buf = b"\x05" + b"\x01" + bytes(62) + b"\x06"
    recs = [shard(RANK(0), [0], [1], 0, 1, buf), shard(RANK(0), [1], [1], 64, 1, buf)]
    man, files = v2_ckpt({"m": sharded("uint8", [2], recs)}, {RANK(0): buf})
    write_dir(d, man, files)


@case("LimitExceeded")
def v2_too_many_records(d):
    # {"w": [m10, "uint8", [1], <array 32 header declaring 65,537 records>]}; no record follows: the
    # declared count is checked before any record is read (R-LIM-20, R-LIM-0)
    tb = b"\x81\xa1w\x94\xc7\x00\x0a\xa5uint8\x91\x01" + b"\xdd\x00\x01\x00\x01"
    man, files = v2_ckpt(tb, {})
    write_dir(d, man, files)


@case("TreeError")
def v2_tagged_record(d):
    buf = bytes(4)
    rec = [M(1), RANK(0), [0], [4], 0, 4]  # a tag marker inside a shard record
    man, files = v2_ckpt({"w": sharded("uint8", [4], [rec])}, {RANK(0): buf})
    write_dir(d, man, files)


@case("ManifestError")
def v2_rank_digits(d):
    buf = bytes(4)
    man, files = v2_ckpt({"w": sharded("uint8", [4], [shard("shards/rank-0001.bin", [0], [4], 0, 4, buf)])},
                         {"shards/rank-0001.bin": buf})
    write_dir(d, man, files)


@case("ArrayLayoutError")
def v2_file_is_tree(d):
    man, files = v2_ckpt({"w": sharded("uint8", [4], [["tree.msgpack", [0], [4], 0, 4, 0]])}, {})
    write_dir(d, man, files)


@case("ArrayLayoutError")
def v2_extent_past_file(d):
    buf = bytes(4)
    man, files = v2_ckpt({"w": sharded("uint8", [8], [shard(RANK(0), [0], [8], 0, 8, buf + bytes(4))])},
                         {RANK(0): buf})
    write_dir(d, man, files)


@case("ArrayLayoutError")
def v2_unused_file_not_empty(d):
    man, files = rows_example()
    files_b = {RANK(0): files["components/model/" + RANK(0)], RANK(1): files["components/model/" + RANK(1)],
               RANK(2): b"\0"}
    tb = files["components/model/tree.msgpack"]
    man, files = v2_ckpt(tb, files_b)
    write_dir(d, man, files)


@case("UnsupportedVersion")
def v2_format_3(d):
    man, files = rows_example()
    man["format_version"] = 3
    write_dir(d, man, files)


@case("UnsupportedVersion")
def v2_tree_kv2_in_format_1(d):
    man, files = rows_example()
    man["format_version"] = 1
    write_dir(d, man, files, raw_manifest=manifest_bytes(man))
