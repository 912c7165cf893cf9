"""Rotation and resume never lose the last good checkpoint (spec R-PUB-19): pruning deletes only what the
rotation wrote, never the checkpoint just saved nor the newest valid one; restore falls back past a newest
checkpoint that fails verification, with a warning, and leaves it on disk."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pytest

from opencheckpoint import Checkpoint, IntegrityError, validate
from opencheckpoint.run import ROTATION_KEY, Rotation, RunCheckpointer
from opencheckpoint.run.rotation_state import STATE_NAME


def listing(directory: Path) -> list[str]:
    """The directory's entries, without the rotation's own state file."""
    return sorted(n for n in os.listdir(directory) if n != STATE_NAME)


def flip_a_data_byte(checkpoint: Path) -> None:
    data = checkpoint / "components" / "weights" / "data.bin"
    raw = bytearray(data.read_bytes())
    raw[0] ^= 0x01
    data.write_bytes(bytes(raw))


def make_run(directory: Path, **kwargs: object) -> tuple[RunCheckpointer, dict[str, np.ndarray]]:
    weights = {"w": np.zeros(4)}
    return RunCheckpointer(Checkpoint(weights=weights), directory, **kwargs), weights  # type: ignore[arg-type]


def test_hand_made_checkpoints_matching_the_pattern_are_never_pruned(tmp_path: Path) -> None:
    hand_made = [Checkpoint(weights={"w": np.ones(2)}).save(tmp_path / name)
                 for name in ("checkpoint-5", "checkpoint-000000000006", "checkpoint-000000000007.ocp")]
    rotation = Rotation(tmp_path, keep_last=1)
    for step in (10, 20, 30):
        rotation.save(Checkpoint(weights={"w": np.zeros(2)}), step)
    assert all(validate(p).ok for p in hand_made)
    assert listing(tmp_path) == sorted([p.name for p in hand_made] + ["checkpoint-000000000030"])
    assert [e.owned for e in rotation.entries()] == [False, False, False, True]


def test_a_foreign_higher_step_checkpoint_does_not_make_new_saves_vanish(tmp_path: Path) -> None:
    foreign = Checkpoint(weights={"w": np.ones(2)}).save(tmp_path / "checkpoint-000000999999")
    rotation = Rotation(tmp_path, keep_last=1)
    for step in (1, 2, 3):
        saved = rotation.save(Checkpoint(weights={"w": np.full(2, step)}), step)
        assert saved.exists() and validate(saved).ok
        assert rotation.latest() == saved  # the run's own newest, not the foreign step 999999
    assert listing(tmp_path) == ["checkpoint-000000000003", foreign.name]


def test_resume_from_an_older_step_then_save_keeps_a_valid_checkpoint(tmp_path: Path) -> None:
    """keep_last=1, resume from step 10 while 20 and 30 exist: the new save stays, and is the latest."""
    first, weights = make_run(tmp_path / "run", interval=10, keep_last=3)
    for step in (10, 20, 30):
        weights["w"][:] = step
        first.save(step)
    again, live = make_run(tmp_path / "run", interval=10, keep_last=1, resume_path=first.rotation.path_for(10))
    assert again.restore() == 10 and live["w"][0] == 10
    live["w"][:] = 15
    path = again.save(20)
    assert path is not None and path.exists() and validate(path).ok
    assert again.rotation.latest() == path
    # The steps above the resumed one from the abandoned run are older writes: pruned as keep_last says.
    assert listing(tmp_path / "run") == [path.name]
    fresh, restored = make_run(tmp_path / "run", interval=10, keep_last=1)
    assert fresh.restore() == 20 and restored["w"][0] == 15


def test_steps_above_the_resumed_step_stay_until_they_fall_out_of_keep_last(tmp_path: Path) -> None:
    rotation = Rotation(tmp_path, keep_last=3)
    ckpt = Checkpoint(weights={"w": np.zeros(2)})
    for step in (10, 20, 30):
        rotation.save(ckpt, step)
    saved = rotation.save(ckpt, 11)  # resumed at 10, then saved 11
    assert [e.step for e in rotation.entries()] == [11, 20, 30]  # 10 is the oldest write: pruned
    assert rotation.latest() == saved  # never the abandoned 30
    rotation.save(ckpt, 12)
    rotation.save(ckpt, 13)
    assert [e.step for e in rotation.entries()] == [11, 12, 13]


def test_restore_falls_back_past_a_bit_flipped_newest_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run, weights = make_run(tmp_path, interval=1, keep_last=3)
    for step in (1, 2, 3):
        weights["w"][:] = step
        run.save(step)
    newest = run.rotation.path_for(3)
    flip_a_data_byte(newest)
    fresh, restored = make_run(tmp_path, interval=1, keep_last=3)
    with caplog.at_level(logging.WARNING, logger="opencheckpoint.run"):
        assert fresh.restore() == 2
    assert restored["w"].tolist() == [2.0] * 4
    warning = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert newest.name in warning and "crc32c" in warning.lower()
    assert newest.exists() and not validate(newest).ok  # kept for inspection, never deleted silently
    result = fresh.rotation.load_latest(fresh.checkpoint)
    assert result.manifest["metadata"]["step"] == 2
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="opencheckpoint.run"):
        fresh.save(3)  # the resumed run writes step 3 again: over the corrupt one, and it says so
    assert f"replacing {newest}" in caplog.text and validate(newest).ok


def test_restore_warns_about_a_newest_checkpoint_that_does_not_open(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run, _ = make_run(tmp_path, interval=1)
    run.save(1)
    run.save(2)
    manifest = run.rotation.path_for(2) / "manifest.json"
    manifest.write_bytes(manifest.read_bytes().replace(b'"format"', b'"formaT"'))
    fresh, _ = make_run(tmp_path, interval=1)
    with caplog.at_level(logging.WARNING, logger="opencheckpoint.run"):
        assert fresh.restore() == 1
    assert "checkpoint-000000000002" in caplog.text and manifest.exists()


def test_every_checkpoint_failing_raises_the_newest_error_and_deletes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run, _ = make_run(tmp_path, interval=1)
    for step in (1, 2):
        run.save(step)
        flip_a_data_byte(run.rotation.path_for(step))
    fresh, _ = make_run(tmp_path, interval=1)
    with caplog.at_level(logging.WARNING, logger="opencheckpoint.run"), pytest.raises(IntegrityError, match="crc32c"):
        fresh.restore()
    skipped = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(skipped) == 2 and "000000000002" in skipped[0] and "000000000001" in skipped[1]  # newest first
    assert listing(tmp_path) == ["checkpoint-000000000001", "checkpoint-000000000002"]


def test_pruning_never_deletes_the_newest_valid_checkpoint(tmp_path: Path) -> None:
    rotation = Rotation(tmp_path, keep_last=3)
    ckpt = Checkpoint(weights={"w": np.ones(4)})
    for step in (1, 2, 3):
        rotation.save(ckpt, step)
    flip_a_data_byte(rotation.path_for(3))
    flip_a_data_byte(rotation.path_for(2))
    rotation.keep_last = 1
    # 3 stays by keep_last; 1 stays as the newest checkpoint that passes validation; 2 goes by the policy.
    assert rotation.prune() == [rotation.path_for(2)]
    assert [e.step for e in rotation.entries()] == [1, 3]
    assert rotation.prune() == []


def test_the_mark_is_recorded_in_the_manifest_metadata(tmp_path: Path) -> None:
    rotation = Rotation(tmp_path, prefix="policy")
    path = rotation.save(Checkpoint(weights={"w": np.ones(1)}), 7, metadata={ROTATION_KEY: "user value"})
    (entry,) = rotation.entries()
    assert entry.owned and entry.sequence == 1 and entry.path == path
    assert Rotation(tmp_path, prefix="policy").entries()[0].owned  # recognised by a new process too


def test_the_latest_is_found_while_the_run_prunes_every_name_a_listing_found(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader resolving the run's latest checkpoint while the run saves two more (each pruning beyond
    keep_last=2) before the scan opens the names it listed: two checkpoints stood there at every instant, so
    the answer is the newest, not "neither a checkpoint nor a run directory" (NotACheckpoint)."""
    import opencheckpoint.run.rotation as rotation_module
    from opencheckpoint.run import resolve_checkpoint_path

    writer = Rotation(tmp_path, keep_last=2)
    for step in (1, 2):
        writer.save(Checkpoint(weights={"w": np.full(2, step)}, durable=False), step)
    opened = rotation_module.CheckpointReader
    ran: list[int] = []

    def the_run_saves_twice_first(path: object, *args: object, **kwargs: object) -> object:
        if not ran:
            for step in (3, 4):
                ran.append(step)
                writer.save(Checkpoint(weights={"w": np.full(2, step)}, durable=False), step)
        return opened(path, *args, **kwargs)

    monkeypatch.setattr(rotation_module, "CheckpointReader", the_run_saves_twice_first)
    assert resolve_checkpoint_path(tmp_path) == tmp_path / "checkpoint-000000000004"
    assert ran == [3, 4] and listing(tmp_path) == ["checkpoint-000000000003", "checkpoint-000000000004"]
