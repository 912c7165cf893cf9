"""Every command that writes follows the library's save rule: an existing target is refused (exit 1, one line
naming it, nothing changed) unless ``--overwrite``, and what is not the command's own kind of output (a user's
file, a checkpoint where an export would go) is refused even with ``--overwrite``. Through the CLI's ``main()``
in the test process (``cli_in_process``)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cli_in_process import run_cli
from safetensors.numpy import load_file, save_file

from opencheckpoint import Checkpoint, read_component


def snapshot(path: Path) -> dict[str, str]:
    """Every file below ``path`` (or ``path`` itself) with the SHA-256 of its bytes: to show nothing changed."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p.relative_to(path.parent)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def refused(result: subprocess.CompletedProcess[str], target: Path) -> str:
    """The one stderr line of a refusal naming ``target``; the command exited 1."""
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(target) in lines[0] and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.fixture
def weights(tmp_path: Path) -> Path:
    path = tmp_path / "model.safetensors"
    save_file({"w": np.arange(4, dtype=np.float32)}, str(path))
    return path


def test_convert_refuses_an_existing_checkpoint_unless_overwrite(tmp_path: Path, weights: Path) -> None:
    target = Checkpoint(model={"old": np.zeros(2)}).save(tmp_path / "ckpt")
    before = snapshot(target)
    line = refused(run_cli("convert", weights, target), target)
    assert line.endswith("a checkpoint exists here and --overwrite was not given; nothing was changed "
                         "(pass --overwrite to replace it)")
    assert snapshot(target) == before
    assert run_cli("convert", weights, target, "--overwrite").returncode == 0
    assert read_component(target, "model")["w"].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_convert_never_touches_a_folder_that_is_not_a_checkpoint(tmp_path: Path, weights: Path) -> None:
    target = tmp_path / "thesis"
    target.mkdir()
    (target / "chapter1.tex").write_text("chapter 1")
    before = snapshot(target)
    for extra in ((), ("--overwrite",)):
        line = refused(run_cli("convert", weights, target, *extra), target)
        assert "not an OpenCheckpoint checkpoint" in line and "pass --overwrite" not in line
    assert snapshot(target) == before


def test_export_onto_a_checkpoint_is_refused_even_with_overwrite(tmp_path: Path) -> None:
    source = Checkpoint(model={"w": np.ones(3, np.float32)}).save(tmp_path / "src")
    archive = Checkpoint(model={"w": np.zeros(3, np.float32)}, format="archive").save(tmp_path / "run.ocp")
    before = snapshot(archive)
    for extra in ((), ("--overwrite",)):  # the typo: the checkpoint's own name as the export target
        line = refused(run_cli("export", source, archive, *extra), archive)
        assert "not a safetensors file" in line
    assert snapshot(archive) == before
    directory = Checkpoint(model={"w": np.zeros(1)}).save(tmp_path / "dir-ckpt")
    refused(run_cli("export", source, directory, "--overwrite"), directory)


def test_export_replaces_only_an_earlier_export_and_only_with_overwrite(tmp_path: Path) -> None:
    source = Checkpoint(model={"w": np.full(3, 7, np.float32)}).save(tmp_path / "src")
    earlier = tmp_path / "out.safetensors"
    save_file({"old": np.zeros(1, np.float32)}, str(earlier))
    before = snapshot(earlier)
    assert "--overwrite" in refused(run_cli("export", source, earlier), earlier)
    assert snapshot(earlier) == before
    assert run_cli("export", source, earlier, "--overwrite").returncode == 0
    assert load_file(str(earlier))["model.w"].tolist() == [7.0, 7.0, 7.0]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left behind
    notes = tmp_path / "notes.pt"
    notes.write_text("my notes")
    refused(run_cli("export", source, notes, "--to", "torch", "--overwrite"), notes)
    assert notes.read_text() == "my notes"


def test_schema_export_refuses_existing_files_and_never_replaces_a_foreign_one(tmp_path: Path) -> None:
    folder = tmp_path / "schemas"
    assert run_cli("schema", "export", folder).returncode == 0
    manifest_schema = folder / "manifest.schema.json"
    before = snapshot(folder)
    refused(run_cli("schema", "export", folder), manifest_schema)
    assert run_cli("schema", "export", folder, "--overwrite").returncode == 0
    assert snapshot(folder) == before  # the same schemas again
    manifest_schema.write_text("my own notes, not a schema")
    refused(run_cli("schema", "export", folder, "--overwrite"), manifest_schema)
    assert manifest_schema.read_text() == "my own notes, not a schema"


def test_conformance_writer_refuses_an_existing_target(tmp_path: Path) -> None:
    case = Path(__file__).parents[2] / "conformance" / "cases" / "v1"
    expected = next(iter(sorted(case.glob("*/expected.json"))))
    target = Checkpoint(model={"w": np.zeros(2)}).save(tmp_path / "ckpt")
    before = snapshot(target)
    result = run_cli("conformance", "impl", "write", expected, target)
    assert result.returncode == 1 and result.stderr.startswith("error: ") and str(target) in result.stderr
    assert "a checkpoint exists here" in result.stderr
    assert snapshot(target) == before


def test_conformance_reports_are_not_written_over_other_files(tmp_path: Path) -> None:
    mine = tmp_path / "report.json"
    mine.write_text(json.dumps({"my": "data"}))
    result = run_cli("conformance", "run", "--reader", "true", "--json", mine, "--overwrite")
    assert result.returncode == 2 and str(mine) in result.stderr
    assert json.loads(mine.read_text()) == {"my": "data"}
    assert os.listdir(tmp_path) == ["report.json"]
