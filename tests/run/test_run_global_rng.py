"""GlobalRNGState restores Python, NumPy and torch global streams, after every other component."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from opencheckpoint import Checkpoint, read_component
from opencheckpoint.run.rng import GlobalRNGState, GlobalRNGStateAdapter

torch = pytest.importorskip("torch")


def draw() -> tuple[float, float, float, float]:
    return random.random(), random.gauss(0, 1), float(np.random.standard_normal()), float(torch.rand(1))


def test_streams_restored(tmp_path: Path) -> None:
    random.seed(3); np.random.seed(3); torch.manual_seed(3)  # noqa: E702
    random.gauss(0, 1); np.random.standard_normal()  # noqa: E702  (cached Gaussians are state too)
    ckpt = Checkpoint(rng=GlobalRNGState())
    path = ckpt.save(tmp_path / "c")
    expected = [draw() for _ in range(3)]
    random.seed(99); np.random.seed(99); torch.manual_seed(99)  # noqa: E702
    ckpt.load(path)
    assert [draw() for _ in range(3)] == expected


def test_stored_value_is_plain_arrays(tmp_path: Path) -> None:
    path = Checkpoint(rng=GlobalRNGState()).save(tmp_path / "c")
    stored = read_component(path, "rng")
    assert stored["python"]["state"].dtype == np.uint32 and stored["python"]["state"].shape == (625,)
    assert stored["numpy"]["bit_generator"] == "MT19937" and stored["numpy"]["key"].shape == (624,)
    assert stored["torch_cpu"].dtype == np.uint8
    assert ("torch_cuda" in stored) == (torch.cuda.is_available() and torch.cuda.is_initialized())


class DrawsWhileLoading:
    """A component whose restore consumes random numbers (as building objects often does)."""

    def state_dict(self) -> dict[str, Any]:
        return {"x": 1}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        draw()


def test_restored_after_every_other_component(tmp_path: Path) -> None:
    assert GlobalRNGStateAdapter.restore_last
    ckpt = Checkpoint(rng=GlobalRNGState(), other=DrawsWhileLoading())  # rng registered first
    path = ckpt.save(tmp_path / "c")
    expected = draw()
    ckpt.load(path)
    assert draw() == expected


def test_capture_imports_no_framework() -> None:
    code = ("import sys; from opencheckpoint.run.rng import GlobalRNGState; s = GlobalRNGState().state_dict(); "
            "assert 'torch' not in sys.modules and 'jax' not in sys.modules, sorted(sys.modules); "
            "assert sorted(s) == ['numpy', 'python'], sorted(s)")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_jax_config_captured_and_restored_without_importing_jax(tmp_path: Path) -> None:
    path = tmp_path / "c"
    save = ("import jax; jax.config.update('jax_enable_x64', True); "
            "from opencheckpoint import Checkpoint; from opencheckpoint.run.rng import GlobalRNGState; "
            f"Checkpoint(rng=GlobalRNGState()).save({str(path)!r})")
    subprocess.run([sys.executable, "-c", save], check=True)
    assert read_component(path, "rng")["jax_config"]["jax_enable_x64"] is True
    load = ("import os, sys; from opencheckpoint import Checkpoint; from opencheckpoint.run.rng import GlobalRNGState; "
            f"Checkpoint(rng=GlobalRNGState()).load({str(path)!r}); "
            "assert 'jax' not in sys.modules; assert os.environ['JAX_ENABLE_X64'] == '1'; "
            "import jax; assert jax.config.jax_enable_x64")
    subprocess.run([sys.executable, "-c", load], check=True)
