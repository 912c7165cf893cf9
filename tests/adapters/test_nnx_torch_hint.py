"""Loading a torch-saved module into a Flax NNX module names the interchange helpers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from opencheckpoint import Checkpoint, IncompatibleComponent

torch = pytest.importorskip("torch")
nnx = pytest.importorskip("flax.nnx")


def test_torch_module_into_nnx_module_points_to_interchange(tmp_path: Path) -> None:
    path = Checkpoint(model=torch.nn.Linear(3, 2)).save(tmp_path / "ckpt")
    target = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    before = np.asarray(target.kernel[...]).copy()
    with pytest.raises(IncompatibleComponent) as info:
        Checkpoint(model=target).load(path)
    message = info.value.message
    assert "torch_state_to_nnx" in message and "torch.nn.modules.linear.Linear" in message
    assert np.array_equal(np.asarray(target.kernel[...]), before)  # nothing was touched


def test_nnx_mismatch_from_an_nnx_checkpoint_has_no_torch_hint(tmp_path: Path) -> None:
    path = Checkpoint(model=nnx.Linear(3, 4, rngs=nnx.Rngs(0))).save(tmp_path / "ckpt")
    with pytest.raises(IncompatibleComponent) as info:
        Checkpoint(model=nnx.Linear(3, 2, rngs=nnx.Rngs(1))).load(path)
    assert "torch_state_to_nnx" not in info.value.message
