"""The repository stays clean under ruff and the package under mypy --strict (settings: pyproject.toml).

Both run as subprocesses of this interpreter, from the repository root, so they read the
``[tool.ruff]`` and ``[tool.mypy]`` tables. mypy keeps its cache in ``.mypy_cache`` (gitignored):
the first run checks everything (about half a minute), later runs only what changed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_check_passes() -> None:
    done = _run("ruff", "check", "--no-fix", "--output-format", "concise", ".")
    assert done.returncode == 0, f"ruff check found problems:\n{done.stdout}{done.stderr}"


@pytest.mark.slow(seconds=80)  # mypy --strict without a cache (a fresh clone): its longest single test
def test_mypy_strict_passes_on_the_package() -> None:
    # No paths on the command line: mypy checks the ``files`` of [tool.mypy] (the whole package).
    done = _run("mypy", "--no-error-summary", "--show-error-codes")
    assert done.returncode == 0, f"mypy found problems:\n{done.stdout}{done.stderr}"
