"""torch live objects: modules (tied weights, strictness), optimizers, schedulers, GradScaler, Generator."""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from opencheckpoint import Checkpoint, IncompatibleComponent, open_checkpoint, read_component  # noqa: E402
from opencheckpoint.adapters.base import resolve_adapter  # noqa: E402
from opencheckpoint.adapters.torch import (  # noqa: E402
    GeneratorAdapter,
    ModuleAdapter,
    TorchStateDictAdapter,
    adapter_for,
)

pytestmark = pytest.mark.torch


def small_net(seed: int = 0, hidden: int = 8) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, hidden), nn.BatchNorm1d(hidden), nn.Tanh(), nn.Linear(hidden, 3))


def batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(16, 4, generator=g), torch.randn(16, 3, generator=g)


def train_steps(model: nn.Module, optimizer: torch.optim.Optimizer, steps: range,
                scheduler: object | None = None) -> None:
    for step in steps:
        x, y = batch(step)
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()  # type: ignore[attr-defined]


def assert_same_state(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for key in a:
        if isinstance(a[key], torch.Tensor):
            assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key
        elif isinstance(a[key], dict):
            assert_same_state(a[key], b[key])
        else:
            assert a[key] == b[key], key


def test_adapter_choice() -> None:
    model = small_net()
    assert isinstance(adapter_for(model), ModuleAdapter)
    assert isinstance(adapter_for(torch.Generator()), GeneratorAdapter)
    assert isinstance(adapter_for(torch.optim.SGD(model.parameters(), lr=0.1)), TorchStateDictAdapter)
    assert adapter_for(torch.zeros(2)) is None
    assert isinstance(resolve_adapter(model), ModuleAdapter)


def test_module_restores_into_existing_parameters(tmp_path: Path) -> None:
    source, target = small_net(0), small_net(1)
    source(torch.randn(8, 4))  # move BatchNorm running stats away from their init
    path = Checkpoint(model=source).save(tmp_path / "c")
    before = {name: p.data_ptr() for name, p in target.named_parameters()}
    Checkpoint(model=target).load(path)
    assert {name: p.data_ptr() for name, p in target.named_parameters()} == before
    assert_same_state(source.state_dict(), target.state_dict())
    assert target[1].num_batches_tracked.item() == 1


def test_tied_weights_stored_once_and_restored_aliased(tmp_path: Path) -> None:
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(10, 6)
            self.head = nn.Linear(6, 10, bias=False)
            self.head.weight = self.embed.weight

    model = Tied()
    path = Checkpoint(model=model).save(tmp_path / "c")
    with open_checkpoint(path) as reader:
        tree = reader.tree("model")
        assert tree["embed.weight"].ref.offset == tree["head.weight"].ref.offset
        assert reader.components["model"].files["data.bin"].size == 10 * 6 * 4
    loaded = read_component(path, "model", framework="torch")
    assert loaded["embed.weight"] is loaded["head.weight"]
    fresh = Tied()
    Checkpoint(model=fresh).load(path)
    assert fresh.head.weight is fresh.embed.weight
    assert torch.equal(fresh.embed.weight, model.embed.weight)


def test_user_defined_module_subclass_uses_module_adapter(tmp_path: Path) -> None:
    """A module class defined outside torch still gets the torch adapter (framework found by MRO)."""

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(3, 2)

    source, target = Net(), Net()
    path = Checkpoint(net=source).save(tmp_path / "c")
    Checkpoint(net=target).load(path)
    assert torch.equal(source.layer.weight, target.layer.weight)


def mismatched_pair() -> tuple[nn.Sequential, nn.Sequential]:
    source = small_net(0, hidden=8)
    target = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 5), nn.Linear(5, 1))
    return source, target


