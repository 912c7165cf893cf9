"""torch values come back as they went in, or the save refuses them; torch restores are atomic across components.

* a corrupt or mismatched optimizer leaves the model untouched (verify everything, then apply);
* tensors inside plain dicts and inside other objects' state dicts come back as tensors (the live
  leaf's type decides), filled in place where they fit;
* ``OrderedDict._metadata`` (module versions, TensorDict batch size and device) is kept, never dropped:
  a torchrl ReplayBuffer and a nested TensorDict round-trip with the default adapter;
* tensor subclasses and storage-less tensors (DTensor, FakeTensor, FunctionalTensor, meta) are refused
  with UnsupportedValue instead of storing memory that is not their data.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from opencheckpoint import (  # noqa: E402
    Checkpoint,
    IncompatibleComponent,
    IntegrityError,
    UnsupportedValue,
    read_component,
)
from opencheckpoint.testing.adapter_tests import flip_byte  # noqa: E402


def net(seed: int) -> Any:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


def trained(seed: int) -> tuple[Any, Any]:
    model = net(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(5, 3)).sum().backward()
    optimizer.step()
    return model, optimizer


def params(model: Any) -> dict[str, bytes]:
    return {k: v.detach().numpy().tobytes() for k, v in model.state_dict().items()}


# -- atomic across components -------------------------------------------------------------------
@pytest.mark.parametrize("form", ["directory", "archive"])
def test_corrupt_optimizer_leaves_the_model_untouched(tmp_path: Path, form: str) -> None:
    model, optimizer = trained(0)
    path = Checkpoint(model=model, optimizer=optimizer, format=form, durable=False).save(tmp_path / "ckpt")
    flip_byte(path, "optimizer")
    live_model, live_optimizer = trained(1)
    before = params(live_model)
    with pytest.raises(IntegrityError):
        Checkpoint(model=live_model, optimizer=live_optimizer).load(path)
    assert params(live_model) == before


def test_mismatched_optimizer_leaves_the_model_untouched(tmp_path: Path) -> None:
    model, optimizer = trained(0)
    path = Checkpoint(model=model, optimizer=optimizer, durable=False).save(tmp_path / "ckpt")
    live_model = net(1)
    other_optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(2))], lr=0.1)
    before = params(live_model)
    with pytest.raises(IncompatibleComponent, match="parameter group"):
        Checkpoint(model=live_model, optimizer=other_optimizer).load(path)
    assert params(live_model) == before


# -- the live leaf decides ------------------------------------------------------------------------
def test_tensors_in_a_plain_dict_come_back_as_tensors(tmp_path: Path) -> None:
    value = {"x": torch.arange(3, dtype=torch.float32), "h": torch.ones(2, dtype=torch.bfloat16),
             "nested": [torch.tensor([7], dtype=torch.int64), 5], "grown": torch.zeros(2)}
    path = Checkpoint(state=value, durable=False).save(tmp_path / "ckpt")
    x = torch.zeros(3)
    live = {"x": x, "h": torch.zeros(2, dtype=torch.bfloat16), "nested": [torch.zeros(1, dtype=torch.int64), 0],
            "grown": torch.zeros(5)}
    Checkpoint(state=live).load(path)
    assert all(isinstance(v, torch.Tensor) for v in (live["x"], live["h"], live["nested"][0], live["grown"]))
    assert live["x"] is x and x.tolist() == [0.0, 1.0, 2.0]  # filled in place
    assert live["h"].dtype == torch.bfloat16 and live["h"].tolist() == [1.0, 1.0]
    assert live["nested"] == [live["nested"][0], 5] and live["nested"][0].tolist() == [7]
    assert live["grown"].shape == (2,)  # another shape: a new tensor with the stored shape


def test_state_dict_object_with_tensors_gets_tensors(tmp_path: Path) -> None:
    class Trainer:
        def __init__(self, seed: int) -> None:
            self.w = torch.full((2,), float(seed))
            self.step = seed
            self.received: Any = None

        def state_dict(self) -> dict[str, Any]:
            return {"w": self.w, "step": self.step}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            self.received = state
            self.w, self.step = state["w"], state["step"]

    path = Checkpoint(trainer=Trainer(3), durable=False).save(tmp_path / "ckpt")
    live = Trainer(0)
    Checkpoint(trainer=live).load(path)
    assert isinstance(live.received["w"], torch.Tensor) and live.w.tolist() == [3.0, 3.0] and live.step == 3


# -- attributes are kept or refused ---------------------------------------------------------------
def test_module_versions_reach_load_from_state_dict(tmp_path: Path) -> None:
    class Versioned(nn.Module):
        _version = 7

        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(2))
            self.seen: Any = None

        def _load_from_state_dict(self, state_dict: Any, prefix: str, local_metadata: Any, *args: Any) -> None:
            self.seen = dict(local_metadata)
            super()._load_from_state_dict(state_dict, prefix, local_metadata, *args)

    path = Checkpoint(model=Versioned(), durable=False).save(tmp_path / "ckpt")
    live = Versioned()
    Checkpoint(model=live).load(path)
    assert live.seen == {"version": 7}


def test_module_state_dict_inside_a_plain_tree_is_refused_naming_metadata(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedValue, match="_metadata") as info:
        Checkpoint(bundle={"model": net(0).state_dict(), "step": 3}, durable=False).save(tmp_path / "ckpt")
    assert info.value.field == "$.model" and "component 'bundle'" in str(info.value)
    assert not (tmp_path / "ckpt").exists()


def test_replay_buffer_round_trips_and_samples(tmp_path: Path) -> None:
    pytest.importorskip("torchrl")
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, ReplayBuffer

    buffer = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=4)
    buffer.extend(TensorDict({"obs": torch.arange(12.0).reshape(6, 2),
                              "nested": TensorDict({"a": torch.arange(6)}, batch_size=[6])}, batch_size=[6]))
    path = Checkpoint(buffer=buffer, durable=False).save(tmp_path / "ckpt")
    restored = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=4)
    Checkpoint(buffer=restored).load(path)
    sample = restored.sample()
    assert len(restored) == 6 and sample["obs"].shape == (4, 2) and sample["nested", "a"].dtype == torch.int64
    stored = restored._storage._storage[:6]
    assert stored["obs"].tolist() == buffer._storage._storage[:6]["obs"].tolist()


def test_nested_tensordict_round_trips(tmp_path: Path) -> None:
    pytest.importorskip("tensordict")
    from tensordict import TensorDict

    td = TensorDict({"x": torch.randn(2, 3), "inner": TensorDict({"y": torch.arange(2)}, batch_size=[2])},
                    batch_size=[2])
    path = Checkpoint(td=td, durable=False).save(tmp_path / "ckpt")
    live = TensorDict({"x": torch.zeros(2, 3), "inner": TensorDict({"y": torch.zeros(2, dtype=torch.int64)},
                                                                   batch_size=[2])}, batch_size=[2])
    Checkpoint(td=live).load(path)
    assert (live["x"] == td["x"]).all() and live["inner", "y"].tolist() == [0, 1]
    assert live["inner"].batch_size == torch.Size([2])


# -- tensors whose data is not in their own storage -------------------------------------------------
def test_meta_tensor_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedValue, match="meta tensor") as info:
        Checkpoint(model=nn.Linear(2, 2, device="meta"), durable=False).save(tmp_path / "ckpt")
    assert info.value.field == "$.weight"


def test_fake_tensor_is_refused(tmp_path: Path) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = torch.empty(3)
    with pytest.raises(UnsupportedValue, match="FakeTensor"):
        Checkpoint(state={"w": fake}, durable=False).save(tmp_path / "ckpt")


def test_functional_tensor_is_refused(tmp_path: Path) -> None:
    from torch._subclasses.functional_tensor import FunctionalTensorMode

    with FunctionalTensorMode():
        functional = torch.zeros(2)
    with pytest.raises(UnsupportedValue, match="FunctionalTensor"):
        Checkpoint(state={"w": functional}, durable=False).save(tmp_path / "ckpt")


def test_other_tensor_subclass_is_refused_with_the_fix(tmp_path: Path) -> None:
    class Tagged(torch.Tensor):
        pass

    tagged = torch.arange(3.0).as_subclass(Tagged)
    with pytest.raises(UnsupportedValue, match=r"as_subclass\(torch.Tensor\)"):
        Checkpoint(state={"w": tagged}, durable=False).save(tmp_path / "ckpt")
    path = Checkpoint(state={"w": tagged.as_subclass(torch.Tensor), "p": nn.Parameter(torch.ones(2))},
                      durable=False).save(tmp_path / "ok")  # plain tensors and parameters are their storage
    stored = read_component(path, "state")
    assert stored["w"].tolist() == [0.0, 1.0, 2.0] and stored["p"].tolist() == [1.0, 1.0]


def test_zero_element_tensor_with_huge_dimensions_round_trips(tmp_path: Path) -> None:
    """[2**61, 3, 0] holds no byte: saved, read as NumPy and as torch, restored into a live dict."""
    shape = (2**61, 3, 0)
    path = Checkpoint(state={"e": torch.empty(shape), "h": torch.empty(shape, dtype=torch.bfloat16)},
                      durable=False).save(tmp_path / "ckpt")
    as_numpy = read_component(path, "state")
    assert as_numpy["e"].shape == shape and as_numpy["h"].dtype.name == "bfloat16"
    as_torch = read_component(path, "state", framework="torch")
    assert as_torch["h"].shape == shape and as_torch["h"].dtype == torch.bfloat16
    live = {"e": torch.zeros(0), "h": torch.zeros(0, dtype=torch.bfloat16)}
    Checkpoint(state=live).load(path)
    assert live["e"].shape == shape and isinstance(live["h"], torch.Tensor) and live["h"].shape == shape


def test_torch_size_device_and_dtype_come_back_as_the_live_types(tmp_path: Path) -> None:
    value = {"shape": torch.Size([2, 3]), "device": torch.device("cpu"), "dtype": torch.bfloat16,
             "w": torch.ones(1)}
    path = Checkpoint(state=value, durable=False).save(tmp_path / "ckpt")
    live = {"shape": torch.Size([0]), "device": torch.device("meta"), "dtype": torch.float32, "w": torch.zeros(1)}
    Checkpoint(state=live).load(path)
    assert type(live["shape"]) is torch.Size and live["shape"] == (2, 3)
    assert live["device"] == torch.device("cpu") and live["dtype"] is torch.bfloat16


def test_a_device_and_a_parameter_in_a_plain_dict_come_back_as_documented(tmp_path: Path) -> None:
    # docs/guarantees-in-detail.md: with no live value of the type, a str and a plain tensor; with one, the type.
    value = {"device": torch.device("cuda", 1), "p": nn.Parameter(torch.ones(2)),
             "g": torch.ones(2, requires_grad=True)}
    path = Checkpoint(cfg=value, durable=False).save(tmp_path / "ckpt")
    read = read_component(path, "cfg", framework="torch")
    assert read["device"] == "cuda:1" and type(read["device"]) is str
    assert type(read["p"]) is torch.Tensor and not read["p"].requires_grad and read["p"].tolist() == [1.0, 1.0]
    assert type(read["g"]) is torch.Tensor and not read["g"].requires_grad
    live = {"device": torch.device("cpu"), "p": nn.Parameter(torch.zeros(2)), "g": torch.zeros(2, requires_grad=True)}
    Checkpoint(cfg=live).load(path)
    assert live["device"] == torch.device("cuda", 1) and type(live["device"]) is torch.device
    assert type(live["p"]) is nn.Parameter and live["p"].requires_grad and live["p"].tolist() == [1.0, 1.0]
    assert live["g"].requires_grad and live["g"].tolist() == [1.0, 1.0]


def test_tensordict_nested_in_a_plain_dict_is_refused_naming_the_adapter(tmp_path: Path) -> None:
    pytest.importorskip("tensordict")
    from tensordict import TensorDict

    td = TensorDict({"x": torch.zeros(2)}, batch_size=[2])
    with pytest.raises(UnsupportedValue, match="StateDictAdapter") as info:
        Checkpoint(bundle={"td": td, "step": 1}, durable=False).save(tmp_path / "ckpt")
    assert info.value.field == "$.td"
