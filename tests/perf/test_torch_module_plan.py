"""A module's or an optimizer's state dict reaches the tree encoder as arrays, converted in one pass, with
every check kept.

``ModuleAdapter.save`` and ``TorchStateDictAdapter.save`` (an optimizer's plain
dict state) turn the plain tensors of ``state_dict()`` into NumPy arrays sharing
their memory (``plain_tensors_to_numpy``) before the encoder plans the tree,
instead of the encoder finding the torch adapter once per tensor: the plan
stage is time ``save_async`` blocks the training loop. Each
test here checks that this route stores what the per-tensor route stored:
the same bytes, tied weights once, non-tensor entries as they are, a refused
tensor named by its key path with nothing left behind, conversion outside an
active dispatch mode such as ``FakeTensorMode``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from opencheckpoint import Checkpoint, open_checkpoint, read_component  # noqa: E402
from opencheckpoint.adapters import frameworks  # noqa: E402
from opencheckpoint.format.errors import CheckpointError  # noqa: E402
from opencheckpoint.write import recording  # noqa: E402

pytestmark = pytest.mark.torch


class Tied(nn.Module):
    """Tied weights, a buffer of another dtype and a non-tensor extra state."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(5, 3)
        self.head = nn.Linear(3, 5, bias=True)
        self.head.weight = self.embed.weight
        self.register_buffer("steps", torch.arange(4, dtype=torch.int64))
        self.register_buffer("halves", torch.linspace(0, 1, 6, dtype=torch.bfloat16))

    def get_extra_state(self) -> Any:
        return {"note": "kept", "scale": 0.5}

    def set_extra_state(self, state: Any) -> None:
        self.extra = state


def _count_conversions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the type of every value the encoder hands to the framework converter."""
    seen: list[str] = []

    def counting(value: Any) -> Any:
        seen.append(type(value).__name__)
        return frameworks.convert_leaf(value)

    monkeypatch.setattr(recording, "convert_leaf", counting)
    return seen


def test_a_modules_tensors_reach_the_encoder_as_arrays_and_come_back_exactly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = Tied()
    seen = _count_conversions(monkeypatch)
    path = Checkpoint(model=model).save_async(tmp_path / "c").result()
    assert "Tensor" not in seen and "Parameter" not in seen  # no per-tensor conversion by the encoder
    expected = model.state_dict()
    loaded = read_component(path, "model", framework="torch")
    assert list(loaded) == list(expected)
    for key, value in expected.items():
        if isinstance(value, torch.Tensor):
            assert loaded[key].dtype == value.dtype and torch.equal(loaded[key], value), key
        else:
            assert loaded[key] == value, key
    with open_checkpoint(path) as reader:
        tree = reader.tree("model")
        assert tree["embed.weight"].ref.offset == tree["head.weight"].ref.offset  # tied: stored once


def test_a_refused_tensor_in_a_module_is_named_by_its_key_path_and_nothing_is_written(tmp_path: Path) -> None:
    model = nn.Linear(2, 2)
    model.register_buffer("bad", torch.empty(2, device="meta"))
    with pytest.raises(CheckpointError, match="meta tensor") as caught:
        Checkpoint(model=model).save(tmp_path / "c")
    assert (caught.value.file, caught.value.field) == ("component 'model'", "$.bad")
    assert os.listdir(tmp_path) == []


def test_tensors_converted_under_an_active_dispatch_mode_are_converted_outside_it() -> None:
    """The one dispatch-mode guard of the whole mapping sets an active mode aside (as ``tensor_to_numpy``'s
    does for ``FakeTensorMode``): no torch operation of the conversion, e.g. the ``detach`` of a parameter
    that requires grad, reaches the mode, and the arrays are the real tensors' bytes, shared."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from opencheckpoint.adapters.torch_tensors import plain_tensors_to_numpy

    class Refusing(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            raise AssertionError(f"{func} ran inside the active dispatch mode")

    weight = nn.Parameter(torch.arange(6, dtype=torch.float32).reshape(2, 3))  # requires grad: detached
    flag = torch.tensor([True, False])
    with Refusing():
        arrays = plain_tensors_to_numpy({"weight": weight, "flag": flag, "step": 3})
    assert arrays is not None
    np.testing.assert_array_equal(arrays["weight"], np.arange(6, dtype=np.float32).reshape(2, 3))
    assert arrays["weight"].ctypes.data == weight.data_ptr()  # shares the parameter's memory: no copy
    assert arrays["flag"].tolist() == [True, False] and arrays["step"] == 3


def _stepped_adam() -> tuple[nn.Module, Any]:
    model = nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.ones(4, 3)).sum().backward()
    optimizer.step()
    return model, optimizer


def test_an_optimizers_state_tensors_reach_the_encoder_as_arrays_and_load_back_exactly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, optimizer = _stepped_adam()
    expected = optimizer.state_dict()
    seen = _count_conversions(monkeypatch)
    path = Checkpoint(optimizer=optimizer).save_async(tmp_path / "c").result()
    assert "Tensor" not in seen and "Parameter" not in seen  # the nested state converted up front too
    fresh = torch.optim.Adam(model.parameters(), lr=0.5)
    Checkpoint(optimizer=fresh).load(path)
    loaded = fresh.state_dict()
    assert loaded["param_groups"] == expected["param_groups"]
    assert list(loaded["state"]) == list(expected["state"])
    for index, state in expected["state"].items():
        assert list(loaded["state"][index]) == list(state)
        for name, value in state.items():
            assert loaded["state"][index][name].dtype == value.dtype, (index, name)
            assert torch.equal(loaded["state"][index][name], value), (index, name)


def test_a_refused_tensor_in_an_optimizers_state_is_named_by_its_key_path(tmp_path: Path) -> None:
    model, optimizer = _stepped_adam()
    optimizer.state[model.weight]["bad"] = torch.empty(2, device="meta")
    with pytest.raises(CheckpointError, match="meta tensor") as caught:
        Checkpoint(optimizer=optimizer).save(tmp_path / "c")
    assert (caught.value.file, caught.value.field) == ("component 'optimizer'", "$.state[0].bad")
    assert os.listdir(tmp_path) == []
