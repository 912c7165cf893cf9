"""The compiled save side (``tree/_csave.c``, ``tree/_cpack.c``, through ``tree/ctree.py``) does what Python does.

``compiled_pack`` gives ``msgpack.packb``'s bytes for every document of the
writer's types (hypothesis, the size and integer boundaries of every msgpack
form, every conformance case's ``tree.msgpack``) and leaves everything else to
msgpack (None), so errors stay msgpack's (R-TREE-9). ``gather_run`` copies a
run with its padding, its CRC-32Cs and the file's, stops where it must and
never writes past its buffer. ``plan_run`` / ``plan_dict`` change nothing when
they refuse. A save writes the same bytes with the extension on and off, in
both forms (``tests/perf/test_compiled_tree.py`` holds the directory states).
"""

from __future__ import annotations

import enum
from collections import OrderedDict, namedtuple
from pathlib import Path
from typing import Any

import ml_dtypes
import msgpack
import numpy as np
import pytest
from budget import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_compiled_tree import _states

from opencheckpoint import Checkpoint
from opencheckpoint.format.errors import CheckpointError
from opencheckpoint.format.integrity import crc32c
from opencheckpoint.tree import ctree
from opencheckpoint.tree.datafile import _PENDING_BYTES, DataFilePlan, _Planned
from opencheckpoint.tree.encode import TreePlan
from opencheckpoint.tree.plan_runs import name_of

CASES = Path(__file__).parents[2] / "conformance" / "cases"

pytestmark = pytest.mark.skipif(not ctree.AVAILABLE, reason="the C extension is not built or is turned off")


def packb(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True, strict_types=False)  # type: ignore[no-any-return]


def same_as_msgpack(value: Any) -> None:
    assert ctree.compiled_pack(value) == packb(value)


text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
INTS = [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1, -1, -32, -33, -128,
        -129, -32768, -32769, -(2**31), -(2**31) - 1, -(2**63)]
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.sampled_from(INTS), st.floats(allow_nan=True),
    text, st.binary(max_size=300), st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=20)))
documents = st.recursive(scalars, lambda children: st.one_of(
    st.lists(children, max_size=20), st.lists(children, max_size=5).map(tuple),
    st.dictionaries(st.one_of(text, st.integers(-(2**63), 2**64 - 1)), children, max_size=20)), max_leaves=80)


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents)
def test_documents_pack_to_msgpacks_bytes(value: Any) -> None:
    same_as_msgpack(value)


@pytest.mark.parametrize("size", [0, 1, 2, 4, 8, 15, 16, 17, 31, 32, 255, 256, 65535, 65536])
def test_every_length_form_packs_to_msgpacks_bytes(size: int) -> None:
    same_as_msgpack("x" * size)
    same_as_msgpack("é" * size)  # two UTF-8 bytes per character: the header counts bytes
    same_as_msgpack(b"\x01" * size)
    same_as_msgpack(list(range(size)))
    same_as_msgpack(tuple([None] * size))
    same_as_msgpack({f"k{i}": i for i in range(size)})
    same_as_msgpack(msgpack.ExtType(6, b"\x02" * size))


def test_every_int_boundary_and_float_packs_to_msgpacks_bytes() -> None:
    same_as_msgpack([*INTS, *(i + 1 for i in INTS if i < 2**64 - 1), *(i - 1 for i in INTS if i > -(2**63))])
    same_as_msgpack({i: -i for i in INTS if i < 2**63})
    same_as_msgpack([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e308, 5e-324])


class Color(enum.IntEnum):
    RED = 1


@pytest.mark.parametrize("value", [
    OrderedDict(a=1), bytearray(b"x"), memoryview(b"x"), np.float32(1.0), Color.RED, 2**64, -(2**63) - 1,
    "\ud800", namedtuple("P", "x")(1), {"a": [1, {"b": object()}]}, [[[]]] * 1 + [[1] * 3, 2**70],
], ids=["OrderedDict", "bytearray", "memoryview", "numpy scalar", "IntEnum", "2**64", "below int64", "surrogate",
        "namedtuple", "unknown object", "big int deep in a list"])
def test_anything_else_is_left_to_msgpack(value: Any) -> None:
    assert ctree.compiled_pack(value) is None
    assert ctree.compiled_pack({"k": [value]}) is None  # wherever it is in the document


def test_nesting_beyond_msgpacks_default_limit_is_left_to_msgpack() -> None:
    value: Any = 1
    for depth in range(1, 3001):
        value = [value]
        if depth in (511, 512, 3000):  # msgpack's DEFAULT_RECURSE_LIMIT is 511; deeper, its own rule decides
            packed = ctree.compiled_pack(value)
            assert packed == packb(value) if depth == 511 else packed is None
    with pytest.raises(ValueError):
        packb(value)


