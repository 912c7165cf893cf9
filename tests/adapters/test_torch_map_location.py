"""``map_location`` like torch.load: str, torch.device, dict (source -> target) and callable."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from opencheckpoint import Checkpoint, read_component  # noqa: E402
from opencheckpoint.adapters.torch import FRAMEWORK, place, target_device  # noqa: E402

pytestmark = pytest.mark.torch

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="torch.cuda.is_available() is False")


@pytest.fixture()
def saved(tmp_path: Path) -> Path:
    return Checkpoint(state={"w": torch.arange(6.0).reshape(2, 3), "n": torch.tensor(3)}).save(tmp_path / "c")


@pytest.mark.parametrize("location", ["cpu", torch.device("cpu"), {"cpu": "cpu"}, {"cuda:0": "cuda:1"}, None],
                         ids=["str", "device", "dict", "dict-without-cpu-entry", "none"])
def test_cpu_targets(saved: Path, location: object) -> None:
    state = read_component(saved, "state", framework="torch", map_location=location)
    assert state["w"].device.type == "cpu"
    assert torch.equal(state["w"], torch.arange(6.0).reshape(2, 3))


def test_str_and_dict_to_meta_device(saved: Path) -> None:
    for location in ("meta", torch.device("meta"), {"cpu": "meta"}):
        state = read_component(saved, "state", framework="torch", map_location=location)
        assert state["w"].device.type == "meta" and state["w"].shape == (2, 3)


def test_callable_receives_tensor_and_source_location(saved: Path) -> None:
    seen: list[str] = []

    def relocate(tensor: torch.Tensor, location: str) -> torch.Tensor:
        seen.append(location)
        return tensor * 2

    state = read_component(saved, "state", framework="torch", map_location=relocate)
    assert seen == ["cpu", "cpu"]
    assert torch.equal(state["w"], 2 * torch.arange(6.0).reshape(2, 3))


def test_callable_returning_none_keeps_the_tensor() -> None:
    tensor = FRAMEWORK.array(torch.ones(2).numpy().copy(), map_location=lambda t, loc: None)
    assert tensor.device.type == "cpu" and torch.equal(tensor, torch.ones(2))


def test_callable_returning_non_tensor_is_an_error() -> None:
    with pytest.raises(TypeError, match="expected a tensor"):
        place(torch.ones(1), lambda t, loc: "cpu")


def test_target_device_forms() -> None:
    assert target_device("cuda:1") == torch.device("cuda:1")
    assert target_device({"cpu": torch.device("meta")}) == torch.device("meta")
    assert target_device({"cuda:0": "cpu"}) is None
    assert target_device(lambda t, loc: t) is None


def test_map_location_through_checkpoint_load(tmp_path: Path) -> None:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.1, momentum=0.9)
    optimizer.param_groups[0]["params"][0].grad = torch.ones(2)
    optimizer.step()
    path = Checkpoint(opt=optimizer).save(tmp_path / "c")
    seen: list[str] = []
    target = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1, momentum=0.9)
    Checkpoint(opt=target).load(path, map_location=lambda t, loc: seen.append(loc) or t)
    assert seen == ["cpu"]
    assert torch.equal(target.state_dict()["state"][0]["momentum_buffer"], torch.ones(2))


@needs_cuda
def test_cuda_string_and_dict(saved: Path) -> None:
    for location in ("cuda", "cuda:0", torch.device("cuda:0"), {"cpu": "cuda:0"}):
        state = read_component(saved, "state", framework="torch", map_location=location)
        assert state["w"].device.type == "cuda"
        assert torch.equal(state["w"].cpu(), torch.arange(6.0).reshape(2, 3))


@needs_cuda
def test_cuda_tensor_is_saved_from_a_host_copy(tmp_path: Path) -> None:
    weights = torch.randn(4, 4, device="cuda")
    path = Checkpoint(state={"w": weights}).save(tmp_path / "c")
    assert torch.equal(read_component(path, "state", framework="torch")["w"], weights.cpu())


@needs_cuda
def test_cuda_module_loads_from_cpu_checkpoint(tmp_path: Path) -> None:
    source = torch.nn.Linear(3, 3)
    path = Checkpoint(model=source).save(tmp_path / "c")
    target = torch.nn.Linear(3, 3).cuda()
    Checkpoint(model=target).load(path)
    assert torch.equal(target.weight.cpu(), source.weight)
