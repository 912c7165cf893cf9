"""Appendix A's worked example is a valid checkpoint, reads as described, and our writer produces
the same tree and data bytes for the same content."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from opencheckpoint import Checkpoint, read_component, validate

EXAMPLE = Path(__file__).resolve().parents[2] / "spec" / "examples" / "worked-example"


def test_worked_example_validates_and_reads() -> None:
    report = validate(EXAMPLE)
    assert report.ok, report.errors
    model = read_component(EXAMPLE, "model")
    assert list(model) == ["w", "step", "betas"]
    assert model["w"].dtype == np.float32 and model["w"].tolist() == [1.0, -2.0]
    assert model["step"] == 7 and model["betas"] == (0.9, 0.999)
    assert read_component(EXAMPLE, "config") == {"lr": 0.001}


def test_reference_writer_reproduces_the_example_payload(tmp_path: Path) -> None:
    value = {"w": np.array([1.0, -2.0], np.float32), "step": 7, "betas": (0.9, 0.999)}
    out = Checkpoint(model=value).save(tmp_path / "ckpt", checkpoint_id="example-0001",
                                       created_at="2026-11-29T00:00:00Z")
    for name in ("tree.msgpack", "data.bin"):
        ours = (out / "components" / "model" / name).read_bytes()
        theirs = (EXAMPLE / "components" / "model" / name).read_bytes()
        assert ours == theirs, name


def test_worked_example_as_archive_reads_the_same(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(EXAMPLE, copy)
    loaded = read_component(copy, "model")
    archived = Checkpoint(model=loaded).save(tmp_path / "a.zip", format="archive")
    again = read_component(archived, "model")
    assert again["betas"] == (0.9, 0.999) and again["w"].tobytes() == loaded["w"].tobytes()
