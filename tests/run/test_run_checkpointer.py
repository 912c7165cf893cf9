"""RunCheckpointer: interval, force, exclude, optional, restore (latest or resume_path)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from opencheckpoint import Checkpoint, IncompatibleComponent, NotACheckpoint, open_checkpoint
from opencheckpoint.run.checkpointer import RunCheckpointer


def make(tmp_path: Path, **kwargs: object) -> tuple[RunCheckpointer, dict, dict]:
    weights = {"w": np.zeros(2)}
    buffer = {"items": [1, 2, 3]}
    ckpt = Checkpoint(weights=weights, buffer=buffer)
    return RunCheckpointer(ckpt, tmp_path / "run", **kwargs), weights, buffer  # type: ignore[arg-type]


def saved_steps(run: RunCheckpointer) -> list[int]:
    return [e.step for e in run.rotation.entries()]


def test_interval_and_force(tmp_path: Path) -> None:
    run, _, _ = make(tmp_path, interval=10, keep_last=10)
    results = {step: run.save(step) for step in range(1, 26)}
    assert [s for s, path in results.items() if path is not None] == [10, 20]
    assert run.save(25, force=True) is not None
    assert run.save(25, force=True) is None  # already saved at this step
    assert saved_steps(run) == [10, 20, 25]
    with open_checkpoint(run.rotation.latest()) as reader:  # type: ignore[arg-type]
        metadata = reader.manifest["metadata"]
        assert metadata["step"] == 25
        assert metadata["opencheckpoint.rotation"] | {"rotation": "", "writer": ""} == {
            "prefix": "checkpoint", "step": 25, "sequence": 3, "name": "checkpoint-000000000025", "rotation": "",
            "writer": ""}


def test_keep_last_applies(tmp_path: Path) -> None:
    run, _, _ = make(tmp_path, interval=1, keep_last=2)
    for step in range(1, 6):
        run.save(step)
    assert saved_steps(run) == [4, 5]


def test_exclude_leaves_component_out(tmp_path: Path) -> None:
    run, _, _ = make(tmp_path, interval=1, exclude=("buffer",))
    path = run.save(1)
    with open_checkpoint(path) as reader:  # type: ignore[arg-type]
        assert set(reader.components) == {"weights"}
    assert run.components == ["weights"]


def test_restore_latest_returns_step_and_skips_excluded(tmp_path: Path) -> None:
    run, weights, buffer = make(tmp_path, interval=5, exclude=("buffer",))
    assert run.restore() is None  # nothing saved yet
    weights["w"][:] = 5
    run.save(5)
    weights["w"][:] = 10
    run.save(10)
    weights["w"][:] = -1
    buffer["items"] = ["rebuilt"]
    fresh, fresh_weights, fresh_buffer = make(tmp_path, interval=5, exclude=("buffer",))
    assert fresh.restore() == 10
    assert fresh_weights["w"].tolist() == [10.0, 10.0]
    assert fresh_buffer["items"] == [1, 2, 3]  # untouched: excluded from saving and restoring
    assert fresh.save(12) is None and fresh.save(15) is not None  # the interval counts from the resume step


def test_optional_component_may_be_absent(tmp_path: Path) -> None:
    writer, _, _ = make(tmp_path, interval=1, exclude=("buffer",))
    writer.save(3)
    required, _, _ = make(tmp_path, interval=1)
    with pytest.raises(IncompatibleComponent, match="buffer: missing"):
        required.restore()
    optional, _weights, buffer = make(tmp_path, interval=1, optional=("buffer",))
    assert optional.restore() == 3
    assert buffer["items"] == [1, 2, 3]


def test_optional_component_is_restored_when_present(tmp_path: Path) -> None:
    writer, _, buffer = make(tmp_path, interval=1)
    buffer["items"] = ["saved"]
    writer.save(2)
    reader, _, restored = make(tmp_path, interval=1, optional=("buffer",))
    assert reader.restore() == 2
    assert restored["items"] == ["saved"]


def test_resume_path_checkpoint_or_directory(tmp_path: Path) -> None:
    run, weights, _ = make(tmp_path, interval=1, keep_last=5)
    for step in (1, 2, 3):
        weights["w"][:] = step
        run.save(step)
    elsewhere = tmp_path / "other"
    by_file, w1, _ = make(elsewhere, interval=1, resume_path=run.rotation.path_for(2))
    assert by_file.restore() == 2 and w1["w"][0] == 2
    by_dir, w2, _ = make(elsewhere, interval=1, resume_path=tmp_path / "run")
    assert by_dir.restore() == 3 and w2["w"][0] == 3
    missing, _, _ = make(elsewhere, interval=1, resume_path=tmp_path / "nothing-here")
    with pytest.raises(NotACheckpoint):
        missing.restore()


def test_argument_checks(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        make(tmp_path, interval=0)
    with pytest.raises(KeyError, match="nope"):
        make(tmp_path, interval=1, exclude=("nope",))


def test_keep_best_with_metadata(tmp_path: Path) -> None:
    run, _, _ = make(tmp_path, interval=1, keep_last=1, keep_best=("reward", "max"))
    for step, reward in [(1, 3.0), (2, 9.0), (3, 1.0)]:
        run.save(step, metadata={"reward": reward})
    assert run.rotation.best() == run.rotation.path_for(2)
    assert saved_steps(run) == [2, 3]
