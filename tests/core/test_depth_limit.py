"""R-LIM-10 on the write side: whatever ``save`` accepts, ``validate`` and the readers accept (spec §8.8).

The depth counts every msgpack array and map the document holds, tagged nodes and an array node's ``shape``
included. The encoder counted only the dicts, lists and tuples of the value, so an array, a NumPy scalar, a
named tuple or a big int one or two levels under the limit saved without error into a checkpoint every reader
then refused as too deep (found by an adversarial test of the save path). For each kind of leaf, wrapped in
lists or in dicts: the deepest value a save accepts validates and reads back equal, and one level more is
refused with ``LimitExceeded`` (R-LIM-10) before anything is written.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from opencheckpoint import Checkpoint, read_component, validate
from opencheckpoint.format.errors import LimitExceeded
from opencheckpoint.tree.compare import assert_tree_equal

Pair = namedtuple("Pair", "a b")

LEAVES: dict[str, Callable[[], Any]] = {
    "float32 array": lambda: np.arange(3, dtype=np.float32),
    "bool array": lambda: np.array([True, False]),
    "0-d array": lambda: np.array(2.5),
    "numpy scalar": lambda: np.float32(1.5),
    "big int": lambda: 2**70,
    "complex": lambda: 1 + 2j,
    "dtype": lambda: np.dtype("float32"),
    "named tuple": lambda: Pair(np.ones(2, np.int8), 3),
    "tuple": lambda: (1, np.zeros(1, np.float16)),
    "empty list": lambda: [],
    "empty dict": lambda: {},
    "int": lambda: 7,
}


def _wrapped(leaf: Any, levels: int, container: str) -> Any:
    for _ in range(levels):
        leaf = [leaf] if container == "lists" else {"k": leaf}
    return leaf


@pytest.mark.parametrize("container", ["lists", "dicts"])
@pytest.mark.parametrize("kind", list(LEAVES))
def test_the_deepest_value_a_save_accepts_is_readable_and_one_level_more_is_refused(
        tmp_path: Path, kind: str, container: str) -> None:
    saved: list[int] = []
    for levels in range(118, 131):
        target = tmp_path / f"n{levels}"
        try:
            Checkpoint(m={"v": _wrapped(LEAVES[kind](), levels, container)}).save(target)
        except LimitExceeded as exc:
            assert "R-LIM-10" in str(exc), exc
            assert not target.exists()
            break
        saved.append(levels)
    else:
        pytest.fail(f"no refusal up to {levels} levels")
    assert saved, "refused even at 118 levels"
    deepest = tmp_path / f"n{saved[-1]}"
    assert validate(deepest).ok, validate(deepest).errors
    back = read_component(deepest, "m")["v"]
    for _ in range(saved[-1]):
        back = back[0] if container == "lists" else back["k"]
    if kind == "named tuple":  # read back as a NamedTupleValue (no type is imported from a file): its fields
        assert back.type_name.endswith(".Pair") and back._fields == ("a", "b"), back
        back = Pair(*back)
    assert_tree_equal(LEAVES[kind](), back)
