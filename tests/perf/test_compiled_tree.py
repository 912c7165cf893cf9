"""The compiled fast path (``tree/_ctree.c`` through ``tree/ctree.py``) gives what the Python paths give.

``compiled_decode`` may accept only what the exact parser accepts, with an
identical tree; on any doubt the Python paths decide. Checked on writer output
(hypothesis, the vocabulary of ``test_decode_fast_path``), on mutations of it,
on every frozen conformance case's ``tree.msgpack``, and on the non-canonical
encodings the Python fast path must refuse. Through the public API, a load
with the extension and a load with it forced off give the same arrays and the
same errors (class, rule, field, message). Under ``make`` the extension must
be built and used (``OPENCHECKPOINT_REQUIRE_COMPILED``).
"""

from __future__ import annotations

import importlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from budget import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_decode_fast_path import NON_CANONICAL, document, outcome, trees
from test_tiny_arrays import corrupt, tiny_state

from opencheckpoint import Checkpoint, read_component
from opencheckpoint.format.errors import CheckpointError
from opencheckpoint.format.integrity import crc32c
from opencheckpoint.tree import ctree
from opencheckpoint.tree.decode import _Doubt, decode_tree, exact_decode, fast_decode

CASES = Path(__file__).parents[2] / "conformance" / "cases"

needs_extension = pytest.mark.skipif(not ctree.AVAILABLE, reason="the C extension is not built or is turned off")


def compiled_outcome(data: bytes) -> Any:
    """The compiled path's verdict: ``doubt``, or the tree as :func:`outcome` renders it."""
    try:
        return outcome(ctree.compiled_decode, data)
    except _Doubt:
        return "doubt"


def test_the_extension_is_built_and_used_where_make_requires_it() -> None:
    if os.environ.get(ctree.REQUIRE_ENV) != "1":
        pytest.skip(f"{ctree.REQUIRE_ENV} is not set: the pure-Python fallback is allowed here")
    assert ctree._ctree is not None, "opencheckpoint.tree._ctree was not built: is a C compiler installed?"
    assert ctree.AVAILABLE, f"{ctree.PURE_PYTHON_ENV}=1 turns the extension off, but make requires it"
    decoded = decode_tree(document({"w": np.zeros(3, np.float32)}))
    assert decoded.columns is not None  # only the compiled decoder gives columns


def test_the_environment_turns_the_extension_off(monkeypatch: pytest.MonkeyPatch) -> None:
    data = document({"w": np.zeros(3, np.float32), "n": [1, (2.5, "x")]})
    monkeypatch.setenv(ctree.PURE_PYTHON_ENV, "1")
    try:
        importlib.reload(ctree)
        assert not ctree.AVAILABLE
        with pytest.raises(_Doubt):
            ctree.compiled_decode(data)
        fallback = decode_tree(data)
        assert fallback.columns is None
    finally:
        monkeypatch.delenv(ctree.PURE_PYTHON_ENV)
        importlib.reload(ctree)
    assert outcome(decode_tree, data) == outcome(exact_decode, data) == outcome(lambda d: fallback, data)


@needs_extension
@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees)
def test_writer_output_gets_the_exact_tree(value: Any) -> None:
    data = document(value)
    verdict = compiled_outcome(data)
    if verdict == "doubt":  # big ints and PRNG keys are left to the Python fast path
        assert _has_python_only_tags(value)
        return
    assert verdict == outcome(exact_decode, data) == outcome(fast_decode, data)
    decoded = ctree.compiled_decode(data)
    if decoded.columns is not None:
        rows = np.frombuffer(decoded.columns, dtype=np.uint64).reshape(-1, 3).tolist()
        assert rows == [[ref.offset, ref.nbytes, ref.crc32c] for ref in decoded.arrays]


def _has_python_only_tags(value: Any) -> bool:
    from opencheckpoint.tree.nodes import PRNGKeyValue

    if isinstance(value, PRNGKeyValue) or (type(value) is int and not -(2**63) <= value < 2**64):
        return True
    if isinstance(value, dict):
        return any(map(_has_python_only_tags, value.values()))
    if isinstance(value, (list, tuple)):
        return any(map(_has_python_only_tags, value))
    return False


