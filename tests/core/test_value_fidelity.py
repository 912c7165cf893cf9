"""Values come back as they went in, or the save refuses them naming the fix (framework-free cases).

Dataclass configs (tuple fields, nested dataclasses, frozen ones) round-trip
through their own component; mapping types and attributes the tree cannot
hold are refused with ``UnsupportedValue`` instead of being dropped; an
array with zero elements but huge dimensions reads as an empty array.
"""

from __future__ import annotations

import dataclasses
import enum
from collections import OrderedDict, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from opencheckpoint import Checkpoint, IncompatibleComponent, UnsupportedValue, read_component
from opencheckpoint.adapters.base import DataclassAdapter, resolve_adapter


@dataclasses.dataclass
class Optim:
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)


@dataclasses.dataclass
class Config:
    name: str = "run"
    layers: tuple[int, ...] = (64, 64)
    optim: Optim = dataclasses.field(default_factory=Optim)
    mean: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(3, dtype=np.float32))
    tags: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class Frozen:
    seed: int
    shape: tuple[int, int]


def test_dataclass_config_round_trips_in_place(tmp_path: Path) -> None:
    config = Config("big", (128, 256, 3), Optim(0.5, (0.8, 0.9)), np.arange(3, dtype=np.float32), ["a"])
    assert isinstance(resolve_adapter(config), DataclassAdapter)
    path = Checkpoint(config=config, durable=False).save(tmp_path / "ckpt")
    live = Config()
    result = Checkpoint(config=live).load(path)
    assert result.loaded == {"config"}
    assert live.name == "big" and live.layers == (128, 256, 3) and type(live.layers) is tuple
    assert type(live.optim) is Optim and live.optim.betas == (0.8, 0.9) and type(live.optim.betas) is tuple
    assert live.mean.dtype == np.float32 and live.mean.tolist() == [0.0, 1.0, 2.0] and live.tags == ["a"]


def test_frozen_dataclass_comes_back_as_a_new_instance(tmp_path: Path) -> None:
    path = Checkpoint(config=Frozen(7, (2, 3)), durable=False).save(tmp_path / "ckpt")
    live = Frozen(0, (0, 0))
    result = Checkpoint(config=live).load(path)
    assert result.values["config"] == Frozen(7, (2, 3)) and type(result.values["config"].shape) is tuple
    assert live == Frozen(0, (0, 0))


def test_dataclass_with_other_fields_is_incompatible(tmp_path: Path) -> None:
    path = Checkpoint(config=Frozen(7, (2, 3)), durable=False).save(tmp_path / "ckpt")
    with pytest.raises(IncompatibleComponent, match="missing from the checkpoint"):
        Checkpoint(config=Config()).load(path)


def test_dataclass_nested_in_a_tree_is_refused_naming_the_fix(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedValue, match=r"dataclasses.asdict") as info:
        Checkpoint(state={"config": Config(), "w": np.zeros(2)}, durable=False).save(tmp_path / "ckpt")
    assert info.value.field == "$.config"


def test_ordered_dict_with_attributes_is_refused_naming_them(tmp_path: Path) -> None:
    tagged = OrderedDict(w=np.zeros(2))
    tagged._metadata = {"": {"version": 2}}  # type: ignore[attr-defined]
    with pytest.raises(UnsupportedValue, match="_metadata") as info:
        Checkpoint(state={"inner": tagged}, durable=False).save(tmp_path / "ckpt")
    assert info.value.field == "$.inner"


@pytest.mark.parametrize("value", [defaultdict(list, a=[1]), type("Sub", (dict,), {})(a=1)],
                         ids=["defaultdict", "dict-subclass"])
def test_other_mapping_types_are_refused(tmp_path: Path, value: Any) -> None:
    with pytest.raises(UnsupportedValue, match="would come back as a plain dict"):
        Checkpoint(durable=False).register("state", {"m": value, "x": np.zeros(1)}).save(tmp_path / "ckpt")


