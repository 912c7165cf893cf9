"""One writer path: Checkpoint.save and the conformance writer build the manifest the same way."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from opencheckpoint import Checkpoint
from opencheckpoint.conformance.canonical import render_checkpoint
from opencheckpoint.conformance.writer import write_rendering

PRODUCER = {"name": "my-writer", "version": "3"}


def _manifest(path: Path) -> dict[str, object]:
    body: dict[str, object] = json.loads((path / "manifest.json").read_bytes())
    return body


def test_save_names_the_producer_it_is_given(tmp_path: Path) -> None:
    path = Checkpoint(durable=False, w=np.arange(3.0)).save(tmp_path / "c", producer=PRODUCER)
    assert _manifest(path)["producer"] == PRODUCER
    default = Checkpoint(durable=False, w=np.arange(3.0)).save(tmp_path / "d")
    producer = _manifest(default)["producer"]
    assert isinstance(producer, dict) and producer["name"] == "opencheckpoint-python"
    assert "numpy" in producer["environment"]


def test_conformance_writer_reproduces_a_save_byte_for_byte(tmp_path: Path) -> None:
    """Same content, id, time and producer: both writers emit the same manifest bytes (one builder)."""
    state = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "step": 7}
    saved = Checkpoint(durable=False, model=state, cfg={"lr": 0.5}).save(
        tmp_path / "saved", checkpoint_id="same", created_at="2026-01-01T00:00:00Z", producer=PRODUCER,
        metadata={"run": "a"})
    rendering = render_checkpoint(saved)
    written = write_rendering(rendering, tmp_path / "written", durable=False)
    assert (written / "manifest.json").read_bytes() == (saved / "manifest.json").read_bytes()
    for rel in ("components/model/tree.msgpack", "components/model/data.bin", "components/cfg/value.json"):
        assert (written / rel).read_bytes() == (saved / rel).read_bytes(), rel