@needs_extension
@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees, st.data())
def test_mutated_documents_are_exact_or_a_doubt(value: Any, draw: st.DataObject) -> None:
    data = bytearray(document(value))
    for _ in range(draw.draw(st.integers(1, 3))):
        action = draw.draw(st.sampled_from(["flip", "truncate", "insert", "set"]))
        index = draw.draw(st.integers(0, max(0, len(data) - 1)))
        if action == "flip" and data:
            data[index] ^= draw.draw(st.integers(1, 255))
        elif action == "truncate":
            del data[index:]
        elif action == "insert":
            data.insert(index, draw.draw(st.integers(0, 255)))
        elif data:  # a byte that starts a header or a marker: lengths and tags change
            data[index] = draw.draw(st.sampled_from([0x96, 0xC7, 0xDC, 0xDE, 0xD9, 0xCF, 0xD3, 0x00, 0x06, 0xFF]))
    verdict = compiled_outcome(bytes(data))
    assert verdict == "doubt" or verdict == outcome(exact_decode, bytes(data))
    assert outcome(decode_tree, bytes(data)) == outcome(exact_decode, bytes(data))


@needs_extension
@pytest.mark.parametrize("data", list(NON_CANONICAL.values()), ids=list(NON_CANONICAL))
def test_non_canonical_or_invalid_documents_are_a_doubt(data: bytes) -> None:
    with pytest.raises(_Doubt):
        ctree.compiled_decode(data)


@needs_extension
def test_every_conformance_case_tree_is_exact_or_a_doubt() -> None:
    documents = sorted(CASES.rglob("tree.msgpack"))
    assert len(documents) > 50
    accepted = 0
    for path in documents:
        data = path.read_bytes()
        verdict = compiled_outcome(data)
        if verdict != "doubt":
            accepted += 1
            assert verdict == outcome(exact_decode, data), path
    assert accepted > len(documents) // 2  # the writers' documents take the compiled path


@needs_extension
def test_nesting_is_bounded_before_the_recursion_goes_deeper() -> None:
    assert compiled_outcome(b"\x91" * 128 + b"\x01") == outcome(exact_decode, b"\x91" * 128 + b"\x01")
    for data in (b"\x91" * 129 + b"\x01", b"\x81\xa1k" * 100_000 + b"\x01", b"\xdd\xff\xff\xff\xff"):
        assert compiled_outcome(data) == "doubt"


@needs_extension
@pytest.mark.parametrize("node", [
    ["float32", [3], 0, 8, 0],  # nbytes is not shape x itemsize (R-ARR-4)
    ["float32", [1] * 65, 0, 4, 0],  # 65 dimensions (R-LIM-13)
    ["uint8", [2**62, 4, 0], 0, 0, 0],  # an empty array whose running product reaches 2**63 (R-LIM-15)
])
def test_no_columns_when_a_node_breaks_a_size_rule(node: list[Any]) -> None:
    import msgpack

    data = msgpack.packb({"a": [msgpack.ExtType(6, b""), *node]}, use_bin_type=True)
    decoded = ctree.compiled_decode(data)
    assert decoded.columns is None  # step 15 then checks node by node and names the rule
    assert outcome(lambda d: decoded, data) == outcome(exact_decode, data)


@needs_extension
def test_crc_mismatch_agrees_with_the_crc32c_package() -> None:
    rng = np.random.default_rng(5)
    buffer = rng.integers(0, 256, 10_000, dtype=np.uint8).tobytes()
    extents = [(64 * i, n) for i, n in enumerate([0, 1, 7, 8, 9, 63, 64, 65, 1000, 8])]
    rows = [[offset, n, crc32c(buffer[offset:offset + n])] for offset, n in extents]
    columns = np.array(rows, dtype=np.uint64).tobytes()
    if ctree.crc_mismatch(buffer, columns, 0, len(rows), 0) is None:
        pytest.skip("this CPU has no CRC-32C instruction: the crc32c package computes the checksums")
    assert ctree.crc_mismatch(buffer, columns, 0, len(rows), 0) == -1
    assert ctree.crc_mismatch(buffer[64:], columns, 1, len(rows) - 1, 64) == -1
    rows[6][2] ^= 1
    columns = np.array(rows, dtype=np.uint64).tobytes()
    assert ctree.crc_mismatch(buffer, columns, 0, len(rows), 0) == 6
    assert ctree.crc_mismatch(buffer, columns, 2, 4, 0) == -1
    with pytest.raises(ValueError):
        ctree.crc_mismatch(buffer[:100], columns, 0, len(rows), 0)  # extents past the buffer's end
    with pytest.raises(ValueError):
        ctree.crc_mismatch(buffer, columns, 0, len(rows) + 1, 0)


