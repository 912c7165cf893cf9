"""Many tiny arrays: the bulk paths (decode, layout check, runs of small arrays) keep every check and its order.

The reader checks the array nodes of a document column by column and reads
runs of small arrays in bulk (``tree/fast.py``, ``tree/layout.py``,
``array_runs.py``); a defect among thousands of tiny arrays must still be
found, with the rule and the array of the per-node checks.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import msgpack
import numpy as np
import pytest

from opencheckpoint import ArrayLayoutError, Checkpoint, IntegrityError, open_checkpoint, read_component
from opencheckpoint.format.errors import CheckpointError
from opencheckpoint.tree.decode import decode_tree, exact_decode
from opencheckpoint.tree.layout import check_layout, layout_errors, layout_is_valid
from opencheckpoint.tree.nodes import ArrayRef

COUNT = 2000


def tiny_state() -> dict[str, np.ndarray]:
    state = {f"a{i:04d}": np.full(3 + i % 5, i, dtype=np.float32) for i in range(COUNT)}
    state["flags"] = np.array([True, False, True])
    state["late"] = np.arange(4, dtype=np.int16)
    return state


def corrupt(path: Path, name: str, byte: int, value: int | None = None) -> None:
    data_file = path / "components" / "s" / "data.bin"
    with open_checkpoint(path) as reader:
        ref = next(r for r in reader.decoded_layout("s")[0].arrays if r.path == f"$.{name}")
    raw = bytearray(data_file.read_bytes())
    raw[ref.offset + byte] = raw[ref.offset + byte] ^ 0x01 if value is None else value
    data_file.write_bytes(bytes(raw))


def test_many_tiny_arrays_come_back_exactly(tmp_path: Path) -> None:
    state = tiny_state()
    loaded = read_component(Checkpoint(s=state).save(tmp_path / "c"), "s")
    assert list(loaded) == list(state)
    for key, array in state.items():
        assert loaded[key].dtype == array.dtype and loaded[key].tobytes() == array.tobytes()
        assert loaded[key].flags.writeable


@pytest.mark.parametrize("victim", ["a0000", "a1000", "a1999", "late"])
def test_one_corrupt_crc_among_many_tiny_arrays_names_that_array(tmp_path: Path, victim: str) -> None:
    path = Checkpoint(s=tiny_state()).save(tmp_path / "c")
    corrupt(path, victim, 0)
    with pytest.raises(IntegrityError) as info:
        read_component(path, "s")
    assert (info.value.field, info.value.rule) == (f"$.{victim}", "R-ARR-14")
    assert "data.bin" in str(info.value.file)


def test_the_first_defect_in_document_order_is_reported(tmp_path: Path) -> None:
    path = Checkpoint(s=tiny_state()).save(tmp_path / "c")
    corrupt(path, "a1500", 0)
    corrupt(path, "a0700", 0)
    with pytest.raises(IntegrityError) as info:
        read_component(path, "s")
    assert info.value.field == "$.a0700"


def test_a_bad_bool_byte_after_the_tiny_arrays_is_r_arr_13_when_its_crc_matches(tmp_path: Path) -> None:
    state = tiny_state()
    state["flags"] = np.frombuffer(b"\x01\x02\x00", dtype=np.uint8).view(bool)  # written as 01 01 00
    path = Checkpoint(s=state).save(tmp_path / "c")
    corrupt(path, "flags", 1, 2)  # then its CRC-32C no longer matches: R-ARR-14 comes first
    with pytest.raises(IntegrityError) as info:
        read_component(path, "s")
    assert (info.value.field, info.value.rule) == ("$.flags", "R-ARR-14")


def refs(count: int = COUNT) -> list[ArrayRef]:
    return [ArrayRef("float32", (16,), 64 * i, 64, i, f"$.a{i}") for i in range(count)]


@pytest.mark.parametrize(
    ("change", "rule", "field"),
    [
        (lambda r: ArrayRef(r.dtype, r.shape, r.offset, 60, r.crc32c, r.where), "R-ARR-4", "$.a1234"),
        (lambda r: ArrayRef(r.dtype, r.shape, r.offset + 32, r.nbytes, r.crc32c, r.where), "R-ARR-5", "$.a1234"),
        (lambda r: ArrayRef(r.dtype, (0,), 0, 0, 7, r.where), "R-ARR-7", "$.a1234"),
        # $.a1234 now covers the next array's bytes: the overlap is named at the array it runs into.
        (lambda r: ArrayRef(r.dtype, (32,), r.offset, 128, r.crc32c, r.where), "R-ARR-9", "$.a1235"),
    ],
)
def test_a_layout_violation_among_many_small_arrays_keeps_its_rule(
        change: Callable[[ArrayRef], ArrayRef], rule: str, field: str) -> None:
    arrays = refs()
    arrays[1234] = change(arrays[1234])
    assert not layout_is_valid(arrays, 64 * COUNT)
    with pytest.raises(ArrayLayoutError) as info:
        check_layout(arrays, 64 * COUNT)
    assert (info.value.rule, info.value.field) == (rule, field)


def test_aliases_among_many_small_arrays_must_agree_on_the_crc() -> None:
    arrays = refs()
    alias = ArrayRef("float32", (16,), 64 * 10, 64, 10, "$.tied")
    assert layout_is_valid([*arrays, alias], 64 * COUNT)
    bad = ArrayRef("float32", (16,), 64 * 10, 64, 11, "$.tied")
    assert not layout_is_valid([*arrays, bad], 64 * COUNT)
    assert [(e.rule, e.field) for e in layout_errors([*arrays, bad], 64 * COUNT)] == [("R-ARR-10", "$.tied")]
    assert not layout_is_valid(arrays, 64 * COUNT + 64)  # the arrays must end the file (R-ARR-11)


def test_tied_arrays_among_many_tiny_ones_stay_one_object(tmp_path: Path) -> None:
    state = tiny_state()
    state["tied"] = state["a0042"]
    loaded = read_component(Checkpoint(s=state).save(tmp_path / "c"), "s")
    assert loaded["tied"] is loaded["a0042"] and loaded["a0042"].tolist() == state["a0042"].tolist()


def node(i: int, shape: list[object]) -> list[object]:
    return [msgpack.ExtType(6, b""), "uint8", shape, 64 * i, 1, 0]


@pytest.mark.parametrize("bad", [[True], [-1], "x", [1.0]])
def test_a_bad_node_among_many_gets_the_exact_parsers_verdict(bad: object) -> None:
    doc = {f"a{i}": node(i, [1]) for i in range(COUNT)}
    doc["a777"] = node(777, bad)  # type: ignore[arg-type]
    data = msgpack.packb(doc, use_bin_type=True)
    with pytest.raises(CheckpointError) as fast:
        decode_tree(data)
    with pytest.raises(CheckpointError) as exact:
        exact_decode(data)
    assert (type(fast.value), fast.value.rule, fast.value.field) == (
        type(exact.value), exact.value.rule, exact.value.field)
    assert "a777" in str(fast.value.field)
