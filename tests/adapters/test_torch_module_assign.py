"""A module whose ``load_state_dict`` keeps the tensors it is given (``assign=True``) gets owned ones.

``ModuleAdapter`` hands ``load_state_dict`` views of a read-only map of the
data file to copy from. A module that assigns them instead must not be left
with parameters in that map: the first in-place update would write to a
read-only page and kill the process.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from ckpt_helpers import forms

from opencheckpoint import Checkpoint, IncompatibleComponent

FORMS = ["directory", "archive"]
needs_proc_maps = pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc/self/maps (Linux)")


class AssignLinear(torch.nn.Linear):
    """Assigns what it is given (as after building on the meta device); counts its calls."""

    calls = 0

    def load_state_dict(self, state: Any, strict: bool = True, assign: bool = False) -> Any:
        self.calls += 1
        return super().load_state_dict(state, strict=strict, assign=True)


class CountingLinear(torch.nn.Linear):
    """Copies what it is given (torch's default); counts its calls."""

    calls = 0

    def load_state_dict(self, state: Any, strict: bool = True, assign: bool = False) -> Any:
        self.calls += 1
        return super().load_state_dict(state, strict=strict, assign=assign)


class AssignThenRaise(AssignLinear):
    def load_state_dict(self, state: Any, strict: bool = True, assign: bool = False) -> Any:
        super().load_state_dict(state, strict=strict, assign=assign)
        if self.calls == 1:
            raise KeyboardInterrupt
        return None


def file_ranges() -> list[tuple[int, int]]:
    """Address ranges of every file mapped into this process."""
    found = []
    with open("/proc/self/maps", encoding="utf-8") as maps:
        for line in maps:
            fields = line.split()
            if int(fields[4]):
                start, end = (int(part, 16) for part in fields[0].split("-"))
                found.append((start, end))
    return found


def assert_owned(module: torch.nn.Module) -> None:
    ranges = file_ranges()
    for name, tensor in (*module.named_parameters(), *module.named_buffers()):
        pointer = tensor.untyped_storage().data_ptr()
        assert not any(start <= pointer < end for start, end in ranges), f"{name} lives in a map of a file"


def save(tmp_path: Path, form: str) -> tuple[Path, torch.nn.Linear]:
    source = torch.nn.Linear(64, 256)
    return forms(Checkpoint(model=source, durable=False).save(tmp_path / "ckpt"), form), source


@needs_proc_maps
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("verify", [True, False])
def test_a_module_that_assigns_gets_owned_writeable_tensors(tmp_path: Path, form: str, verify: bool) -> None:
    path, source = save(tmp_path, form)
    module = AssignLinear(64, 256)
    Checkpoint(model=module).load(path, verify=verify)
    assert module.calls == 2  # the views, then fresh tensors read from the file
    assert_owned(module)
    assert torch.equal(module.weight, source.weight) and torch.equal(module.bias, source.bias)
    assert module.weight.requires_grad
    with torch.no_grad():
        module.weight.mul_(0.5)  # an in-place update (on the map: SIGSEGV)
    assert torch.equal(module.weight, source.weight * 0.5)


def test_a_copying_module_is_called_once(tmp_path: Path) -> None:
    path, source = save(tmp_path, "directory")
    module = CountingLinear(64, 256)
    Checkpoint(model=module).load(path)
    assert module.calls == 1
    assert torch.equal(module.weight, source.weight)


@needs_proc_maps
def test_a_module_that_assigns_then_is_interrupted_ends_with_owned_tensors(tmp_path: Path) -> None:
    path, source = save(tmp_path, "directory")
    module = AssignThenRaise(64, 256)
    with pytest.raises(KeyboardInterrupt):
        Checkpoint(model=module).load(path)
    assert module.calls == 2
    assert_owned(module)
    assert torch.equal(module.weight, source.weight)


@needs_proc_maps
def test_an_assigned_converted_tensor_keeps_its_converted_dtype(tmp_path: Path) -> None:
    source = torch.nn.Linear(8, 4).half()
    path = Checkpoint(model=source, durable=False).save(tmp_path / "ckpt")
    module = AssignLinear(8, 4)
    with pytest.raises(IncompatibleComponent):
        Checkpoint(model=AssignLinear(8, 4)).load(path)
    Checkpoint(model=module).load(path, cast="widening")
    assert module.weight.dtype == torch.float32 and module.calls == 1  # converted: owned already
    assert torch.equal(module.weight, source.weight.float())
    assert_owned(module)


class AssignsOnce(AssignLinear):
    """Assigns the first state it is given and ignores every later one."""

    def load_state_dict(self, state: Any, strict: bool = True, assign: bool = False) -> Any:
        if self.calls:
            self.calls += 1
            return None
        return super().load_state_dict(state, strict=strict, assign=assign)


def test_a_module_that_still_holds_the_map_after_the_second_call_is_warned_about(tmp_path: Path) -> None:
    path, _ = save(tmp_path, "directory")
    module = AssignsOnce(64, 256)
    with pytest.warns(RuntimeWarning, match="still holds tensors of the checkpoint's read-only map"):
        Checkpoint(model=module).load(path)
    assert module.calls == 2
