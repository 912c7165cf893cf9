"""Async saves in a run: ``Rotation.save_async`` prunes only after publication, ``RunCheckpointer(async_save=True)``
waits for the previous save before the next, on restore and on leaving its ``with`` block, and raises its error."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from write_hold import hold_writes, reset_fault_hook  # noqa: F401  (an autouse fixture)

from opencheckpoint import Checkpoint, CheckpointError, open_checkpoint, validate
from opencheckpoint.run.checkpointer import Rotation, RunCheckpointer


def names(directory: Path) -> list[str]:
    return sorted(n for n in (p.name for p in directory.iterdir()) if not n.startswith("."))


def test_rotation_prunes_only_after_the_async_save_is_published(tmp_path: Path) -> None:
    rotation = Rotation(tmp_path / "run", keep_last=1)
    weights = {"w": np.zeros(4)}
    checkpoint = Checkpoint(weights=weights)
    rotation.save(checkpoint, 1)
    reached, release = hold_writes("weights")
    handle = rotation.save_async(checkpoint, 2)
    assert reached.wait(30)
    # In flight: the previous checkpoint is still there and still the latest valid one.
    assert names(tmp_path / "run") == ["checkpoint-000000000001"]
    assert rotation.latest() == tmp_path / "run" / "checkpoint-000000000001"
    release.set()
    path = handle.result()
    assert path == tmp_path / "run" / "checkpoint-000000000002"
    assert names(tmp_path / "run") == ["checkpoint-000000000002"] and validate(path).ok


def test_back_to_back_async_saves_get_distinct_sequence_numbers(tmp_path: Path) -> None:
    rotation = Rotation(tmp_path / "run", keep_last=5)
    checkpoint = Checkpoint(value=np.arange(3))
    handles = [rotation.save_async(checkpoint, step) for step in (1, 2, 3)]
    paths = [h.result() for h in handles]
    sequences = []
    for path in paths:
        with open_checkpoint(path) as reader:
            sequences.append(reader.manifest["metadata"]["opencheckpoint.rotation"]["sequence"])
    assert sequences == [1, 2, 3]
    assert rotation.latest() == paths[-1]


def test_run_checkpointer_waits_for_the_previous_save_and_keeps_last(tmp_path: Path) -> None:
    weights = {"w": np.zeros(2)}
    with RunCheckpointer(Checkpoint(weights=weights), tmp_path / "run", interval=1, keep_last=2,
                         async_save=True) as run:
        for step in range(1, 6):
            weights["w"][:] = step
            path = run.save(step)
            assert path == tmp_path / "run" / f"checkpoint-{step:012d}"
            assert run.pending is not None
            weights["w"][:] = -1  # the loop moves on: the saved copy is the state at save time
    assert run.pending is None
    assert names(tmp_path / "run") == ["checkpoint-000000000004", "checkpoint-000000000005"]
    weights["w"][:] = 0
    assert run.restore() == 5 and weights["w"].tolist() == [5.0, 5.0]


def test_run_checkpointer_restore_waits_for_a_save_in_flight(tmp_path: Path) -> None:
    weights = {"w": np.zeros(2)}
    run = RunCheckpointer(Checkpoint(weights=weights), tmp_path / "run", interval=1, async_save=True)
    weights["w"][:] = 3
    reached, release = hold_writes("weights")
    run.save(3)
    assert reached.wait(30)
    threading.Timer(0.2, release.set).start()
    weights["w"][:] = 0
    assert run.restore() == 3 and weights["w"].tolist() == [3.0, 3.0]


def test_run_checkpointer_raises_the_failed_async_save_on_the_next_call(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run = RunCheckpointer(Checkpoint(value=[1]), run_dir, interval=1, async_save=True)
    run_dir.mkdir()
    (run_dir / "checkpoint-000000000001").write_text("not ours")  # a save may not replace this file
    run.save(1)
    with pytest.raises(CheckpointError, match="checkpoint-000000000001"):
        run.wait()
    assert run.pending is None
    assert run.save(2) == run_dir / "checkpoint-000000000002"
    assert run.wait() == run_dir / "checkpoint-000000000002"


def test_leaving_the_with_block_waits_then_saves_the_last_step(tmp_path: Path) -> None:
    weights = {"w": np.zeros(2)}
    with RunCheckpointer(Checkpoint(weights=weights), tmp_path / "run", interval=10, async_save=True) as run:
        for step in range(1, 14):
            weights["w"][:] = step
            run.save(step)
    assert run.pending is None and run.last_saved_step == 13
    assert names(tmp_path / "run") == ["checkpoint-000000000010", "checkpoint-000000000013"]
    assert validate(tmp_path / "run" / "checkpoint-000000000013").ok


def test_a_failed_pending_save_is_raised_after_the_final_save(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "checkpoint-000000000001").write_text("not ours")  # the save of step 1 fails
    run = RunCheckpointer(Checkpoint(value=[1]), run_dir, interval=1, async_save=True)
    with pytest.raises(CheckpointError, match="checkpoint-000000000001"), run:
        run.save(1)
        run.last_step = 2  # the loop went on past the failed save's step
    assert run.last_saved_step == 2 and validate(run_dir / "checkpoint-000000000002").ok


def test_an_exception_in_the_block_still_waits_for_the_pending_save(tmp_path: Path) -> None:
    run = RunCheckpointer(Checkpoint(value=[1]), tmp_path / "run", interval=1, async_save=True)
    with pytest.raises(KeyError), run:
        run.save(1)
        raise KeyError("training failed")
    assert run.pending is None and validate(tmp_path / "run" / "checkpoint-000000000001").ok
    assert names(tmp_path / "run") == ["checkpoint-000000000001"]  # no final save after an exception
