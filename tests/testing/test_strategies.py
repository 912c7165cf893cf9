"""The strategies cover every node type and round-trip exactly; assert_tree_equal is exact."""

from __future__ import annotations

import math
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from budget import examples
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from opencheckpoint import Checkpoint, open_checkpoint, read_component, validate
from opencheckpoint.adapters.base import TreeAdapter
from opencheckpoint.format.dtypes import DTYPES
from opencheckpoint.testing import strategies as s
from opencheckpoint.testing.adapter_tests import ImportRecorder
from opencheckpoint.tree.compare import assert_tree_equal
from opencheckpoint.tree.nodes import INT_MAX, INT_MIN, NamedTupleValue, PRNGKeyValue

_SETTINGS = settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                              HealthCheck.function_scoped_fixture])


@_SETTINGS
@given(tree=s.trees())
def test_trees_round_trip_exactly(tree: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.mktemp("tree") / "ckpt"
    Checkpoint(durable=False).register("t", tree, adapter=TreeAdapter()).save(path)
    assert_tree_equal(tree, read_component(path, "t"))


@_SETTINGS
@given(components=s.checkpoint_values(), form=st.sampled_from(["directory", "archive"]))
def test_checkpoint_values_round_trip(components: dict[str, Any], form: str,
                                      tmp_path_factory: pytest.TempPathFactory) -> None:
    path = Checkpoint(format=form, durable=False, **components).save(tmp_path_factory.mktemp("c") / "ckpt")
    assert validate(path).ok
    with open_checkpoint(path) as reader:
        assert list(reader.components) == list(components)
        for name, value in components.items():
            assert_tree_equal(value, reader.read(name))


# -- every node type is reachable (find raises if a strategy cannot produce the example) -----------------
@pytest.mark.parametrize("name", list(DTYPES))
def test_arrays_of_every_dtype_in_every_layout(name: str) -> None:
    assert find(s.arrays(name), lambda a: a.ndim == 0).dtype.name == np.dtype(DTYPES[name][1]).name
    assert find(s.arrays(name), lambda a: a.size == 0 and a.ndim > 0).size == 0
    assert not find(s.arrays(name), lambda a: not a.flags.c_contiguous).flags.c_contiguous
    assert isinstance(find(s.scalars(name), lambda x: True), np.generic)


def test_special_values_are_generated() -> None:
    assert s.float_bits(find(s.floats(), lambda x: s.float_bits(x) == s.float_bits(-0.0))) == "8000000000000000"
    payload = find(s.floats(), lambda x: math.isnan(x) and struct.pack(">d", x)[-1] != 0)
    assert math.isnan(payload)
    assert find(s.ints(), lambda i: i > INT_MAX) > INT_MAX
    assert find(s.ints(), lambda i: i < INT_MIN) < INT_MIN
    assert find(s.texts(), lambda t: any(ord(c) > 0xFFFF for c in t))
    for impl in s.PRNG_IMPLS:
        key = find(s.prng_keys(impl), lambda k: True)
        assert key.impl == impl and key.data.dtype == np.uint32
    keys = find(st.lists(s.dict_keys(), min_size=2), lambda ks: {type(k) for k in ks} == {int, str})
    assert {type(k) for k in keys} == {int, str}
    assert isinstance(find(s.trees(), lambda t: isinstance(t, dict)), dict)
    assert isinstance(find(s.trees(), lambda t: isinstance(t, NamedTupleValue)), NamedTupleValue)
    assert type(find(s.trees(), lambda t: isinstance(t, tuple) and not isinstance(t, NamedTupleValue))) is tuple
    assert isinstance(find(s.leaves(), lambda t: isinstance(t, np.dtype)), np.dtype)
    assert isinstance(find(s.leaves(), lambda t: isinstance(t, complex)), complex)


# -- assert_tree_equal is exact ----------------------------------------------------------------------------
@pytest.mark.parametrize(("a", "b"), [
    (0.0, -0.0),
    (float("nan"), struct.unpack(">d", bytes.fromhex("7ff8000000000001"))[0]),
    (1, True),
    ((1, 2), [1, 2]),
    ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
    ({1: "x"}, {"1": "x"}),
    (np.zeros(2, np.float32), np.zeros(2, np.float64)),
    (np.zeros((2, 1)), np.zeros((1, 2))),
    (np.float16(1), np.float32(1)),
    (NamedTupleValue("a.B", {"x": 1}), NamedTupleValue("a.C", {"x": 1})),
    (NamedTupleValue("a.B", {"x": 1}), (1,)),
    (PRNGKeyValue("rbg", np.zeros(4, np.uint32)), PRNGKeyValue("unsafe_rbg", np.zeros(4, np.uint32))),
    (complex(0.0, 1.0), complex(-0.0, 1.0)),
    (b"a", "a"),
])
def test_assert_tree_equal_tells_apart(a: Any, b: Any) -> None:
    with pytest.raises(AssertionError):
        assert_tree_equal(a, b)


def test_assert_tree_equal_ignores_layout_only() -> None:
    base = np.arange(12, dtype=np.int32).reshape(3, 4)
    assert_tree_equal(base.T, np.ascontiguousarray(base.T))
    nan = float("nan")
    assert_tree_equal({"x": [nan, (1, "a")]}, {"x": [nan, (1, "a")]})


# -- the kit itself -------------------------------------------------------------------------------------------
def test_importing_the_kit_is_opt_in() -> None:
    """`import opencheckpoint` loads neither the kit nor hypothesis nor pytest."""
    code = ("import sys, opencheckpoint, opencheckpoint.testing\n"
            "print(sorted(m for m in ('hypothesis', 'pytest', 'opencheckpoint.testing.strategies',"
            " 'opencheckpoint.testing.adapter_tests') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_named_tuple_type_names_are_never_imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """R-CMP-12 for type_name: a named tuple naming an importable module with a side effect."""
    site = tmp_path / "site"
    (site / "oc_tn_canary").mkdir(parents=True)
    marker = tmp_path / "imported"
    (site / "oc_tn_canary" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\nclass State: pass\n")
    monkeypatch.syspath_prepend(str(site))
    value = {"opt": NamedTupleValue("oc_tn_canary.State", {"count": np.int32(3)})}
    path = Checkpoint(durable=False).register("o", value, adapter=TreeAdapter()).save(tmp_path / "ckpt")
    with ImportRecorder() as recorder:
        restored = read_component(path, "o")
        assert validate(path).ok
    assert restored["opt"].type_name == "oc_tn_canary.State"
    assert not [n for n in recorder.names if n.startswith("oc_tn_canary")]
    assert not marker.exists()


def test_import_recorder_sees_every_route(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The recorder the no-import tests rely on does notice imports (statement and importlib)."""
    import importlib

    site = tmp_path / "site"
    site.mkdir()
    (site / "oc_rec_a.py").write_text("")
    (site / "oc_rec_b.py").write_text("")
    monkeypatch.syspath_prepend(str(site))
    with ImportRecorder() as recorder:
        import oc_rec_a  # noqa: F401
        importlib.import_module("oc_rec_b")
    assert {"oc_rec_a", "oc_rec_b"} <= set(recorder.names)
    monkeypatch.delitem(sys.modules, "oc_rec_a")
    monkeypatch.delitem(sys.modules, "oc_rec_b")