def test_a_str_that_is_not_utf_8_raises_the_same_error_on_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    errors = []
    for available in (True, False):
        monkeypatch.setattr(ctree, "AVAILABLE", available)
        with pytest.raises(CheckpointError) as caught:
            TreePlan({"w": np.ones(2), "name": "x\udcff"}).pack()
        errors.append((type(caught.value).__name__, caught.value.rule, str(caught.value)))
    assert errors[0] == errors[1] and errors[0][1] == "R-TREE-9"


def test_every_conformance_document_repacks_to_msgpacks_bytes() -> None:
    repacked = 0
    for path in sorted(CASES.rglob("tree.msgpack")):
        try:
            value = msgpack.unpackb(path.read_bytes(), strict_map_key=False)
        except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
            continue  # not a msgpack document (a case of a broken file)
        packed = ctree.compiled_pack(value)
        assert packed is None or packed == packb(value), path
        repacked += packed is not None
    assert repacked > 50


def _plan(arrays: list[np.ndarray]) -> DataFilePlan:
    plan = DataFilePlan()
    for array in arrays:
        extent = plan.extent_for(array, array.nbytes)
        extent.nodes.append([None] * 6)
    return plan


def _expected(plan: DataFilePlan, stop: int) -> bytes:
    out, position = bytearray(), 0
    for extent in plan.extents[:stop]:
        out += bytes(extent.offset - position) + extent.buffer.tobytes()
        position = extent.offset + extent.nbytes
    return bytes(out)


def test_gather_run_copies_a_run_with_its_padding_and_checksums_and_stops_before_a_big_extent() -> None:
    small = [np.arange(n, dtype=np.uint8) for n in (1, 63, 64, 65, 1000)]
    plan = _plan([*small, np.ones(1 << 16, np.uint8), np.ones(3, np.float32)])
    buffer = bytearray(b"\xee" * (1 << 17))
    done = ctree.gather_run(plan.extents, 0, 0, _Planned, buffer, 5, 123)
    assert done is not None
    index, position, fill, file_crc = done
    expected = _expected(plan, len(small))
    assert (index, position, fill) == (len(small), plan.extents[len(small) - 1].offset + 1000, 5 + len(expected))
    assert buffer[5:fill] == expected and buffer[:5] == b"\xee" * 5 and buffer[fill] == 0xEE
    assert file_crc == crc32c(expected, 123)
    assert [extent.nodes[0][5] for extent in plan.extents[:index]] == [crc32c(array) for array in small]
    assert plan.extents[index].nodes[0][5] is None  # the big extent is the Python code's
    again = ctree.gather_run(plan.extents, index, position, _Planned, buffer, fill, file_crc)
    assert again is not None and again[0] == index  # nothing gathered from a big extent


def test_gather_run_stops_at_a_source_without_a_buffer_and_after_a_mebibyte() -> None:
    plan = _plan([np.ones(2, np.float32), np.ones(2, ml_dtypes.bfloat16), np.ones(2, np.float32)])
    buffer = bytearray(1 << 21)
    done = ctree.gather_run(plan.extents, 0, 0, _Planned, buffer, 0, 0)
    assert done is not None and done[0] == 3 and buffer[: done[2]] == _expected(plan, 3)  # raw bytes of bfloat16
    plan.extents[1].array = [1.0, 2.0]  # no buffer (as a FileArray): the Python code takes it from there
    done = ctree.gather_run(plan.extents, 0, 0, _Planned, buffer, 0, 0)
    assert done is not None and done[0] == 1
    plan = _plan([np.full(256, i, np.float32) for i in range(2000)])  # 1 KiB each
    done = ctree.gather_run(plan.extents, 0, 0, _Planned, buffer, 0, 0)
    assert done is not None and done[0] == _PENDING_BYTES // 1024 and done[2] == _PENDING_BYTES


