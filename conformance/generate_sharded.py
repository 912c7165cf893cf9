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


def _edit_manifest(b: Any, change: Callable[[dict[str, Any]], None]) -> None:
    body = json.loads((b.root / "manifest.json").read_bytes())
    body.pop("manifest_crc32c")
    change(body)
    (b.root / "manifest.json").write_bytes(serialize_manifest(body))
