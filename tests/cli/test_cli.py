"""The command line: documented exit codes (0 ok, 1 invalid/unreadable, 2 usage) and --help everywhere."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from opencheckpoint import Checkpoint


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "opencheckpoint", *args], capture_output=True, text=True,
                          check=False)


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    return Checkpoint(model={"w": np.arange(6, dtype=np.float32).reshape(2, 3)}, config={"lr": 0.1}).save(
        tmp_path / "ckpt", metadata={"step": 5})


@pytest.mark.parametrize("command", [[], ["validate"], ["inspect"], ["schema"], ["schema", "export"],
                                     ["migrations"]])
def test_every_command_has_help(command: list[str]) -> None:
    done = run(*command, "--help")
    assert done.returncode == 0
    assert "usage: opencheckpoint" in done.stdout
    assert "exit codes" in done.stdout


def test_validate_valid_checkpoint_exits_0(checkpoint: Path) -> None:
    done = run("validate", str(checkpoint))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "valid" in done.stdout


def test_validate_corrupt_checkpoint_exits_1_and_lists_file_field_section(checkpoint: Path) -> None:
    data = checkpoint / "components" / "model" / "data.bin"
    raw = bytearray(data.read_bytes())
    raw[0] ^= 0xFF
    data.write_bytes(bytes(raw))
    done = run("validate", "--json", str(checkpoint))
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["ok"] is False
    files = {e["file"] for e in report["errors"]}
    assert "components/model/data.bin" in files
    assert all(e["rule"] and e["error"] == "IntegrityError" for e in report["errors"])


def test_validate_missing_path_exits_1(tmp_path: Path) -> None:
    done = run("validate", str(tmp_path / "nothing"))
    assert done.returncode == 1
    assert "NotACheckpoint" in done.stdout


def test_usage_error_exits_2() -> None:
    assert run("validate").returncode == 2
    assert run("no-such-command").returncode == 2


def test_inspect_reads_metadata_only(checkpoint: Path) -> None:
    # Overwrite the array bytes: inspect must not need them (only the file's presence and size).
    data = checkpoint / "components" / "model" / "data.bin"
    data.write_bytes(b"\xff" * len(data.read_bytes()))
    done = run("inspect", "--json", str(checkpoint))
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["metadata"] == {"step": 5}
    arrays = summary["components"]["model"]["arrays"]
    assert arrays == [{"path": "$.w", "dtype": "float32", "shape": [2, 3], "nbytes": 24}]
    assert summary["components"]["config"]["kind"] == "json"


def test_inspect_human_output_names_components(checkpoint: Path) -> None:
    done = run("inspect", str(checkpoint))
    assert done.returncode == 0
    assert "model" in done.stdout and "float32" in done.stdout and "config" in done.stdout


def test_migrations_prints_the_declared_chain() -> None:
    done = run("migrations")
    assert done.returncode == 0
    assert json.loads(done.stdout) == {"current_version": 2, "steps": [{
        "from_version": 1, "to_version": 2, "payload_kinds": [],
        "description": "adds sharded arrays (tree tag 10) and per-rank shard data files in tree components of "
                       "kind_version 2"}]}


def test_save_error_names_the_component_and_the_field(tmp_path: Path) -> None:
    from opencheckpoint import UnsupportedValue

    with pytest.raises(UnsupportedValue) as info:
        Checkpoint(model={"layer": {"w": object()}}).save(tmp_path / "ckpt")
    assert info.value.file == "component 'model'"
    assert info.value.field == "$.layer.w"
    assert not (tmp_path / "ckpt").exists()
