"""The framework registry: a new framework is one adapter module plus one row of ``registry.FRAMEWORKS``."""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np
import pytest

from opencheckpoint import Checkpoint, read_component
from opencheckpoint.adapters.base import framework_of
from opencheckpoint.adapters.frameworks import get_framework
from opencheckpoint.format import frameworks as registry
from opencheckpoint.format.errors import CheckpointError
from opencheckpoint.format.producer import runtime_environment


class ToyTensor:
    """An object of a framework the core has never heard of (its type lives in package ``toyfw``)."""

    def __init__(self, values: list[float]) -> None:
        self.values = values


ToyTensor.__module__ = "toyfw.core"


class ToyFramework:
    name = "toyfw"

    def array(self, data: np.ndarray, *, map_location: Any = None) -> Any:
        return ToyTensor(data.tolist())

    def prng_key(self, impl: str, data: np.ndarray, *, map_location: Any = None) -> Any:
        raise NotImplementedError

    def dtype(self, name: str) -> Any:
        return name


@pytest.fixture
def toy_row(monkeypatch: pytest.MonkeyPatch) -> registry.FrameworkEntry:
    """The adapter module of ``toyfw`` plus its row: nothing else is edited."""
    adapter = types.ModuleType("toy_adapter_for_tests")
    adapter.FRAMEWORK = ToyFramework()  # type: ignore[attr-defined]  # a module built at run time
    adapter.to_tree_value = lambda value: np.asarray(value.values, np.float32)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "toy_adapter_for_tests", adapter)
    toyfw = types.ModuleType("toyfw")
    toyfw.__version__ = "9.9"  # type: ignore[attr-defined]  # a module built at run time
    monkeypatch.setitem(sys.modules, "toyfw", toyfw)
    row = registry.FrameworkEntry("toyfw", "toy_adapter_for_tests", ("toyfw",), "pip install toyfw",
                                  versioned=("toyfw",))
    monkeypatch.setattr(registry, "FRAMEWORKS", (*registry.FRAMEWORKS, row))
    return row


def test_one_row_adds_a_framework_to_write_read_and_environment(toy_row: registry.FrameworkEntry,
                                                                 tmp_path: Any) -> None:
    assert framework_of(ToyTensor([1.0])) == "toyfw"
    path = Checkpoint(durable=False, state={"w": ToyTensor([1.0, 2.0])}).save(tmp_path / "c")
    back = read_component(path, "state", framework="toyfw")
    assert isinstance(back["w"], ToyTensor) and back["w"].values == [1.0, 2.0]
    assert runtime_environment()["toyfw"] == "9.9"
    assert "toyfw" in registry.names()


def test_builtin_rows_name_their_adapter_module() -> None:
    assert registry.names() == ("numpy", "torch", "jax")
    assert registry.for_module("flax.nnx.module") is registry.by_name("jax")
    assert registry.for_module("torch.nn") is registry.by_name("torch")
    assert registry.for_module("numpy") is None
    assert registry.environment_packages() == ("torch", "jax", "flax", "optax")


def test_unknown_and_missing_frameworks(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="'numpy', 'torch', 'jax'"):
        get_framework("tensorflow")
    row = registry.FrameworkEntry("ghost", "no_such_adapter_module_anywhere", ("ghost",), "pip install ghost",
                                  versioned=())
    monkeypatch.setattr(registry, "FRAMEWORKS", (*registry.FRAMEWORKS, row))
    with pytest.raises(CheckpointError, match="pip install ghost"):
        get_framework("ghost")
