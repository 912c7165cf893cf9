"""benchmarks/gpu.py on a machine without CUDA: it says why and measures nothing (status 0, or 2 if required)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu.py"
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: gpu.py would measure")


def test_without_cuda_it_explains_and_exits_cleanly(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--tmpdir", str(tmp_path / "scratch")], capture_output=True,
                          text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "no GPU to measure" in done.stdout and "torch.cuda.is_available() is False" in done.stdout
    assert not (tmp_path / "scratch").exists()  # nothing was written


def test_without_cuda_require_cuda_fails() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--require-cuda"], capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 2
    assert "no GPU to measure" in done.stdout