def test_gather_run_never_writes_past_its_buffer_or_trusts_its_arguments() -> None:
    plan = _plan([np.ones(100, np.uint8), np.ones(100, np.uint8)])
    buffer = bytearray(150)
    done = ctree.gather_run(plan.extents, 0, 0, _Planned, buffer, 0, 0)
    assert done is not None and done[:3] == (1, 100, 100)  # the second (after padding) does not fit
    assert plan.extents[1].nodes[0][5] is None
    assert ctree.gather_run(plan.extents, 0, 0, _Planned, bytearray(10), 0, 0) == (0, 0, 0, 0)
    assert ctree.gather_run(plan.extents, 0, 65, _Planned, buffer, 0, 0)[0] == 0  # an offset behind the position
    assert ctree.gather_run([object(), plan.extents[0]], 0, 0, _Planned, buffer, 0, 0)[0] == 0  # not a _Planned
    broken = _Planned(np.ones(4, np.uint8), 0, 4)
    broken.nodes.append([1, 2])  # a node too short for its checksum
    assert ctree.gather_run([broken], 0, 0, _Planned, buffer, 0, 0)[0] == 0
    mismatched = _Planned(np.ones(4, np.uint8), 0, 5)  # nbytes is not the buffer's length
    assert ctree.gather_run([mismatched], 0, 0, _Planned, buffer, 0, 0)[0] == 0
    for index, fill in ((3, 0), (-1, 0), (0, 151), (0, -1)):
        with pytest.raises(ValueError):
            ctree.gather_run(plan.extents, index, 0, _Planned, buffer, fill, 0)


@pytest.mark.parametrize("arrays", [
    [np.ones(3), np.zeros(2), np.array([True])],  # a bool array (stored canonicalised, one at a time)
    [np.ones(3), np.ones(3)[1:]],  # a view
    [np.ones(3), np.ones(2, ">f4")],  # big-endian (refused by the per-array path, which names it)
    [np.ones(3), np.zeros((2, 0))],  # empty
], ids=["bool", "view", "big-endian", "empty"])
def test_a_refused_run_changes_nothing(arrays: list[np.ndarray]) -> None:
    out = {"before": 1}
    keys = [f"k{i}" for i in range(len(arrays))]
    assert ctree.plan_run(keys, arrays, 0, None, _Planned, name_of, out) is None
    assert ctree.plan_dict(dict(zip(keys, arrays, strict=True)), 0, None, _Planned, name_of, out) is None
    assert out == {"before": 1}


def test_an_array_twice_or_a_mixed_dict_is_not_planned_in_c() -> None:
    array, out = np.ones(3), dict[str, Any]()
    assert ctree.plan_run(["a", "b"], [array, array], 0, None, _Planned, name_of, out) is None
    assert ctree.plan_dict({"a": array, "b": array}, 0, None, _Planned, name_of, out) is None
    assert ctree.plan_dict({"a": array, 1: np.ones(2)}, 0, None, _Planned, name_of, out) is None
    assert ctree.plan_dict({"a": array, "b": [np.ones(2)]}, 0, None, _Planned, name_of, out) is None
    assert ctree.plan_dict({}, 0, None, _Planned, name_of, out) is None and out == {}


MORE_STATES: dict[str, Any] = {
    "an array twice in one dict": {"a": np.ones(3), "b": np.zeros(4)} | {"c": (shared := np.arange(5.0)), "d": shared},
    "a run after an earlier alias": {"l": [(early := np.arange(6.0))], "d": {"x": np.ones(2), "y": early}},
    "big arrays between runs": {"s": np.ones(3), "big": np.arange(40_000.0), "t": np.ones(5), "big2": np.ones(70_000)},
    "more than a mebibyte of runs": {f"a{i}": np.full(300, i, np.float32) for i in range(1200)},
}


@pytest.mark.parametrize("form", ["directory", "archive"])
@pytest.mark.parametrize("name", [*_states(), *MORE_STATES])
def test_both_paths_write_the_same_checkpoint(name: str, form: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    state = {**_states(), **MORE_STATES}[name]
    written = []
    for available in (True, False):
        monkeypatch.setattr(ctree, "AVAILABLE", available)
        path = tmp_path / f"c{available}"
        try:
            Checkpoint(s=state).save(path, format=form, checkpoint_id="same", created_at="2026-01-01T00:00:00Z")
        except CheckpointError as exc:
            written.append(("refused", type(exc).__name__, exc.rule, exc.field, str(exc)))
            continue
        files = [path] if form == "archive" else sorted(path.rglob("*"))
        written.append([(file.relative_to(tmp_path / f"c{available}").as_posix(), file.read_bytes())
                        for file in files if file.is_file()])
    assert written[0] == written[1]


@pytest.mark.parametrize("name", [name for name in [*_states(), *MORE_STATES] if name != "big-endian"])
def test_the_aligned_size_is_the_sum_of_the_aligned_extents(name: str) -> None:
    plan = TreePlan({**_states(), **MORE_STATES}[name])
    assert plan.data.aligned_size == sum(-(-extent.nbytes // 64) * 64 for extent in plan.extents)