@pytest.fixture(params=["compiled", "python"])
def decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Loads through the extension, or through the pure-Python paths with the extension turned off."""
    if request.param == "compiled" and not ctree.AVAILABLE:
        pytest.skip("the C extension is not built or is turned off")
    monkeypatch.setattr(ctree, "AVAILABLE", request.param == "compiled")
    yield request.param


def _load(path: Path) -> Any:
    try:
        loaded = read_component(path, "s")
    except CheckpointError as exc:
        return ("error", type(exc).__name__, exc.rule, exc.field, str(exc))
    return ("ok", [(key, array.dtype.str, array.shape, array.tobytes()) for key, array in loaded.items()])


CORRUPTIONS: dict[str, tuple[str, int, int | None]] = {
    "intact": ("", 0, None),
    "crc of the first array": ("a0000", 0, None),
    "crc in the middle of a run": ("a1234", 2, None),
    "crc of the last tiny array": ("a1999", 11, None),
    "a bool byte that is not 00 or 01": ("flags", 1, 2),  # its CRC-32C fails first (R-ARR-14)
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Checkpoint(s=tiny_state()).save(tmp_path_factory.mktemp("tiny") / "c")


@pytest.mark.parametrize("case", list(CORRUPTIONS), ids=list(CORRUPTIONS))
def test_both_paths_load_the_same_arrays_and_raise_the_same_errors(
        decoder: str, case: str, saved: Path, tmp_path: Path) -> None:
    path = tmp_path / "c"
    shutil.copytree(saved, path)
    name, byte, value = CORRUPTIONS[case]
    if name:
        corrupt(path, name, byte, value)
    verdict = _load(path)
    assert (verdict[2] if verdict[0] == "error" else None) == (None if case == "intact" else "R-ARR-14")
    if decoder == "compiled":
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(ctree, "AVAILABLE", False)
            assert verdict == _load(path)


def _states() -> dict[str, Any]:
    import ml_dtypes

    base = np.arange(40, dtype=np.float32)
    mixed = {f"w{i}": np.full(3 + i % 4, i, dtype) for i, dtype in
             enumerate([np.float32, np.int8, np.float64, np.uint16, np.complex64] * 20)}
    mixed.update(bf=np.ones(5, ml_dtypes.bfloat16), f8=np.zeros(3, ml_dtypes.float8_e4m3fn),
                 flags=np.array([True, False]), empty=np.zeros((2, 0), np.float32))
    return {
        "tiny": tiny_state(),
        "mixed dtypes, bool, empty": mixed,
        "views and aliases": {"a": base, "v": base[2:10], "t": base, "s": base[::2], "b": base[10:20]},
        "runs between other values": {"x": np.ones(3), "n": 1, "y": np.ones(2), "z": np.zeros(4), "l": [np.ones(1)]},
        "big-endian": {"a": np.ones(3, np.float32), "b": np.ones(3, ">f4")},
    }


@pytest.mark.parametrize("name", list(_states()))
def test_both_paths_write_the_same_bytes(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not ctree.AVAILABLE:
        pytest.skip("the C extension is not built or is turned off")
    state = _states()[name]
    written = []
    for available in (True, False):
        monkeypatch.setattr(ctree, "AVAILABLE", available)
        path = tmp_path / f"c{available}"
        try:
            Checkpoint(s=state).save(path)
        except CheckpointError as exc:
            written.append(("refused", type(exc).__name__, exc.rule, exc.field, str(exc)))
            continue
        files = sorted((path / "components" / "s").iterdir())
        written.append([(file.name, file.read_bytes()) for file in files])
    assert written[0] == written[1]
    if name == "big-endian":
        assert written[0][0] == "refused"


def test_a_state_dict_of_tiny_arrays_is_planned_gathered_and_packed_in_c(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    if not ctree.AVAILABLE:
        pytest.skip("the C extension is not built or is turned off")
    from opencheckpoint.tree import datafile, encode

    results: dict[str, list[Any]] = {"plan": [], "gather": [], "pack": []}

    def spy(name: str, function: Any) -> Any:
        def call(*args: Any) -> Any:
            results[name].append(function(*args))
            return results[name][-1]
        return call

    monkeypatch.setattr(datafile, "compiled_plan_dict", spy("plan", datafile.compiled_plan_dict))
    monkeypatch.setattr(datafile, "compiled_gather_run", spy("gather", datafile.compiled_gather_run))
    monkeypatch.setattr(encode, "compiled_pack", spy("pack", encode.compiled_pack))
    state = tiny_state()
    del state["flags"]  # bool arrays take the per-array path (stored canonicalised)
    loaded = read_component(Checkpoint(s=state).save(tmp_path / "c"), "s")
    assert [len(made[0]) for made in results["plan"] if made is not None] == [len(state)]
    assert results["gather"] and None not in results["gather"]
    assert results["gather"][-1][0] == len(state)  # every extent gathered in C, up to the last
    assert [type(packed) for packed in results["pack"]] == [bytes]
    assert all(loaded[key].tobytes() == array.tobytes() for key, array in state.items())
