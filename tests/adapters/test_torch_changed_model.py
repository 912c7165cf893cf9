"""Restoring torch state into a model that changed: wrappers (DDP-style, torch.compile), dtypes, parts."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from opencheckpoint import Checkpoint, IncompatibleComponent, read_component  # noqa: E402
from opencheckpoint.run.checkpointer import RunCheckpointer  # noqa: E402


class Net(nn.Module):
    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.encoder = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x))


class Wrapper(nn.Module):
    """What DistributedDataParallel / DataParallel do to the keys: the model is ``self.module``."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.module(x)


def _trained(model: nn.Module) -> torch.optim.Optimizer:
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    for step in range(2):
        optimizer.zero_grad()
        model(torch.randn(5, 3, generator=torch.Generator().manual_seed(step))).square().sum().backward()
        optimizer.step()
    return optimizer


def _same_state(a: nn.Module, b: nn.Module) -> bool:
    left, right = a.state_dict(), b.state_dict()
    return list(left) == list(right) and all(torch.equal(left[k], right[k]) for k in left)


def test_ddp_style_wrapped_model_and_optimizer_restore_into_the_plain_model(tmp_path: Path) -> None:
    saved = Net(0)
    wrapped = Wrapper(saved)
    optimizer = _trained(wrapped)
    path = Checkpoint(model=wrapped, optimizer=optimizer).save(tmp_path / "c")
    plain = Net(1)
    plain_optimizer = torch.optim.Adam(plain.parameters(), lr=0.1)
    before = {k: v.clone() for k, v in plain.state_dict().items()}

    with pytest.raises(IncompatibleComponent, match=r"pass rename=\{'module\.': ''\}") as info:
        Checkpoint(model=plain, optimizer=plain_optimizer).load(path)
    assert "does not fit the stored state dict" in str(info.value) and "unexpected: module.encoder.0.weight" in str(
        info.value)
    assert all(torch.equal(before[k], v) for k, v in plain.state_dict().items())  # nothing renamed unless asked
    assert not plain_optimizer.state

    result = Checkpoint(model=plain, optimizer=plain_optimizer).load(path, rename={"module.": ""})
    assert result.loaded == {"model", "optimizer"} and result.unused == {} and result.conversions == []
    assert _same_state(plain, saved)
    # the optimizer state follows the renamed parameters (torch keys it by parameter order)
    for mine, theirs in zip(plain.parameters(), saved.parameters(), strict=True):
        assert torch.equal(plain_optimizer.state[mine]["exp_avg"], optimizer.state[theirs]["exp_avg"])


def test_torch_compile_keys_restore_into_the_plain_model(tmp_path: Path) -> None:
    saved = Net(0)
    compiled = torch.compile(saved)  # wraps without compiling: state_dict keys gain "_orig_mod."
    assert next(iter(compiled.state_dict())).startswith("_orig_mod.")
    path = Checkpoint(model=compiled).save(tmp_path / "c")
    plain = Net(1)
    with pytest.raises(IncompatibleComponent, match=r"pass rename=\{'_orig_mod\.': ''\}"):
        Checkpoint(model=plain).load(path)
    Checkpoint(model=plain).load(path, rename={"_orig_mod.": ""})
    assert _same_state(plain, saved)
    # and the other way: a plain checkpoint into a compiled model, with a callable; the optimizer (keyed by
    # parameter order) is not renamed
    back = torch.compile(Net(2))
    optimizer = _trained(saved)
    back_optimizer = torch.optim.Adam(back.parameters(), lr=0.1)
    Checkpoint(model=back, optimizer=back_optimizer).load(
        Checkpoint(model=saved, optimizer=optimizer).save(tmp_path / "plain"), rename=lambda key: f"_orig_mod.{key}")
    assert _same_state(back, compiled)
    assert torch.equal(back_optimizer.state[back.head.weight]["exp_avg"], optimizer.state[saved.head.weight]["exp_avg"])


