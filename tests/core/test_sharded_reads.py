"""Sharded-array reads that an adversarial review broke: empty shard lists, what a handle keeps, region keys.

Each test names the defect it guards against: a tag 10 node without shard
records (R-SHD-11), unverified or later-changed bytes served to a verified
call (R-CHK-11, R-SHD-15), a writeable kept array, and the minor cases
(R-LIM-20 on a truncated document, the data file a message names, region
arguments, huge zero-element shapes).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from opencheckpoint import open_checkpoint, read_component, validate
from opencheckpoint.format.errors import ArrayLayoutError, IncompatibleComponent, IntegrityError, LimitExceeded
from opencheckpoint.format.integrity import crc32c_of, format_crc32c
from opencheckpoint.format.manifest import serialize_manifest
from opencheckpoint.testing.sharded import SHARDED, DataFiles, write_checkpoint

A = np.arange(8, dtype=np.float32).reshape(2, 4)
R0, R1 = "shards/rank-00000.bin", "shards/rank-00001.bin"


def two_arrays(tmp_path: Path, *, corrupt: bool = False) -> Path:
    """``x``: A sharded by rows over two rank files; ``y``: A as a tag 6 array; ``corrupt``: both CRCs off."""
    files = DataFiles()
    x = files.sharded(A, [(R0, (0, 0), (1, 4)), (R1, (1, 0), (1, 4))])
    y = files.array(A)
    if corrupt:
        x[3][1][5] ^= 1
        y[-1] ^= 1
    return write_checkpoint(tmp_path / "c", {"m": ({"x": x, "y": y}, files)})


def only(tmp_path: Path, node: list[Any]) -> Path:
    return write_checkpoint(tmp_path / "c", {"m": ({"x": node}, DataFiles())})


@pytest.mark.parametrize(("dtype", "shape"), [("int64", [3]), ("float32", []), ("uint8", [2**31, 2**31])])
def test_a_sharded_array_without_shard_records_is_a_gap(tmp_path: Path, dtype: str, shape: list[int]) -> None:
    path = only(tmp_path, [SHARDED, dtype, shape, []])  # the huge shape fails before anything is allocated
    with pytest.raises(ArrayLayoutError) as info:
        read_component(path, "m")
    assert info.value.rule == "R-SHD-11" and info.value.field == "$.x"
    report = validate(path)
    assert [e.rule for e in report.errors] == ["R-SHD-11"]
    with pytest.raises(ArrayLayoutError), open_checkpoint(path) as ckpt:
        ckpt.tree("m")


@pytest.mark.parametrize("key", ["x", "y"])
def test_an_unverified_read_never_serves_a_verified_call(tmp_path: Path, key: str) -> None:
    with open_checkpoint(two_arrays(tmp_path, corrupt=True)) as ckpt:
        handle = ckpt.tree("m")[key]
        assert handle.read(verify=False).shape == (2, 4)
        for verified in (handle.read, lambda: np.asarray(handle), lambda: handle[1], lambda: handle.read()[1]):
            with pytest.raises(IntegrityError) as info:
                verified()
            assert info.value.rule == "R-ARR-14"


@pytest.mark.parametrize(("key", "rel"), [("x", R0), ("y", "data.bin")])
def test_bytes_changed_after_a_verified_read_never_come_back_unverified(tmp_path: Path, key: str, rel: str) -> None:
    path = two_arrays(tmp_path)
    with open_checkpoint(path) as ckpt:
        handle = ckpt.tree("m")[key]
        assert handle[0, 0] == 0
        with open(path / "components/m" / rel, "r+b") as file:  # element (0, 2) changes in place
            file.seek(8)
            file.write(np.float32(-777).tobytes())
        assert handle[0, 2] == 2 and handle.read()[0, 2] == 2 and handle.read_region((0, 2), (1, 1))[0, 0] == 2


def test_read_returns_a_read_only_array_that_later_reads_do_not_share_edits_with(tmp_path: Path) -> None:
    with open_checkpoint(two_arrays(tmp_path)) as ckpt:
        for handle, verify in [(ckpt.tree("m")[key], verify) for key in "xy" for verify in (False, True)]:
            array = handle.read(verify=verify)
            assert not array.flags.writeable  # as for a tag 6 array (y)
            with pytest.raises(ValueError):
                array[1, 1] = 1234
            region = handle.read_region((0, 0), (2, 4), verify=verify)
            region[1, 1] = 1234  # a region read is a fresh array: edits stay in it
            assert handle[1, 1] == 5 and np.asarray(handle)[1, 1] == 5 and handle.read()[1, 1] == 5


def test_the_shard_count_is_checked_on_the_declared_count_of_a_truncated_document(tmp_path: Path) -> None:
    files = DataFiles()
    path = write_checkpoint(tmp_path / "c", {"m": ({"x": files.sharded(np.arange(4, dtype=np.uint8),
                                                                       [("data.bin", (0,), (4,))])}, files)})
    # {"x": tag 10 [uint8, [1], shards]} whose shards array declares 65,537 records and ends there
    tree = bytes([0x81, 0xA1, 0x78, 0x94, 0xC7, 0x00, 0x0A, 0xA5]) + b"uint8" + bytes([0x91, 0x01, 0xDD, 0, 1, 0, 1])
    (path / "components/m/tree.msgpack").write_bytes(tree)
    body = json.loads((path / "manifest.json").read_bytes())
    body.pop("manifest_crc32c")
    body["components"]["m"]["files"]["tree.msgpack"] = {"size": len(tree), "crc32c": format_crc32c(crc32c_of(tree))}
    (path / "manifest.json").write_bytes(serialize_manifest(body))
    with pytest.raises(LimitExceeded) as info:
        read_component(path, "m")
    assert info.value.rule == "R-LIM-20"


def test_a_layout_error_in_a_rank_file_names_that_file(tmp_path: Path) -> None:
    files = DataFiles()
    _, _, crc = files.put(R0, np.arange(4, dtype=np.float32).tobytes())
    path = write_checkpoint(tmp_path / "c", {"m": ({"x": [SHARDED, "float32", [8], [[R0, [0], [8], 0, 32, crc]]]},
                                                   files)})
    with pytest.raises(ArrayLayoutError) as info:
        read_component(path, "m")
    assert info.value.rule == "R-ARR-8" and info.value.file == f"components/m/{R0}"
    assert R0 in info.value.message and "data.bin" not in info.value.message


@pytest.mark.parametrize("key", ["x", "y"])
def test_region_starts_must_be_ints_and_newaxis_indexes_like_numpy(tmp_path: Path, key: str) -> None:
    with open_checkpoint(two_arrays(tmp_path)) as ckpt:
        handle = ckpt.tree("m")[key]
        for start in ((0.5, 0), (True, 0), (np.float64(1), 0)):
            with pytest.raises(TypeError, match="must be ints"):
                handle.read_region(start, (1, 1))
        with pytest.raises(TypeError, match="must be ints"):
            handle.read_region((0, 0), (1.0, 1))
        assert handle.read_region((np.int64(1), 0), (1, 1)).tolist() == [[4.0]]
        for index in (None, (None, 1), (Ellipsis, None), (1, None, slice(None, None, -1)), (None, Ellipsis, None)):
            assert np.array_equal(handle[index], A[index])


def test_a_huge_zero_element_sharded_array_is_checked_as_a_tag_6_one(tmp_path: Path) -> None:
    path = only(tmp_path, [SHARDED, "float64", [2**62, 0, 2**62], []])
    report = validate(path)
    assert [(e.error, e.field) for e in report.errors] == [("IncompatibleComponent", "$.x")]
    with pytest.raises(IncompatibleComponent):
        read_component(path, "m")


def test_reversing_a_huge_zero_element_array_returns_the_empty_result(tmp_path: Path) -> None:
    path = only(tmp_path, [SHARDED, "float64", [2**63 - 1, 0], []])
    assert validate(path).ok
    with open_checkpoint(path) as ckpt:
        handle = ckpt.tree("m")["x"]
        for index, shape in [(slice(None, None, -1), (2**63 - 1, 0)), (-1, (0,)),
                             ((slice(2, 0, -1), slice(None, None, -1)), (2, 0))]:
            result = handle[index]
            assert result.shape == shape and result.size == 0 and result.dtype == np.float64