def test_mismatched_model_strict_error_lists_names_and_leaves_module_untouched(tmp_path: Path) -> None:
    source, target = mismatched_pair()
    path = Checkpoint(model=source).save(tmp_path / "c")
    before = copy.deepcopy(target.state_dict())
    with pytest.raises(IncompatibleComponent) as info:
        Checkpoint(model=target).load(path)
    message = str(info.value)
    assert "missing: 4.weight, 4.bias" in message
    assert "mismatched: 3.weight (stored float32[3, 8], module float32[5, 8])" in message
    assert "3.bias" in message
    assert "components.model" in message
    assert_same_state(before, target.state_dict())


def test_unexpected_names_reported(tmp_path: Path) -> None:
    source = small_net(0)
    target = nn.Sequential(nn.Linear(4, 8))
    path = Checkpoint(model=source).save(tmp_path / "c")
    with pytest.raises(IncompatibleComponent, match=r"unexpected: 1\.weight, 1\.bias, 1\.running_mean"):
        Checkpoint(model=target).load(path)


def test_mismatched_model_warn_loads_matching_entries(tmp_path: Path) -> None:
    source, target = mismatched_pair()
    path = Checkpoint(model=source).save(tmp_path / "c")
    untouched = target[3].weight.detach().clone()
    with pytest.warns(UserWarning, match="4.weight"):
        result = Checkpoint(model=target).load(path, strict="warn")
    assert "model" in result.loaded
    assert torch.equal(target[0].weight, source[0].weight)
    assert torch.equal(target[1].running_var, source[1].running_var)
    assert torch.equal(target[3].weight, untouched)


def test_mismatched_model_ignore_is_silent(tmp_path: Path) -> None:
    source, target = mismatched_pair()
    path = Checkpoint(model=source).save(tmp_path / "c")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Checkpoint(model=target).load(path, strict="ignore")
    assert torch.equal(target[0].bias, source[0].bias)


def test_dtype_mismatch_is_reported(tmp_path: Path) -> None:
    path = Checkpoint(model=nn.Linear(2, 2)).save(tmp_path / "c")
    with pytest.raises(IncompatibleComponent, match=r"weight \(stored float32\[2, 2\], module bfloat16\[2, 2\]\)"):
        Checkpoint(model=nn.Linear(2, 2).to(torch.bfloat16)).load(path)


def test_corrupted_weights_detected_before_module_changes(tmp_path: Path) -> None:
    from opencheckpoint import IntegrityError

    source, target = small_net(0), small_net(1)
    path = Checkpoint(model=source).save(tmp_path / "c")
    data = path / "components" / "model" / "data.bin"
    raw = bytearray(data.read_bytes())
    raw[-1] ^= 0xFF
    data.write_bytes(bytes(raw))
    before = copy.deepcopy(target.state_dict())
    with pytest.raises(IntegrityError):
        Checkpoint(model=target).load(path)
    assert_same_state(before, target.state_dict())


@pytest.mark.parametrize("make", [
    lambda p: torch.optim.Adam(p, lr=1e-2),
    lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1, amsgrad=True),
    lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9, nesterov=True),
], ids=["adam", "adamw-amsgrad", "sgd-momentum"])
def test_optimizer_round_trip_and_identical_continuation(tmp_path: Path, make: object) -> None:
    model = small_net(0)
    optimizer = make(model.parameters())  # type: ignore[operator]
    train_steps(model, optimizer, range(3))
    path = Checkpoint(model=model, optimizer=optimizer).save(tmp_path / "c")

    model2 = small_net(5)
    optimizer2 = make(model2.parameters())  # type: ignore[operator]
    Checkpoint(model=model2, optimizer=optimizer2).load(path)
    state, state2 = optimizer.state_dict(), optimizer2.state_dict()
    assert state["param_groups"] == state2["param_groups"]
    assert state["state"].keys() == state2["state"].keys()
    for index in state["state"]:
        assert_same_state(state["state"][index], state2["state"][index])

    train_steps(model, optimizer, range(3, 6))
    train_steps(model2, optimizer2, range(3, 6))
    assert_same_state(model.state_dict(), model2.state_dict())


