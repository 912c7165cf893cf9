"""Sharded arrays (format version 2): decoding, the R-SHD rules with their classes, assembly, region reads."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest

from opencheckpoint import open_checkpoint, read_component, validate
from opencheckpoint.format.errors import (
    ArrayLayoutError,
    CheckpointError,
    IntegrityError,
    LimitExceeded,
    ManifestError,
    MissingFile,
    TreeError,
    UnsupportedVersion,
)
from opencheckpoint.format.manifest import serialize_manifest
from opencheckpoint.sharding import check_tiling, intersect, slices_to_region
from opencheckpoint.testing.sharded import DataFiles, write_checkpoint

GRID = np.arange(48, dtype=np.float32).reshape(6, 8)
R0, R1 = "shards/rank-00000.bin", "shards/rank-00001.bin"
#: 2-D array in 4 shards over 2 rank files.
QUARTERS = [(R0, (0, 0), (3, 4)), (R0, (0, 4), (3, 4)), (R1, (3, 0), (3, 4)), (R1, (3, 4), (3, 4))]


def build(tmp_path: Path, regions: list[Any] = QUARTERS, *, edit: Callable[[list[Any]], None] | None = None,
          **kw: Any) -> Path:
    files = DataFiles()
    node = files.sharded(GRID, regions)
    if edit is not None:
        edit(node)
    return write_checkpoint(tmp_path / "c", {"m": ({"w": node, "b": files.array(np.arange(3))}, files)}, **kw)


def edit_manifest(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    body = json.loads((path / "manifest.json").read_bytes())
    body.pop("manifest_crc32c")
    change(body)
    (path / "manifest.json").write_bytes(serialize_manifest(body))


def rejected(path: Path, error: type[CheckpointError], rule: str) -> CheckpointError:
    with pytest.raises(error) as info:
        read_component(path, "m")
    assert info.value.rule == rule, info.value
    report = validate(path)
    assert report.errors and report.errors[0].rule == rule
    return info.value


def test_a_sharded_array_reads_back_whole_and_validates(tmp_path: Path) -> None:
    path = build(tmp_path)
    tree = read_component(path, "m")
    assert np.array_equal(tree["w"], GRID) and tree["w"].dtype == np.float32 and tree["w"].flags.writeable
    assert validate(path).ok
    with open_checkpoint(path) as ckpt:
        assert np.array_equal(ckpt.read("m", copy=False)["w"], GRID)


def test_replicas_and_zero_element_arrays_read(tmp_path: Path) -> None:
    files = DataFiles()
    twice = files.sharded(GRID, [*QUARTERS, ("data.bin", (0, 0), (3, 4))])
    empty = files.sharded(np.zeros((0, 5), np.int16), [])
    path = write_checkpoint(tmp_path / "c", {"m": ({"w": twice, "e": empty}, files)})
    tree = read_component(path, "m")
    assert np.array_equal(tree["w"], GRID) and tree["e"].shape == (0, 5) and tree["e"].dtype == np.int16


@pytest.mark.parametrize(("name", "regions", "error", "rule"), [
    ("gap", QUARTERS[:3], ArrayLayoutError, "R-SHD-11"),
    ("partial-overlap", [*QUARTERS, (R1, (2, 2), (2, 2))], ArrayLayoutError, "R-SHD-9"),
    ("outside", [*QUARTERS[:3], (R1, (3, 4), (3, 5))], ArrayLayoutError, "R-SHD-6"),
    ("empty-region", [*QUARTERS, (R1, (0, 0), (0, 4))], ArrayLayoutError, "R-SHD-8"),
])
def test_regions_that_do_not_tile_are_rejected(tmp_path: Path, name: str, regions: list[Any],
                                               error: type[CheckpointError], rule: str) -> None:
    rejected(build(tmp_path, regions), error, rule)


def test_replicas_that_disagree_are_rejected(tmp_path: Path) -> None:
    files = DataFiles()
    node = files.sharded(GRID, QUARTERS)
    node[3].append(files.sharded(GRID + 1, [("data.bin", (0, 0), (3, 4))])[3][0])  # other bytes, same region
    path = write_checkpoint(tmp_path / "c", {"m": (node, files)})
    rejected(path, ArrayLayoutError, "R-SHD-10")


@pytest.mark.parametrize(("name", "change", "error", "rule"), [
    ("start-length", lambda n: n[3][0].__setitem__(1, [0]), TreeError, "R-SHD-5"),
    ("record-length", lambda n: n[3][0].pop(), TreeError, "R-SHD-4"),
    ("field-count", lambda n: n.append(1), TreeError, "R-SHD-4"),
    ("file-not-listed", lambda n: n[3][0].__setitem__(0, "shards/rank-00009.bin"), ArrayLayoutError, "R-SHD-7"),
    ("file-tree", lambda n: n[3][0].__setitem__(0, "tree.msgpack"), ArrayLayoutError, "R-SHD-7"),
    ("unaligned", lambda n: n[3][1].__setitem__(3, 8), ArrayLayoutError, "R-ARR-5"),
    ("crc", lambda n: n[3][3].__setitem__(5, n[3][3][5] ^ 1), IntegrityError, "R-ARR-14"),
])
def test_bad_shard_records_are_rejected(tmp_path: Path, name: str, change: Callable[[list[Any]], None],
                                        error: type[CheckpointError], rule: str) -> None:
    rejected(build(tmp_path, edit=change), error, rule)


def test_the_shard_count_is_limited_before_records_are_read(tmp_path: Path) -> None:
    def many(node: list[Any]) -> None:
        node[3] = [node[3][0]] * 65_537

    rejected(build(tmp_path, edit=many), LimitExceeded, "R-LIM-20")


def test_a_listed_rank_file_that_is_absent_is_missing(tmp_path: Path) -> None:
    path = build(tmp_path)
    (path / "components/m" / R1).unlink()
    with pytest.raises(MissingFile):
        read_component(path, "m")


IN_DATA_BIN = [("data.bin", start, size) for _, start, size in QUARTERS]


def test_tag_10_in_format_version_1_is_still_a_reserved_tag(tmp_path: Path) -> None:
    rejected(build(tmp_path, IN_DATA_BIN, format_version=1, kind_version=1), TreeError, "R-TREE-18")


def test_tag_10_in_a_kind_version_1_component_of_format_2(tmp_path: Path) -> None:
    files, other = DataFiles(), DataFiles()
    trees = {"m": (files.sharded(GRID, IN_DATA_BIN), files), "s": (other.sharded(GRID, IN_DATA_BIN), other)}
    path = write_checkpoint(tmp_path / "c", trees, kind_version={"m": 1, "s": 2})
    assert np.array_equal(read_component(path, "s"), GRID)
    rejected(path, TreeError, "R-SHD-1")


def test_kind_version_2_in_format_version_1(tmp_path: Path) -> None:
    files = DataFiles()
    path = write_checkpoint(tmp_path / "c", {"m": ({"b": files.array(np.arange(3))}, files)}, format_version=1)
    rejected(path, UnsupportedVersion, "R-SHD-2")


def test_format_version_2_without_a_sharded_component_is_unsupported(tmp_path: Path) -> None:
    files = DataFiles()
    path = write_checkpoint(tmp_path / "c", {"m": ({"b": files.array(np.arange(3))}, files)}, kind_version=1)
    with pytest.raises(UnsupportedVersion) as info:
        read_component(path, "m")
    assert info.value.rule == "R-SHD-12" and "2" in info.value.message and "1" in info.value.message


def test_a_kind_version_2_inventory_has_only_shard_files(tmp_path: Path) -> None:
    path = build(tmp_path)
    edit_manifest(path, lambda b: b["components"]["m"]["files"].update(
        {"shards/rank-1.bin": {"size": 0, "crc32c": "00000000"}}))
    (path / "components/m/shards/rank-1.bin").write_bytes(b"")
    rejected(path, ManifestError, "R-SHD-3")


def test_a_region_read_opens_only_the_overlapping_shards(tmp_path: Path) -> None:
    path = build(tmp_path)
    raw = bytearray((path / "components/m" / R1).read_bytes())
    raw[0] ^= 0xFF  # rank 1 holds the lower half: corrupt it
    (path / "components/m" / R1).write_bytes(bytes(raw))
    with open_checkpoint(path) as ckpt:
        handle = ckpt.tree("m")["w"]
        opened: list[str] = []
        original = handle._reads.files._map_file
        handle._reads.files._map_file = lambda rel, size: opened.append(rel) or original(rel, size)
        assert np.array_equal(handle[0:3, 2:7], GRID[0:3, 2:7])
        assert np.array_equal(handle.read_region((1, 1), (2, 6)), GRID[1:3, 1:7])
        assert opened == [f"components/m/{R0}"]
        with pytest.raises(IntegrityError) as info:
            handle[2:4]
        assert info.value.rule == "R-ARR-14" and info.value.file == f"components/m/{R1}"
        assert np.array_equal(handle.read_region((3, 0), (1, 8), verify=False)[0, 1:], GRID[3, 1:])
    with pytest.raises(IntegrityError):
        read_component(path, "m")


@pytest.mark.parametrize("key", [(slice(0, 128), slice(None)), 2, (-1, slice(None, None, -2)), (Ellipsis, 3),
                                 (slice(4, 1, -1), Ellipsis), (slice(5, 5),)])
def test_handles_index_like_numpy(tmp_path: Path, key: Any) -> None:
    path = build(tmp_path)
    with open_checkpoint(path) as ckpt:
        tree = ckpt.tree("m")
        assert np.array_equal(tree["w"][key], GRID[key])


@pytest.mark.parametrize("key", [slice(None, None, -1), 1, -3, Ellipsis, slice(1, 3)])
def test_array_handles_index_like_numpy_verified_or_not(tmp_path: Path, key: Any) -> None:
    with open_checkpoint(build(tmp_path)) as ckpt:
        handle = ckpt.tree("m")["b"]
        assert np.array_equal(handle[key], np.arange(3)[key])
        assert np.array_equal(handle.read_region((1,), (2,), verify=False), [1, 2])


def test_region_helpers() -> None:
    assert intersect(((0, 0), (2, 2)), ((2, 0), (2, 2))) is None
    assert slices_to_region((6, 8), (slice(None, None, -1), 3)) == ((0, 3), (6, 1))
    check_tiling((6, 8), [(s, n) for _, s, n in QUARTERS])
    with pytest.raises(ArrayLayoutError):
        check_tiling((6, 8), [(s, n) for _, s, n in QUARTERS[:2]])
    with pytest.raises(IndexError):
        slices_to_region((6, 8), 6)


def test_the_overlap_check_is_not_quadratic_for_a_grid() -> None:
    """65,536 shards of a 256 x 256 grid tile their array; one overlap among them is found."""
    regions = [((i, j), (1, 1)) for i in range(256) for j in range(256)]
    check_tiling((256, 256), regions)
    regions[-1] = ((254, 254), (2, 2))
    with pytest.raises(ArrayLayoutError) as info:
        check_tiling((256, 256), regions)
    assert info.value.rule == "R-SHD-9"


def test_msgpack_of_the_builder_is_what_the_spec_shows() -> None:
    files = DataFiles()
    node = files.sharded(np.arange(2, dtype=np.uint8), [("data.bin", (0,), (2,))])
    assert msgpack.packb(node)[:3] == b"\x94\xc7\x00"  # fixarray(4), tag marker c7 00 0a
    assert msgpack.packb(node)[3] == 10


def test_the_v2_spec_worked_example_shows_the_bytes_the_builder_writes(tmp_path: Path) -> None:
    import re

    files = DataFiles()
    array = np.arange(8, dtype=np.float32).reshape(2, 4)
    node = files.sharded(array, [(R0, (0, 0), (1, 4)), (R1, (1, 0), (1, 4))])
    path = write_checkpoint(tmp_path / "c", {"model": ({"w": node}, files)})
    text = (Path(__file__).resolve().parents[2] / "spec" / "opencheckpoint-v2.md").read_text(encoding="utf-8")
    block = text.split("`components/model/tree.msgpack` (91 bytes)")[1].split("```")[1]
    hex_part = "\n".join(line.strip().split("  ")[0] for line in block.splitlines())  # comments after 2 spaces
    shown = "".join(re.findall(r"\b[0-9a-f]{2}\b", hex_part))
    document = (path / "components/model/tree.msgpack").read_bytes()
    assert shown == document.hex()
    record = json.loads((path / "manifest.json").read_bytes())["components"]["model"]
    example = json.loads(text.split("<!-- schema: component -->\n```json\n")[1].split("```")[0])
    assert record == example
    with open_checkpoint(path) as ckpt:
        assert ckpt.tree("model")["w"].read_region((1, 0), (1, 4)).tolist() == [[4, 5, 6, 7]]


@pytest.mark.parametrize("seed", range(8))
def test_the_corner_sum_the_sweep_and_a_cell_count_agree_on_tilings(seed: int) -> None:
    """tiles() (corner sums, and its sweep fallback) against counting the covers of every cell."""
    from opencheckpoint.rules import tiling

    rng = np.random.default_rng(seed)
    shape = (4, 5, 3)
    boxes = [((0, 0, 0), shape)]
    while len(boxes) < 12:  # a random guillotine tiling: cut one box in two
        i, axis = int(rng.integers(len(boxes))), int(rng.integers(3))
        low, high = boxes[i]
        if high[axis] - low[axis] > 1:
            cut = int(rng.integers(low[axis] + 1, high[axis]))
            boxes[i] = (low, (*high[:axis], cut, *high[axis + 1:]))
            boxes.append(((*low[:axis], cut, *low[axis + 1:]), high))
    starts = np.array([b[0] for b in boxes])
    sizes = np.array([b[1] for b in boxes]) - starts
    if seed % 4 == 1:  # a gap
        sizes[0, np.argmax(sizes[0])] -= 1
    elif seed % 4 == 2:  # an overlap (and, elsewhere, a gap of the same count)
        starts[1] = starts[0]
    elif seed % 4 == 3:  # an overlap past the shape's count
        sizes = np.vstack([sizes, [[1, 1, 1]]])
        starts = np.vstack([starts, starts[:1]])
        sizes[-1] = 1
    counts = np.zeros(shape, dtype=int)
    for low, size in zip(starts, sizes, strict=True):
        counts[tuple(slice(a, a + n) for a, n in zip(low, size, strict=True))] += 1
    tiled = bool(np.all(counts == 1))
    assert tiled == (seed % 4 == 0)
    assert tiling.tiles(shape, starts, sizes) is tiled
    assert (tiling._sweep_overlap(starts, sizes) is None) == bool(np.all(counts <= 1))
