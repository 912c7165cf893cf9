"""Start-up of the command line: what each command imports (issue 24, item 6), counted, not timed.

``python -X importtime`` lists every module a run imports; the test reads that list from a real
``python -m opencheckpoint`` subprocess, its output piped. ``--help`` needs only the parser: no NumPy,
pydantic, rich, ml_dtypes or framework. ``inspect`` and ``validate`` decode trees (NumPy, msgpack) and
``ls`` reads manifests only (neither); none of the three imports pydantic (the reader's records are
plain dataclasses; pydantic is the JSON Schemas' source), rich (piped output is plain text), a
framework or ml_dtypes (whose import alone costs more CPU than NumPy's), the save path (the writer's
modules, ``RunCheckpointer``) or :mod:`importlib.metadata` (which the ``crc32c`` package's
``__init__`` imports). The CPU times these lists stand for are measured by
``benchmarks/cli_startup.py`` (docs/benchmarks.md, "Start-up").
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


#: Libraries a read command's piped run does without: the manifest's records are dataclasses, output is plain.
NOT_READ_SIDE = ("pydantic", "pydantic_core", "rich")

#: Modules of the save path and of start-up costs that a command which only reads must not import.
WRITE_SIDE = ("opencheckpoint.write", "opencheckpoint.tree.encode", "opencheckpoint.tree.datafile",
              "opencheckpoint.tree.shard_plan", "opencheckpoint.container.writeback",
              "opencheckpoint.container.staged", "opencheckpoint.container.publish", "opencheckpoint.checkpoint",
              "opencheckpoint.run.checkpointer", "opencheckpoint.run.rotation", "opencheckpoint.adapters",
              "importlib.metadata")


def imported_modules(*args: str) -> set[str]:
    """Every module a ``python -m opencheckpoint ARGS`` run imports, by its full name."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "opencheckpoint", *args], capture_output=True,
                          text=True, check=False, timeout=300)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    names = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
             if line.startswith("import time:") and "|" in line}
    assert "opencheckpoint.cli.main" in names  # the list is real: the command line itself is in it
    return names


def imported(*args: str) -> set[str]:
    """The top-level packages a ``python -m opencheckpoint ARGS`` run imports."""
    return {name.split(".")[0] for name in imported_modules(*args)}


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


@pytest.mark.parametrize("command", ["inspect", "validate", "ls"])
def test_read_commands_import_no_save_path(run_dir: Path, command: str) -> None:
    target = run_dir if command == "ls" else next(run_dir.glob("checkpoint-*"))
    names = imported_modules(command, str(target))
    assert "opencheckpoint.read.opened" in names  # it did open the checkpoint
    found = sorted(n for n in names if any(n == m or n.startswith(m + ".") for m in WRITE_SIDE))
    assert found == [], found


@pytest.mark.parametrize("command", ["inspect", "validate", "ls"])
def test_read_commands_import_no_pydantic_and_no_rich_when_piped(run_dir: Path, command: str) -> None:
    target = run_dir if command == "ls" else next(run_dir.glob("checkpoint-*"))
    names = imported(command, str(target))
    assert not names & set(NOT_READ_SIDE), sorted(names & set(NOT_READ_SIDE))


def test_ls_imports_no_tree_codec(run_dir: Path) -> None:
    # `ls` reads manifests and sizes (steps 1-11 of spec §15), never a tree document.
    names = imported("ls", str(run_dir))
    assert not names & {"numpy", "msgpack"}, sorted(names & {"numpy", "msgpack"})


@pytest.mark.parametrize(("chosen", "seen"), [(None, "1"), ("4", "4")])
def test_the_command_line_asks_for_one_blas_thread_unless_the_user_chose(chosen: str | None, seen: str) -> None:
    """NumPy's OpenBLAS starts a thread per core on import (a third of ``import numpy``'s CPU); no command needs it."""
    import os

    code = ("import os; import opencheckpoint.cli.main as cli; "
            "cli.main = lambda: print(os.environ.get('OPENBLAS_NUM_THREADS')) or 0; "
            "from opencheckpoint.cli.entry import run; run()")
    env = {key: value for key, value in os.environ.items() if key != "OPENBLAS_NUM_THREADS"}
    if chosen is not None:
        env["OPENBLAS_NUM_THREADS"] = chosen
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                          check=False)
    assert (done.returncode, done.stdout.strip()) == (0, seen), done.stderr[-2000:]
