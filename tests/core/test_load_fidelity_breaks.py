"""Load guarantees an adversarial tester broke (issue 8, items 2 and 6): framework-free cases.

Each test is one break: the value that was silently changed (or the restore
that was not atomic) and the property that now holds.
"""

from __future__ import annotations

import collections
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from opencheckpoint import Checkpoint, IncompatibleComponent, UnsupportedValue
from opencheckpoint.format.errors import ConcurrentModification


class _P(collections.namedtuple("_P", "x y")):
    pass


NT = collections.namedtuple("NT", "x y")


@dataclasses.dataclass
class Layer:
    width: int = 0


@dataclasses.dataclass
class Cfg:
    layers: list[Layer] = dataclasses.field(default_factory=list)
    pair: tuple[Layer, Layer] = (Layer(), Layer())
    named: dict[str, Layer] = dataclasses.field(default_factory=dict)


def test_big_endian_arrays_and_dtypes_are_refused_at_save(tmp_path: Path) -> None:
    for value in (np.arange(3, dtype=">i4"), np.dtype(">f8")):
        with pytest.raises(UnsupportedValue, match=r"big-endian.*newbyteorder"):
            Checkpoint(v={"a": value}).save(tmp_path / "c")
        assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("value", [np.ma.masked_array([1.0, 2.0], mask=[0, 1]), np.matrix([[1, 2]]),
                                   np.arange(2).view(np.recarray)], ids=["masked", "matrix", "recarray"])
def test_ndarray_subclasses_that_would_lose_state_are_refused(tmp_path: Path, value: np.ndarray) -> None:
    with pytest.raises(UnsupportedValue, match=r"\$\.m: .*plain numpy.ndarray"):
        Checkpoint(v={"m": value}).save(tmp_path / "c")


def test_named_tuple_instance_attributes_are_refused(tmp_path: Path) -> None:
    value = _P(1, 2)
    value.note = "keep me"  # type: ignore[attr-defined]
    with pytest.raises(UnsupportedValue, match="attribute note would be lost"):
        Checkpoint(v={"p": value}).save(tmp_path / "c")
    Checkpoint(v={"p": _P(1, 2)}).save(tmp_path / "c")  # no attribute of its own: stored as before


def test_lone_surrogate_in_json_component_is_unsupported_value(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedValue, match="not valid Unicode"):
        Checkpoint(cfg={"run": "exp\ud800"}).save(tmp_path / "c")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("value", "field"), [
    ({"a\ud800": np.ones(2)}, "$.a\\ud800"),  # a key of a state dict of arrays (planned in one C call)
    ({"w": np.ones(2), "s": "x\ud800"}, "$.s"),
    ({"w": np.ones(2), "l": [1, {"k\udfff": 2}]}, "$.l[1].k\\udfff"),
], ids=["array-key", "str-value", "nested-key"])
def test_lone_surrogate_in_a_tree_is_refused_naming_where(tmp_path: Path, value: dict[str, object],
                                                          field: str) -> None:
    """R-TREE-9 at save names the tree path of the string (msgpack's own error says only what is wrong), with
    the unencodable character escaped so the message prints; nothing is left at the target."""
    with pytest.raises(UnsupportedValue, match="R-TREE-9") as caught:
        Checkpoint(m=value).save(tmp_path / "c")
    assert caught.value.field == field
    str(caught.value).encode("utf-8")  # printable
    assert list(tmp_path.iterdir()) == []


def test_containers_take_live_types_without_any_tensor(tmp_path: Path) -> None:
    Checkpoint(v={"n": NT(1, 2), "o": collections.OrderedDict(b=1, a=2), "w": np.ones(2)}).save(tmp_path / "c")
    live = {"n": NT(0, 0), "o": collections.OrderedDict(b=0, a=0), "w": np.zeros(2)}
    w = live["w"]
    Checkpoint(v=live).load(tmp_path / "c")
    assert type(live["n"]) is NT and live["n"] == NT(1, 2)
    assert type(live["o"]) is collections.OrderedDict and list(live["o"]) == ["b", "a"]
    assert live["w"] is w and w.tolist() == [1.0, 1.0]


def test_strided_view_and_memmap_are_written_in_place(tmp_path: Path) -> None:
    Checkpoint(v={"w": np.ones(3), "m": np.full(3, 2.0)}).save(tmp_path / "c")
    buffer = np.zeros((3, 2))
    mapped = np.memmap(tmp_path / "m.dat", dtype=np.float64, mode="w+", shape=(3,))
    live = {"w": buffer[:, 0], "m": mapped}
    Checkpoint(v=live).load(tmp_path / "c")
    assert buffer[:, 0].tolist() == [1.0, 1.0, 1.0] and buffer[:, 1].tolist() == [0.0, 0.0, 0.0]
    assert live["m"] is mapped and np.array(mapped).tolist() == [2.0, 2.0, 2.0]


def test_bytes_changed_between_phases_raise_concurrent_modification(tmp_path: Path) -> None:
    path = tmp_path / "c"

    class Hook:  # an unchecked restore: phase 2 runs it first, before the arrays are filled
        def state_dict(self) -> dict[str, int]:
            return {"x": 1}

        def load_state_dict(self, state: object) -> None:
            with open(path / "components" / "w" / "data.bin", "r+b") as handle:
                handle.write(np.full(4, 666.0).tobytes())

    Checkpoint(hook=Hook(), w={"a": np.arange(4.0)}).save(path)
    with pytest.raises(ConcurrentModification, match="changed while they were copied"):
        Checkpoint(hook=Hook(), w={"a": np.zeros(4)}).load(path)


def test_dataclasses_inside_container_fields_come_back_as_dataclasses(tmp_path: Path) -> None:
    saved = Cfg(layers=[Layer(64), Layer(32)], pair=(Layer(1), Layer(2)), named={"head": Layer(7)})
    Checkpoint(cfg=saved).save(tmp_path / "c")
    live = Cfg(layers=[Layer(), Layer()], named={"head": Layer()})
    Checkpoint(cfg=live, strict="error").load(tmp_path / "c")
    assert live == saved
    shorter = Cfg(layers=[Layer()], named={"head": Layer()})
    with pytest.raises(IncompatibleComponent, match=r"layers: stored list of 2 items"):
        Checkpoint(cfg=shorter, strict="error").load(tmp_path / "c")
    assert shorter.layers == [Layer()]
