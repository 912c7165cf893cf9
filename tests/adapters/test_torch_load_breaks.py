"""Load guarantees an adversarial tester broke (issue 8, items 2 and 6): torch cases.

Atomic restores: a live target phase 2 could not write is found in phase 1.
Fidelity: the live leaf decides each value's type, per leaf.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from opencheckpoint import Checkpoint, IncompatibleComponent, UnsupportedValue
from opencheckpoint.format.errors import ConcurrentModification


def test_expanded_live_tensor_is_replaced_not_a_phase_two_failure(tmp_path: Path) -> None:
    Checkpoint(a={"w": np.ones(3)}, b={"t": torch.arange(3.0)}).save(tmp_path / "c")
    a, b = {"w": np.zeros(3)}, {"t": torch.zeros(1).expand(3)}
    Checkpoint(a=a, b=b).load(tmp_path / "c")
    assert a["w"].tolist() == [1.0, 1.0, 1.0] and b["t"].tolist() == [0.0, 1.0, 2.0]


class _Expanded(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)
        self.register_buffer("b", torch.zeros(1).expand(3))


def test_module_with_unwritable_tensors_fails_before_anything_is_applied(tmp_path: Path) -> None:
    source = _Expanded()
    source.b = torch.arange(3.0)
    Checkpoint(a={"w": np.ones(3)}, model=source, lin=torch.nn.Linear(3, 3)).save(tmp_path / "c")
    a = {"w": np.zeros(3)}
    with pytest.raises(IncompatibleComponent, match="expanded view") as info:
        Checkpoint(a=a, model=_Expanded()).load(tmp_path / "c")
    assert info.value.result is None or not info.value.result.loaded
    with torch.inference_mode():
        frozen = torch.nn.Linear(3, 3)
    with pytest.raises(IncompatibleComponent, match="inference tensor"):
        Checkpoint(a=a, lin=frozen).load(tmp_path / "c")
    assert a["w"].tolist() == [0.0, 0.0, 0.0]


def _trained(n: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = torch.nn.Linear(n, n)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, n)).sum().backward()
    optimizer.step()
    return model, optimizer


@pytest.mark.parametrize("stepped", [True, False], ids=["live-state", "fresh-optimizer"])
def test_optimizer_state_for_other_shapes_is_refused(tmp_path: Path, stepped: bool) -> None:
    Checkpoint(optimizer=_trained(2)[1]).save(tmp_path / "c")
    model = torch.nn.Linear(4, 4)
    optimizer = _trained(4)[1] if stepped else torch.optim.Adam(model.parameters())
    before = {k: v.clone() for k, v in optimizer.state_dict()["state"].get(0, {}).items()}
    with pytest.raises(IncompatibleComponent, match=r"'exp_avg' has shape \[2, 2\]"):
        Checkpoint(optimizer=optimizer, strict="error").load(tmp_path / "c")
    after = optimizer.state_dict()["state"].get(0, {})
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)


def test_tensor_past_ten_thousand_items_still_comes_back_a_tensor(tmp_path: Path) -> None:
    Checkpoint(state={"t": torch.arange(3.0), "log": list(range(20000))}).save(tmp_path / "c")
    live = {"t": torch.zeros(3), "log": list(range(20000))}
    tensor = live["t"]
    Checkpoint(state=live).load(tmp_path / "c")
    assert live["t"] is tensor and tensor.tolist() == [0.0, 1.0, 2.0]


def test_size_comes_back_as_size_without_a_tensor_beside_it(tmp_path: Path) -> None:
    Checkpoint(v={"s": torch.Size([2, 3])}).save(tmp_path / "c")
    live = {"s": torch.Size([1])}
    Checkpoint(v=live).load(tmp_path / "c")
    assert type(live["s"]) is torch.Size and live["s"] == torch.Size([2, 3])


@pytest.mark.parametrize("placeholder", [None, 0.0])
def test_placeholder_where_a_tensor_is_stored_gets_a_tensor(tmp_path: Path, placeholder: object) -> None:
    Checkpoint(state={"w": torch.ones(2), "best": torch.tensor(0.5)}).save(tmp_path / "c")
    live = {"w": torch.zeros(2), "best": placeholder}
    Checkpoint(state=live).load(tmp_path / "c")
    assert isinstance(live["best"], torch.Tensor) and live["best"].item() == 0.5


def test_zero_tensor_is_refused_at_save(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedValue, match=r"\$\.g: cannot store a ZeroTensor"):
        Checkpoint(v={"g": torch._efficientzerotensor(3)}).save(tmp_path / "c")
    assert not (tmp_path / "c").exists()


def test_replacing_a_parameter_or_grad_tensor_keeps_its_autograd_kind(tmp_path: Path) -> None:
    Checkpoint(state={"w": torch.ones(2), "p": torch.ones(2), "i": torch.ones(2, dtype=torch.int64)}).save(
        tmp_path / "c")
    live = {"w": torch.zeros(3, requires_grad=True), "p": torch.nn.Parameter(torch.zeros(3)),
            "i": torch.nn.Parameter(torch.zeros(3), requires_grad=False)}
    Checkpoint(state=live).load(tmp_path / "c")  # other shapes: new tensors replace the live ones
    assert type(live["w"]) is torch.Tensor and live["w"].requires_grad and live["w"].is_leaf
    assert type(live["p"]) is torch.nn.Parameter and live["p"].requires_grad
    assert type(live["i"]) is torch.nn.Parameter and not live["i"].requires_grad
    assert live["p"].tolist() == [1.0, 1.0] and live["i"].dtype == torch.int64


def test_replay_buffer_of_tensors_restores_into_a_fresh_buffer(tmp_path: Path) -> None:
    torchrl_data = pytest.importorskip("torchrl.data")
    buffer = torchrl_data.ReplayBuffer(storage=torchrl_data.ListStorage(10))
    buffer.extend([torch.ones(2), torch.zeros(2)])
    Checkpoint(rb=buffer).save(tmp_path / "c")
    fresh = torchrl_data.ReplayBuffer(storage=torchrl_data.ListStorage(10))
    Checkpoint(rb=fresh).load(tmp_path / "c")
    assert len(fresh) == 2 and all(type(item) is torch.Tensor for item in fresh.storage._storage)


@pytest.mark.parametrize("form", ["directory", "archive"])
def test_a_data_file_changed_in_place_between_the_phases_raises_concurrent_modification(
        tmp_path: Path, form: str) -> None:
    """The module is restored from verified views of the map: a file changed before the copy is caught by its
    stat after the apply step (issue 10), not returned as a normal load."""
    torch.manual_seed(0)
    path = Checkpoint(model=torch.nn.Linear(4, 3)).save(tmp_path / "c", format=form)
    file = path if form == "archive" else path / "components" / "model" / "data.bin"
    Checkpoint(model=torch.nn.Linear(4, 3)).load(path)  # control: the same load without a change returns
    stat = os.stat(file)
    os.utime(file, ns=(stat.st_atime_ns, stat.st_mtime_ns - 10**10))  # saved 10 s ago: a new write moves mtime

    def flip(*_: object) -> None:
        with open(file, "r+b") as handle:
            head = handle.read(4)
            handle.seek(0)
            handle.write(bytes(byte ^ 0x40 for byte in head))

    model = torch.nn.Linear(4, 3)
    model.register_load_state_dict_pre_hook(flip)
    with pytest.raises(ConcurrentModification, match="changed in place while it was being loaded") as info:
        Checkpoint(model=model).load(path)
    assert info.value.file == "components/model/data.bin"


class _BoolModule(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("b", torch.zeros(4, dtype=torch.bool))


class _BoolKeeper:
    def __init__(self) -> None:
        self.arrays = {"b": np.zeros(4, dtype=bool)}

    def state_dict(self) -> dict[str, np.ndarray]:
        return dict(self.arrays)

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.arrays = dict(state)


def test_verify_false_leaves_a_bad_bool_byte_as_stored_except_in_a_module_copy(tmp_path: Path) -> None:
    """docs/guarantees-in-detail.md (``verify=False``): bool bytes unchecked; torch's copy into a module stores 01."""
    saved = np.array([True, False, True, True])
    source = _BoolModule()
    source.b.copy_(torch.from_numpy(saved))
    keeper = _BoolKeeper()
    keeper.arrays["b"] = saved.copy()
    path = Checkpoint(arrs={"b": saved.copy()}, obj=keeper, model=source, durable=False).save(tmp_path / "c")
    for name in ("arrs", "obj", "model"):
        with open(path / "components" / name / "data.bin", "r+b") as data:  # the only array: at offset 0
            data.write(b"\x02")
    arrs, obj, model = {"b": np.zeros(4, dtype=bool)}, _BoolKeeper(), _BoolModule()
    Checkpoint(arrs=arrs, obj=obj, model=model).load(path, verify=False)
    assert arrs["b"].view(np.uint8).tolist() == [2, 0, 1, 1]
    assert obj.arrays["b"].view(np.uint8).tolist() == [2, 0, 1, 1]
    assert model.b.view(torch.uint8).tolist() == [1, 0, 1, 1]
