"""RunCheckpointer as torchrl's: directory=None disables saving, config kept on resume, a final save on exit."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from opencheckpoint import Checkpoint, read_component
from opencheckpoint.run.checkpointer import Rotation, RunCheckpointer


def _run(directory: Path | None, **kwargs: Any) -> tuple[RunCheckpointer, dict[str, Any], dict[str, Any]]:
    state: dict[str, Any] = {"step": 0}
    config: dict[str, Any] = {"lr": 0.1}
    return RunCheckpointer(Checkpoint(state=state, config=config), directory, interval=10, **kwargs), state, config


def test_directory_none_never_saves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    run, _, _ = _run(None)
    assert run.rotation is None
    assert [run.save(step) for step in (10, 20)] == [None, None]
    assert run.save(25, force=True) is None and run.finish() is None
    assert run.last_saved_step is None and os.listdir(tmp_path) == []


def test_directory_none_still_resumes_from_a_resume_path(tmp_path: Path) -> None:
    writer, state, _ = _run(tmp_path / "run")
    state["step"] = 10
    saved = writer.save(10)
    assert saved is not None
    reader, live, _ = _run(None, resume_path=saved)
    assert reader.restore() == 10 and live["step"] == 10
    from_dir, live_dir, _ = _run(None, resume_path=tmp_path / "run")
    assert from_dir.restore() == 10 and live_dir["step"] == 10
    assert _run(None)[0].restore() is None
    assert reader.save(20) is None and Rotation(tmp_path / "run").checkpoints() == [saved]


def test_resume_keeps_the_scripts_config_unless_asked(tmp_path: Path) -> None:
    writer, state, config = _run(tmp_path / "run")
    state["step"], config["lr"] = 10, 0.1
    path = writer.save(10)
    assert path is not None and read_component(path, "config") == {"lr": 0.1}
    resumed, live_state, live_config = _run(tmp_path / "run")
    live_config["lr"] = 0.01  # the script was restarted with a new learning rate
    assert resumed.restore() == 10
    assert live_state["step"] == 10 and live_config == {"lr": 0.01}
    assert resumed.last_load is not None and "config" not in resumed.last_load.loaded
    overwriting, _, old_config = _run(tmp_path / "run", overwrite_config=True)
    old_config["lr"] = 0.01
    assert overwriting.restore() == 10 and old_config == {"lr": 0.1}


def test_leaving_the_block_normally_saves_the_last_step(tmp_path: Path) -> None:
    run, state, _ = _run(tmp_path / "run")
    with run:
        for step in range(1, 26):
            state["step"] = step
            run.save(step)
    rotation = Rotation(tmp_path / "run", keep_last=5)
    assert [p.name[-2:] for p in rotation.checkpoints()] == ["10", "20", "25"]
    assert read_component(rotation.latest(), "state") == {"step": 25}


def test_leaving_the_block_by_an_exception_saves_nothing_more(tmp_path: Path) -> None:
    run, state, _ = _run(tmp_path / "run")
    with pytest.raises(RuntimeError), run:
        for step in range(1, 16):
            state["step"] = step
            run.save(step)
            if step == 15:
                raise RuntimeError("diverged")
    assert [p.name[-2:] for p in Rotation(tmp_path / "run").checkpoints()] == ["10"]


def test_finish_saves_once_and_only_an_unsaved_step(tmp_path: Path) -> None:
    run, _, _ = _run(tmp_path / "run")
    assert run.finish() is None  # no step yet
    run.save(10)
    assert run.finish() is None  # step 10 is saved already
    run.save(13)
    first = run.finish()
    assert first is not None and first.name.endswith("13")
    assert run.finish() is None
    assert run.finish(14) is not None
