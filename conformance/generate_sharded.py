"""The conformance cases of format version 2 (sharded arrays, spec ``opencheckpoint-v2.md``).

Loaded by ``generate.py`` (one module per format version; the version 1 cases
stay in ``generate.py``), which passes its ``case`` registry and ``Builder``.
Every case requires the optional capability ``sharding`` (spec §S.8) and is
a reader case. The checkpoints are built byte by byte with
:mod:`opencheckpoint.testing.sharded` (the reference writer writes sharded
arrays only from the shards of a collective save), with the generator's fixed
id, timestamp and producer; each must-reject case changes one thing of a valid
checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgpack
import numpy as np

from opencheckpoint.format.integrity import crc32c_of, format_crc32c
from opencheckpoint.format.manifest import serialize_manifest
from opencheckpoint.testing.sharded import SHARDED, DataFiles, write_checkpoint

R0, R1 = "shards/rank-00000.bin", "shards/rank-00001.bin"
GRID = np.arange(48, dtype=np.float32).reshape(6, 8)
#: A 6 x 8 array in four 3 x 4 shards, two per rank file.
QUARTERS = [(R0, (0, 0), (3, 4)), (R0, (0, 4), (3, 4)), (R1, (3, 0), (3, 4)), (R1, (3, 4), (3, 4))]
IN_DATA_BIN = [("data.bin", start, size) for _, start, size in QUARTERS]
#: What the generator's ``case(...)`` returns: a decorator registering a case's build function.
Register = Callable[[Callable[[Any], None]], Callable[[Any], None]]


def register(case: Callable[..., Register], builder: type, tree: Callable[..., dict[str, Any]], created_at: str,
             producer: dict[str, Any]) -> None:
    """Register every format version 2 case with the generator's ``case`` decorator."""

    def write(b: Any, trees: dict[str, tuple[Any, DataFiles]], *, values: dict[str, Any] | None = None,
              **kw: Any) -> None:
        write_checkpoint(b.root, trees, checkpoint_id=f"conformance-{b.case.id}", created_at=created_at,
                         producer=producer, **kw)
        if values is not None:  # a valid case: what it means to store (the assembled arrays)
            doc = b.document({name: tree(value, kind_version=2) for name, value in values.items()})
            b.intended = {**doc, "format_version": 2}

    def sharded(b: Any, regions: list[Any] = QUARTERS, edit: Callable[[list[Any]], None] | None = None,
                **kw: Any) -> None:
        files = DataFiles()
        node = files.sharded(GRID, regions)
        if edit is not None:
            edit(node)
        write(b, {"m": ({"w": node}, files)}, **kw)

    def reject(case_id: str, description: str, sections: list[str], error: str) -> Register:
        return case(case_id, description, sections, error=error, requires=["sharding"])

    # -- valid ---------------------------------------------------------------------------------------
    @case("sharded-2d-four-shards", "A 6 x 8 float32 array in four 3 x 4 shards over two rank files "
          "(format version 2, tree kind_version 2).", ["S.4", "S.5", "S.6", "R-SHD-11"], requires=["sharding"])
    def _(b: Any) -> None:
        files = DataFiles()
        write(b, {"m": ({"w": files.sharded(GRID, QUARTERS)}, files)}, values={"m": {"w": GRID}})

    @case("sharded-replicated-region", "A region stored twice (in both rank files) with equal CRC-32C: replicas "
          "(R-SHD-10); either may be read.", ["R-SHD-10", "R-SHD-9", "S.5"], requires=["sharding"])
    def _(b: Any) -> None:
        files = DataFiles()
        node = files.sharded(GRID, [*QUARTERS, (R1, (0, 0), (3, 4))])
        write(b, {"m": ({"w": node}, files)}, values={"m": {"w": GRID}})

    @case("sharded-zero-element", "Zero-element sharded arrays (shapes [0, 5] and [3, 0]) have no shard records.",
          ["R-SHD-8", "S.4"], requires=["sharding"])
    def _(b: Any) -> None:
        files = DataFiles()
        a, c = np.zeros((0, 5), np.int16), np.zeros((3, 0), np.float64)
        node = {"a": files.sharded(a, []), "c": files.sharded(c, [])}
        write(b, {"m": (node, files)}, values={"m": {"a": a, "c": c}})

    @case("sharded-mixed-tree", "A tree mixing tag 6 arrays (in data.bin), a sharded array whose shards are in "
          "data.bin and a rank file, and plain values.", ["S.3", "S.5", "R-SHD-7"], requires=["sharding"])
    def _(b: Any) -> None:
        files = DataFiles()
        bias, step = np.arange(3, dtype=np.int64), np.array([True, False])
        node = {"w": files.sharded(GRID, [("data.bin", (0, 0), (6, 4)), (R1, (0, 4), (6, 4))]),
                "b": files.array(bias), "step": 7, "mask": files.array(step)}
        write(b, {"m": (node, files)}, values={"m": {"w": GRID, "b": bias, "step": 7, "mask": step}})

    @case("sharded-irregular-tiling", "Shards that tile the array without forming a grid (a brick pattern of "
          "uneven sizes), bfloat16.", ["R-SHD-9", "R-SHD-11"], requires=["sharding"])
    def _(b: Any) -> None:
        import ml_dtypes

        files = DataFiles()
        array = np.arange(20, dtype=np.float32).reshape(4, 5).astype(ml_dtypes.bfloat16)
        regions = [(R0, (0, 0), (2, 3)), (R0, (0, 3), (2, 2)), (R1, (2, 0), (2, 1)), (R1, (2, 1), (2, 4))]
        write(b, {"m": ({"w": files.sharded(array, regions)}, files)}, values={"m": {"w": array}})

    # -- must reject ---------------------------------------------------------------------------------
    @reject("reject-sharded-gap", "The shard regions leave a 3 x 4 block uncovered.", ["R-SHD-11"],
            "ArrayLayoutError")
    def _(b: Any) -> None:
        sharded(b, QUARTERS[:3])

    @reject("reject-sharded-partial-overlap", "A fifth shard overlaps two others partially.", ["R-SHD-9"],
            "ArrayLayoutError")
    def _(b: Any) -> None:
        sharded(b, [*QUARTERS, (R1, (2, 2), (2, 2))])

    @reject("reject-sharded-outside-shape", "A shard region [3, 9) runs past dimension 1 of size 8.", ["R-SHD-6"],
            "ArrayLayoutError")
    def _(b: Any) -> None:
        sharded(b, edit=lambda node: node[3][3][2].__setitem__(1, 5))

    @reject("reject-sharded-replicas-disagree", "Two shard records of one region with different bytes and "
            "CRC-32C.", ["R-SHD-10"], "ArrayLayoutError")
    def _(b: Any) -> None:
        files = DataFiles()
        node = files.sharded(GRID, QUARTERS)
        node[3].append(files.sharded(GRID + 1, [(R1, (0, 0), (3, 4))])[3][0])
        write(b, {"m": ({"w": node}, files)})

    @reject("reject-sharded-file-not-listed", "A shard names shards/rank-00002.bin, which the inventory does not "
            "list (a missing rank file).", ["R-SHD-7"], "ArrayLayoutError")
    def _(b: Any) -> None:
        sharded(b, edit=lambda node: node[3][3].__setitem__(0, "shards/rank-00002.bin"))

    @reject("reject-sharded-rank-file-absent", "The inventory lists shards/rank-00001.bin but the file is absent.",
            ["R-CON-3", "S.5"], "MissingFile")
    def _(b: Any) -> None:
        sharded(b)
        (b.root / "components/m" / R1).unlink()

    @reject("reject-sharded-crc-mismatch", "A shard's crc32c does not match its bytes.", ["R-ARR-14", "S.5"],
            "IntegrityError")
    def _(b: Any) -> None:
        sharded(b, edit=lambda node: node[3][2].__setitem__(5, node[3][2][5] ^ 1))

    @reject("reject-sharded-start-length", "A shard record's start has 1 element; the array has 2 dimensions.",
            ["R-SHD-5"], "TreeError")
    def _(b: Any) -> None:
        sharded(b, edit=lambda node: node[3][0].__setitem__(1, [0]))

    @reject("reject-sharded-empty-region", "A shard record of a 6 x 8 array with size [0, 4].", ["R-SHD-8"],
            "ArrayLayoutError")
    def _(b: Any) -> None:
        sharded(b, [*QUARTERS, (R0, (0, 0), (0, 4))])

    @reject("reject-sharded-inventory", "A tree component of kind_version 2 lists shards/rank-1.bin (the rank "
            "needs 5 digits).", ["R-SHD-3"], "ManifestError")
    def _(b: Any) -> None:
        sharded(b)
        _edit_manifest(b, lambda m: m["components"]["m"]["files"].update(
            {"shards/rank-1.bin": {"size": 0, "crc32c": "00000000"}}))
        (b.root / "components/m/shards/rank-1.bin").write_bytes(b"")

    @reject("reject-sharded-tag-in-format-1", "A tag 10 node in a format version 1 checkpoint: still a reserved "
            "tag there.", ["R-TREE-18", "S.2"], "TreeError")
    def _(b: Any) -> None:
        sharded(b, IN_DATA_BIN, format_version=1, kind_version=1)

    @reject("reject-sharded-kind-version-2-in-format-1", "A tree component of kind_version 2 in a format version "
            "1 checkpoint.", ["R-SHD-2"], "UnsupportedVersion")
    def _(b: Any) -> None:
        files = DataFiles()
        write(b, {"m": ({"b": files.array(np.arange(3))}, files)}, format_version=1)

    @reject("reject-sharded-record-length", "A shard record with 5 elements (crc32c missing).", ["R-SHD-4"],
            "TreeError")
    def _(b: Any) -> None:
        sharded(b, edit=lambda node: node[3][1].pop())

    @reject("reject-sharded-format-2-without-sharded", "format_version 2 on a checkpoint without a tree component "
            "of kind_version 2: version 1 content, rejected before any other manifest rule.", ["R-SHD-12"],
            "UnsupportedVersion")
    def _(b: Any) -> None:
        files = DataFiles()
        write(b, {"m": ({"b": files.array(np.arange(3))}, files)}, kind_version=1)

    @reject("reject-sharded-in-kind-version-1", "A tag 10 node in a tree component of kind_version 1 of a format "
            "version 2 checkpoint.", ["R-SHD-1"], "TreeError")
    def _(b: Any) -> None:
        files, other = DataFiles(), DataFiles()
        trees = {"m": ({"w": files.sharded(GRID, IN_DATA_BIN)}, files),
                 "s": ({"w": other.sharded(GRID, IN_DATA_BIN)}, other)}
        write(b, trees, kind_version={"m": 1, "s": 2})

    @reject("reject-sharded-no-shard-records", "A 2 x 3 int64 sharded array (no zero dimension) with an empty "
            "shards array: every element is a gap.", ["R-SHD-11", "R-SHD-8"], "ArrayLayoutError")
    def _(b: Any) -> None:
        write(b, {"m": ({"w": [SHARDED, "int64", [2, 3], []]}, DataFiles())})

    @reject("reject-sharded-shard-count-declared", "A shards array whose header declares 65,537 records in a "
            "tree.msgpack that ends right after it: the declared count breaks the limit before the missing "
            "records break R-TREE-1.", ["R-LIM-20"], "LimitExceeded")
    def _(b: Any) -> None:
        files = DataFiles()
        write(b, {"m": ({"w": files.sharded(np.arange(4, dtype=np.uint8), [("data.bin", (0,), (4,))])}, files)})
        # {"w": tag 10 ["uint8", [4], shards]}, shards declared as an array 32 of 65,537 elements, none following
        tree = bytes([0x81, 0xA1, 0x77, 0x94, 0xC7, 0x00, 0x0A, 0xA5]) + b"uint8" + bytes([0x91, 0x04])
        tree += bytes([0xDD, 0x00, 0x01, 0x00, 0x01])
        (b.root / "components/m/tree.msgpack").write_bytes(tree)
        _edit_manifest(b, lambda m: m["components"]["m"]["files"].update(
            {"tree.msgpack": {"size": len(tree), "crc32c": format_crc32c(crc32c_of(tree))}}))

    # -- text revision 2.0.1 (issue 26): ambiguities resolved, each shown by files --------------------
    @case("reject-sharded-kind-version-2-inventory-in-format-1", "A format version 1 checkpoint with a tree "
          "component of kind_version 2 whose inventory R-SHD-3 would reject (shards/rank-1.bin): R-SHD-3 is a "
          "format version 2 rule, not checked here; the component is R-SHD-2's (UnsupportedVersion, step 12), "
          "the class a version 1 reader reports under R-CMP-19.", ["R-SHD-2", "R-CMP-19", "S.2"],
          error="UnsupportedVersion")
    def _(b: Any) -> None:
        files = DataFiles()
        files.files["shards/rank-1.bin"] = bytearray()
        write(b, {"m": ({"b": files.array(np.arange(3))}, files)}, format_version=1)

    @reject("reject-sharded-kind-version-float", "The only tree component states \"kind_version\": 2.0, not the "
            "integer 2: R-SHD-12 (step 5) finds no tree of kind_version 2 before step 7 sees the token.",
            ["R-SHD-12", "S.2"], "UnsupportedVersion")
    def _(b: Any) -> None:
        sharded(b)
        _edit_manifest(b, lambda m: m["components"]["m"].__setitem__("kind_version", 2.0))

    @reject("reject-sharded-shard-nbytes-limit", "A shard record's nbytes is 2^63: R-LIM-16 applies to every "
            "extent of a data file, shard records included (step 15 (b)), before R-ARR-4.", ["R-LIM-16", "S.5"],
            "LimitExceeded")
    def _(b: Any) -> None:
        sharded(b, edit=lambda node: node[3][1].__setitem__(4, 1 << 63))

    @case("sharded-rank-file-six-digits", "Shard data files named shards/rank-000000.bin and rank-000001.bin (6 "
          "digits): any key matching R-SHD-3's pattern is a shard data file; the digits are informative.",
          ["R-SHD-3", "S.3"], requires=["sharding"])
    def _(b: Any) -> None:
        files = DataFiles()
        six = [(f.replace("rank-0", "rank-00"), start, size) for f, start, size in QUARTERS]
        write(b, {"m": ({"w": files.sharded(GRID, six)}, files)}, values={"m": {"w": GRID}})

    @reject("reject-sharded-unused-replica-corrupt", "Two replicas of one region with equal crc32c, the bytes of "
            "the second altered: CMD read verifies every extent (step 16), also a replica no element is read from.",
            ["R-ARR-14", "R-SHD-10", "S.6"], "IntegrityError")
    def _(b: Any) -> None:
        files = DataFiles()
        node = files.sharded(GRID, [*QUARTERS, (R1, (0, 0), (3, 4))])
        write(b, {"m": ({"w": node}, files)})
        offset = node[3][4][3]
        rank1 = b.root / "components/m" / R1
        data = bytearray(rank1.read_bytes())
        data[offset] ^= 1
        rank1.write_bytes(bytes(data))
        _edit_manifest(b, lambda m: m["components"]["m"]["files"].__setitem__(
            R1, {"size": len(data), "crc32c": format_crc32c(crc32c_of(bytes(data)))}))

    @reject("reject-sharded-prng-key-data", "A typed PRNG key (tag 7) whose data is a sharded array (tag 10): a "
            "PRNG key's data is an array node (tag 6) only.", ["R-TREE-17", "R-TREE-25", "S.4"], "TreeError")
    def _(b: Any) -> None:
        files = DataFiles()
        key = [msgpack.ExtType(7, b""), "threefry2x32",
               files.sharded(np.array([0, 42], np.uint32), [("data.bin", (0,), (2,))])]
        write(b, {"m": ({"k": key}, files)})

    @reject("reject-sharded-empty-region-offset", "A shard record with size [0, 4], nbytes 0 and offset 64: "
            "R-ARR-6 in step 15 (b) reports it before R-SHD-8 in step 15 (c); both are ArrayLayoutError.",
            ["R-ARR-6", "R-SHD-8", "S.5"], "ArrayLayoutError")
    def _(b: Any) -> None:
        sharded(b, [*QUARTERS, (R0, (0, 0), (0, 4))], edit=lambda node: node[3][4].__setitem__(3, 64))

    @reject("reject-sharded-layout-before-size-limits", "A tag 6 array whose nbytes is 2^63 (R-LIM-16, step 15 "
            "(b)) beside a sharded array whose shard names tree.msgpack (R-SHD-7, step 15 (a)): (a) comes first.",
            ["R-SHD-7", "R-LIM-16", "S.9"], "ArrayLayoutError")
    def _(b: Any) -> None:
        files = DataFiles()
        big = files.array(np.arange(3))
        big[4] = 1 << 63
        node = files.sharded(GRID, QUARTERS)
        node[3][0][0] = "tree.msgpack"
        write(b, {"m": ({"a": big, "w": node}, files)})

    @reject("reject-sharded-shard-count-before-records", "A shards array declaring 65,537 records whose first "
            "record has 5 elements, the document ending after it: R-LIM-20 is checked on the header, before any "
            "record (R-SHD-4) and before R-TREE-1.", ["R-LIM-20", "R-SHD-4", "S.9"], "LimitExceeded")
    def _(b: Any) -> None:
        files = DataFiles()
        write(b, {"m": ({"w": files.sharded(np.arange(4, dtype=np.uint8), [("data.bin", (0,), (4,))])}, files)})
        tree = bytes([0x81, 0xA1, 0x77, 0x94, 0xC7, 0x00, 0x0A, 0xA5]) + b"uint8" + bytes([0x91, 0x04])
        tree += bytes([0xDD, 0x00, 0x01, 0x00, 0x01]) + msgpack.packb(["data.bin", [0], [4], 0, 4])
        (b.root / "components/m/tree.msgpack").write_bytes(tree)
        _edit_manifest(b, lambda m: m["components"]["m"]["files"].update(
            {"tree.msgpack": {"size": len(tree), "crc32c": format_crc32c(crc32c_of(tree))}}))


def _edit_manifest(b: Any, change: Callable[[dict[str, Any]], None]) -> None:
    body = json.loads((b.root / "manifest.json").read_bytes())
    body.pop("manifest_crc32c")
    change(body)
    (b.root / "manifest.json").write_bytes(serialize_manifest(body))