def test_bf16_checkpoint_into_fp32_model_needs_cast_and_reports_every_conversion(tmp_path: Path) -> None:
    saved = Net(0).to(torch.bfloat16)
    path = Checkpoint(model=saved).save(tmp_path / "c")
    model = Net(1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(IncompatibleComponent, match="pass cast='widening'") as info:
        Checkpoint(model=model).load(path)
    for key in ("encoder.0.weight", "encoder.1.running_mean", "head.bias"):  # each array named
        assert f"{key} (stored bfloat16" in str(info.value)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())

    result = Checkpoint(model=model).load(path, cast="widening")
    floats = [k for k, v in saved.state_dict().items() if v.dtype == torch.bfloat16]
    assert [(c.path, c.stored, c.target, c.lossy) for c in result.conversions] == [
        (k, "bfloat16", "float32", False) for k in floats]
    for key in floats:
        assert model.state_dict()[key].dtype == torch.float32
        assert torch.equal(model.state_dict()[key], saved.state_dict()[key].float())


def test_narrowing_cast_is_refused_by_widening_and_reported_lossy_by_cast_true(tmp_path: Path) -> None:
    saved = Net(0)
    with torch.no_grad():
        saved.head.bias.copy_(torch.tensor([1.0, 1.0 + 2**-20]))  # the second value is not a bfloat16 value
    path = Checkpoint(model=saved).save(tmp_path / "c")
    model = Net(1).to(torch.bfloat16)
    with pytest.raises(IncompatibleComponent, match="cast='widening' refuses it"):
        Checkpoint(model=model).load(path, cast="widening")
    result = Checkpoint(model=model).load(path, cast=True)
    lossy = {c.path: c.lossy for c in result.conversions}
    assert lossy["head.bias"] is True and set(lossy) >= {"encoder.0.weight", "head.weight"}
    assert model.head.bias.tolist() == [1.0, 1.0]


def test_encoder_part_restores_into_a_separate_encoder_and_the_rest_is_reported_unused(tmp_path: Path) -> None:
    saved = Net(0)
    path = Checkpoint(model=Wrapper(saved)).save(tmp_path / "c")
    encoder = Net(1).encoder
    with pytest.raises(IncompatibleComponent, match=r"pass subtree='module\.encoder'"):
        Checkpoint(model=encoder).load(path)
    result = Checkpoint(model=encoder).load(path, rename={"module.": ""}, subtree="encoder")
    assert _same_state(encoder, saved.encoder)
    assert result.unused == {"model": ["module.head.weight", "module.head.bias"]}  # stored key paths


def test_partial_restore_is_atomic_across_components(tmp_path: Path) -> None:
    saved = Net(0)
    path = Checkpoint(model=saved, other=nn.Linear(4, 2)).save(tmp_path / "c")
    encoder = Net(1).encoder
    before = {k: v.clone() for k, v in encoder.state_dict().items()}
    wrong = nn.Linear(5, 5)  # takes nothing under "encoder": the whole load fails before any copy
    with pytest.raises(IncompatibleComponent, match="no entry under 'encoder'"):
        Checkpoint(model=encoder, other=wrong).load(path, subtree="encoder")
    assert all(torch.equal(before[k], v) for k, v in encoder.state_dict().items())


def test_restore_helpers_take_the_same_options(tmp_path: Path) -> None:
    saved = Net(0)
    run = RunCheckpointer(Checkpoint(model=Wrapper(saved)), tmp_path / "run", interval=1)
    run.save(5)
    plain = Net(1)
    resumed = RunCheckpointer(Checkpoint(model=plain), tmp_path / "run", interval=1)
    assert resumed.restore(rename={"module.": ""}) == 5
    assert _same_state(plain, saved) and resumed.last_load is not None and resumed.last_load.loaded == {"model"}
    state = read_component(run.rotation.latest(), "model", framework="torch", rename={"module.": ""},
                           subtree="head")
    assert list(state) == ["weight", "bias"] and torch.equal(state["weight"], saved.head.weight)