def test_optimizer_integer_keys_and_tuples_survive(tmp_path: Path) -> None:
    model = small_net(0)
    optimizer = torch.optim.Adam(model.parameters(), betas=(0.8, 0.9))
    train_steps(model, optimizer, range(1))
    path = Checkpoint(optimizer=optimizer).save(tmp_path / "c")
    stored = read_component(path, "optimizer", framework="torch")
    assert sorted(stored["state"]) == list(range(len(list(model.parameters()))))
    assert stored["param_groups"][0]["betas"] == (0.8, 0.9)


def test_optimizer_with_other_parameter_count_is_incompatible(tmp_path: Path) -> None:
    optimizer = torch.optim.SGD(small_net(0).parameters(), lr=0.1)
    path = Checkpoint(optimizer=optimizer).save(tmp_path / "c")
    other = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1)
    with pytest.raises(IncompatibleComponent, match="load_state_dict failed"):
        Checkpoint(optimizer=other).load(path)


def test_lr_scheduler_round_trip(tmp_path: Path) -> None:
    def make() -> tuple[nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
        model = small_net(0)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        warmup = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=3)
        decay = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=10)
        return model, optimizer, torch.optim.lr_scheduler.SequentialLR(optimizer, [warmup, decay], milestones=[3])

    model, optimizer, scheduler = make()
    train_steps(model, optimizer, range(5), scheduler)
    path = Checkpoint(optimizer=optimizer, scheduler=scheduler).save(tmp_path / "c")
    _, optimizer2, scheduler2 = make()
    Checkpoint(optimizer=optimizer2, scheduler=scheduler2).load(path)
    assert scheduler2.last_epoch == scheduler.last_epoch == 5
    assert scheduler2.get_last_lr() == scheduler.get_last_lr()
    for _ in range(4):
        optimizer.step(); scheduler.step()  # noqa: E702
        optimizer2.step(); scheduler2.step()  # noqa: E702
        assert scheduler2.get_last_lr() == scheduler.get_last_lr()


def test_grad_scaler_round_trip(tmp_path: Path) -> None:
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=7)
    scaler._scale = torch.tensor(256.0)  # as after backoffs
    scaler._growth_tracker = torch.tensor(3, dtype=torch.int32)
    path = Checkpoint(scaler=scaler).save(tmp_path / "c")
    restored = torch.amp.GradScaler("cpu")
    Checkpoint(scaler=restored).load(path)
    assert restored.state_dict() == scaler.state_dict()
    assert restored.get_scale() == 256.0 and restored.get_growth_interval() == 7


def test_generator_state_round_trip(tmp_path: Path) -> None:
    generator = torch.Generator().manual_seed(1234)
    torch.rand(5, generator=generator)
    path = Checkpoint(gen=generator).save(tmp_path / "c")
    expected = torch.rand(8, generator=generator)
    other = torch.Generator().manual_seed(1)
    Checkpoint(gen=other).load(path)
    assert torch.equal(torch.rand(8, generator=other), expected)
    stored = read_component(path, "gen")
    assert stored["device"] == "cpu" and stored["state"].dtype == np.uint8


def test_generator_inside_a_tree_is_its_state(tmp_path: Path) -> None:
    generator = torch.Generator().manual_seed(3)
    path = Checkpoint(tree={"g": generator}).save(tmp_path / "c")
    assert np.array_equal(read_component(path, "tree")["g"], generator.get_state().numpy())


def test_module_restore_copies_on_one_intra_op_thread_and_restores_the_setting(tmp_path: Path) -> None:
    """Restoring into an nn.Module copies on one intra-op thread (torch's parallel copy_ collapses when
    other processes keep the CPUs busy), whatever torch.get_num_threads() says, and puts it back."""
    source = torch.nn.Linear(64, 32)
    path = Checkpoint(model=source).save(tmp_path / "c")
    target = torch.nn.Linear(64, 32)
    seen: list[int] = []
    target.register_load_state_dict_post_hook(lambda module, keys: seen.append(torch.get_num_threads()))
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        Checkpoint(model=target).load(path)
        after = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    assert seen == [1]
    assert after == 3
    assert torch.equal(target.weight, source.weight)
