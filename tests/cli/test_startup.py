"""Start-up of the command line: what each command imports (issue 24, item 6), counted, not timed.

``python -X importtime`` lists every module a run imports; the test reads that list from a real
``python -m opencheckpoint`` subprocess. ``--help`` needs only the parser: no NumPy, pydantic, rich,
ml_dtypes or framework. ``inspect``, ``validate`` and ``ls`` read manifests and trees: NumPy and
pydantic, but never a framework or ml_dtypes (whose import alone costs more CPU than NumPy's).
The CPU times these lists stand for are measured in docs/benchmarks.md ("Start-up").
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from opencheckpoint import Checkpoint
from opencheckpoint.run import Rotation

#: Never imported by a command that does not convert or restore into framework objects.
FRAMEWORKS = ("torch", "jax", "jaxlib", "flax", "optax", "orbax", "tensorflow", "safetensors", "ml_dtypes", "fsspec")
#: Not imported by --help either: the parser needs none of them.
HEAVY = (*FRAMEWORKS, "numpy", "pydantic", "pydantic_core", "rich", "msgpack", "crc32c")


def imported(*args: str) -> set[str]:
    """The top-level packages a ``python -m opencheckpoint ARGS`` run imports."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "opencheckpoint", *args], capture_output=True,
                          text=True, check=False, timeout=300)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    names = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    assert "opencheckpoint" in names  # the list is real: the package itself is in it
    return names


def test_help_imports_nothing_heavy() -> None:
    names = imported("--help")
    assert not names & set(HEAVY), sorted(names & set(HEAVY))


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    rotation = Rotation(tmp_path / "run", keep_last=2)
    rotation.save(Checkpoint(model={"w": np.zeros(3, np.float32)}), 1, metadata={"loss": 0.5})
    return tmp_path / "run"


@pytest.mark.parametrize("command", ["inspect", "validate", "ls"])
def test_read_commands_import_no_framework(run_dir: Path, command: str) -> None:
    target = run_dir if command == "ls" else next(run_dir.glob("checkpoint-*"))
    names = imported(command, str(target))
    assert not names & set(FRAMEWORKS), sorted(names & set(FRAMEWORKS))
