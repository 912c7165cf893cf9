"""Property tests: random trees round-trip exactly; random byte flips only ever raise CheckpointError."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from budget import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opencheckpoint import Checkpoint, CheckpointError, read_component, validate
from opencheckpoint.format.dtypes import DTYPES, dtype_name, numpy_dtype
from opencheckpoint.tree.nodes import DtypeValue, NamedTupleValue, PRNGKeyValue

SETTINGS = settings(max_examples=examples(120), deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
DTYPE_NAMES = sorted(DTYPES)


@st.composite
def arrays(draw: st.DrawFn, dtype: str | None = None) -> np.ndarray:
    name = dtype or draw(st.sampled_from(DTYPE_NAMES))
    shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
    count = math.prod(shape)
    if name == "bool":
        return np.array(draw(st.lists(st.booleans(), min_size=count, max_size=count)), dtype=bool).reshape(shape)
    raw = draw(st.binary(min_size=count * DTYPES[name][0], max_size=count * DTYPES[name][0]))
    return np.frombuffer(raw, dtype=numpy_dtype(name)).reshape(shape).copy()


@st.composite
def scalars(draw: st.DrawFn) -> np.generic:
    array = draw(arrays())
    return array.reshape(-1)[0] if array.size else np.float32(0.5)


leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.complex_numbers(allow_nan=False),
    scalars(),
    arrays(),
    st.sampled_from(DTYPE_NAMES).map(DtypeValue),
    st.builds(lambda n: PRNGKeyValue("threefry2x32", np.arange(2 * n, dtype=np.uint32).reshape(n, 2)),
              st.integers(1, 3)),
)

keys = st.one_of(st.text(max_size=6), st.integers(min_value=-(2**63), max_value=2**64 - 1))
trees = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(keys, children, max_size=4),
        st.dictionaries(st.from_regex(r"[a-z]{1,5}", fullmatch=True), children, min_size=1, max_size=3).map(
            lambda fields: NamedTupleValue("test.Point", fields)),
    ),
    max_leaves=12,
)


def same(stored: Any, loaded: Any) -> bool:
    """Exact equality: float bit patterns, array dtype/shape/bytes, container types and key order."""
    if isinstance(stored, NamedTupleValue):
        return (isinstance(loaded, NamedTupleValue) and loaded.type_name == stored.type_name
                and loaded._fields == stored._fields and all(map(same, stored, loaded)))
    if isinstance(stored, np.ndarray):
        return (isinstance(loaded, np.ndarray) and loaded.dtype == stored.dtype and loaded.shape == stored.shape
                and loaded.tobytes() == stored.tobytes())
    if isinstance(stored, np.generic):
        return type(loaded) is type(stored) and loaded.tobytes() == stored.tobytes()
    if isinstance(stored, float):
        return type(loaded) is float and struct.pack("<d", stored) == struct.pack("<d", loaded)
    if isinstance(stored, complex):
        return type(loaded) is complex and same(stored.real, loaded.real) and same(stored.imag, loaded.imag)
    if isinstance(stored, DtypeValue):
        return isinstance(loaded, np.dtype) and dtype_name(loaded) == stored.name
    if isinstance(stored, PRNGKeyValue):
        return isinstance(loaded, PRNGKeyValue) and loaded == stored
    if isinstance(stored, dict):
        return (type(loaded) is dict and list(stored) == list(loaded)
                and all(same(stored[k], loaded[k]) for k in stored))
    if isinstance(stored, (list, tuple)):
        return (type(loaded) is type(stored) and len(loaded) == len(stored)
                and all(map(same, stored, loaded)))
    return type(loaded) is type(stored) and loaded == stored


@SETTINGS
@given(tree=trees, form=st.sampled_from(["directory", "archive"]))
def test_random_trees_round_trip(tree: Any, form: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Checkpoint(model=tree, format=form, durable=False).save(Path(tmp) / "ckpt")
        assert validate(path).ok
        assert same(tree, read_component(path, "model"))


def test_every_dtype_round_trips() -> None:
    rng = np.random.default_rng(0)
    tree = {name: np.frombuffer(rng.bytes(6 * DTYPES[name][0]), numpy_dtype(name)).reshape(2, 3)
            for name in DTYPE_NAMES if name != "bool"}
    tree["bool"] = np.array([[True, False, True]])
    with tempfile.TemporaryDirectory() as tmp:
        for form in ("directory", "archive"):
            path = Checkpoint(model=tree, format=form, durable=False).save(Path(tmp) / form)
            assert validate(path).ok
            assert same(tree, read_component(path, "model"))


def _base(form: str) -> Path:
    root = Path(tempfile.mkdtemp(prefix="oc-fuzz-"))
    tree = {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "m": np.array([True, False]), "s": np.int8(3),
            "t": (1, 2.5, "x", None, [b"b"]), "k": PRNGKeyValue("rbg", np.zeros(4, np.uint32)), "big": 2**80}
    return Checkpoint(model=tree, cfg={"a": [1, 2, {"b": None}]}, format=form, durable=False).save(root / "ckpt")


BASES = {form: _base(form) for form in ("directory", "archive")}


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(Path(d) / f for d, _, files in os.walk(path) for f in files)


@SETTINGS
@given(form=st.sampled_from(["directory", "archive"]), data=st.data())
def test_random_byte_flips_raise_only_checkpoint_errors(form: str, data: st.DataObject) -> None:
    base = BASES[form]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ckpt"
        if base.is_dir():
            shutil.copytree(base, path)
        else:
            shutil.copy(base, path)
        for _ in range(data.draw(st.integers(1, 3))):
            target = data.draw(st.sampled_from(_files(path)))
            content = bytearray(target.read_bytes())
            if not content:
                continue
            position = data.draw(st.integers(0, len(content) - 1))
            content[position] ^= data.draw(st.integers(1, 255))
            target.write_bytes(bytes(content))
        for name in ("model", "cfg"):
            with contextlib.suppress(CheckpointError):
                read_component(path, name)
        report = validate(path)
        assert all(issue.error and issue.rule for issue in report.errors)
        changed = any(a.read_bytes() != b.read_bytes() for a, b in zip(_files(base), _files(path), strict=True))
        if form == "directory" and changed:  # every byte of a directory checkpoint is covered by a checksum
            assert not report.ok