@pytest.mark.parametrize("dtype", ["float64", "complex128", "bfloat16"])
@pytest.mark.parametrize("form", ["directory", "archive"])
def test_zero_element_array_with_huge_dimensions_reads_as_empty(tmp_path: Path, dtype: str, form: str) -> None:
    """[2**61, 3, 0] holds no byte: it reads as an empty array of exactly that shape, lazily and eagerly."""
    from ckpt_helpers import array_node, forms, set_tree

    from opencheckpoint import open_checkpoint, validate

    shape = [2**61, 3, 0]
    path = Checkpoint(state={"e": np.zeros(0)}, durable=False).save(tmp_path / "ckpt")
    set_tree(path, {"e": array_node(dtype, shape, 0, 0, 0), "n": 1}, b"", component="state")
    path = forms(path, form)
    assert validate(path).ok
    loaded = read_component(path, "state")["e"]
    assert loaded.shape == tuple(shape) and loaded.size == 0 and loaded.dtype.name == dtype
    with open_checkpoint(path) as reader:
        assert reader.tree("state")["e"].read().shape == tuple(shape)
        assert reader.read("state", copy=False)["e"].shape == tuple(shape)
    live: dict[str, Any] = {"e": np.zeros(0), "n": 0}
    Checkpoint(state=live).load(path)
    assert live["e"].shape == tuple(shape) and live["n"] == 1


def test_zero_element_array_numpy_cannot_represent_is_a_checkpoint_error(tmp_path: Path) -> None:
    from ckpt_helpers import array_node, set_tree

    shape = [0, 2**62, 3]  # valid (running products are 0), but NumPy cannot hold even a uint8 array of it
    path = Checkpoint(state={"e": np.zeros(0)}, durable=False).save(tmp_path / "ckpt")
    set_tree(path, {"e": array_node("uint8", shape, 0, 0, 0)}, b"", component="state")
    with pytest.raises(IncompatibleComponent, match="NumPy cannot represent") as info:
        read_component(path, "state")
    assert info.value.field == "$.e"


class Mode(enum.IntEnum):
    TRAIN = 1


class Pair(tuple):  # type: ignore[type-arg]  # a plain tuple subclass (not a named tuple)
    pass


@pytest.mark.parametrize(("value", "plain"),
                         [(Mode.TRAIN, "int"), (bytearray(b"ab"), "bytes"), (Pair((1, 2)), "tuple")],
                         ids=["int-enum", "bytearray", "tuple-subclass"])
def test_scalar_and_tuple_subclasses_are_refused_naming_the_plain_type(tmp_path: Path, value: Any,
                                                                        plain: str) -> None:
    with pytest.raises(UnsupportedValue, match=f"would come back as a plain {plain}") as info:
        Checkpoint(durable=False).register("state", {"v": value, "x": np.zeros(1)}).save(tmp_path / "ckpt")
    assert info.value.field == "$.v"


def test_enum_dict_keys_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedValue, match="enum would come back as the plain type") as info:
        Checkpoint(durable=False).register("state", {"by_mode": {Mode.TRAIN: np.zeros(1)}}).save(tmp_path / "c")
    assert info.value.field == "$.by_mode"


@pytest.mark.parametrize("form", ["directory", "archive"])
def test_bool_bytes_other_than_00_01_are_stored_as_01(tmp_path: Path, form: str) -> None:
    """NumPy reads a bool byte 02 as True; the file must hold 01 (R-ARR-13), in a view, a 0-d array and a copy."""
    from opencheckpoint import validate

    raw = np.frombuffer(bytes([2, 0, 255, 1, 3, 0]), dtype=np.bool_)  # a read-only view of foreign memory
    value = {"flat": raw, "grid": raw.reshape(2, 3).T, "zero_d": raw[2:3].reshape(()), "ok": np.array([0, 1], bool)}
    path = Checkpoint(m=value, durable=False).save(tmp_path / ("ckpt.zip" if form == "archive" else "ckpt"))
    assert validate(path).ok
    loaded = read_component(path, "m")
    for name, array in value.items():
        assert loaded[name].tolist() == array.tolist() and loaded[name].dtype == np.bool_
        assert set(loaded[name].reshape(-1).view(np.uint8).tolist()) <= {0, 1}
    assert bytes(raw.view(np.uint8)) == bytes([2, 0, 255, 1, 3, 0])  # the caller's memory is not touched
