"""Rotation: names, keep_last, keep_best, prune, latest/best, load_latest; resolve_checkpoint_path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from opencheckpoint import Checkpoint, NotACheckpoint
from opencheckpoint.run import Rotation, resolve_checkpoint_path
from opencheckpoint.run.rotation_state import STATE_NAME


def names(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


def test_names_and_keep_last(tmp_path: Path) -> None:
    rotation = Rotation(tmp_path, keep_last=2)
    ckpt = Checkpoint(value={"x": 1})
    saved = [rotation.save(ckpt, step) for step in (1, 1234, 20)]
    assert saved[1].name == "checkpoint-000000001234"
    # keep_last counts saves in the order they were written; the list is in step order
    assert names(rotation.checkpoints()) == ["checkpoint-000000000020", "checkpoint-000000001234"]
    assert rotation.latest() == saved[2]  # the most recent save, not the highest step
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != STATE_NAME) == names(rotation.checkpoints())


@pytest.mark.parametrize("mode,expected", [("min", 2), ("max", 3)])
def test_keep_best_survives_pruning(tmp_path: Path, mode: str, expected: int) -> None:
    rotation = Rotation(tmp_path, keep_last=1, keep_best=("loss", mode))  # type: ignore[arg-type]
    ckpt = Checkpoint(value=[0])
    for step, loss in [(1, 0.5), (2, 0.1), (3, 0.9), (4, 0.3)]:
        rotation.save(ckpt, step, metadata={"loss": loss})
    assert rotation.best() == rotation.path_for(expected)
    assert rotation.latest() == rotation.path_for(4)
    assert set(rotation.checkpoints()) == {rotation.path_for(expected), rotation.path_for(4)}


def test_best_ties_prefer_newer_and_newest_is_never_pruned(tmp_path: Path) -> None:
    rotation = Rotation(tmp_path, keep_last=1, keep_best=("score", "max"))
    ckpt = Checkpoint(value=[0])
    rotation.save(ckpt, 1, metadata={"score": 5})
    rotation.save(ckpt, 2, metadata={"score": 5})
    assert rotation.best() == rotation.path_for(2)
    assert rotation.checkpoints() == [rotation.path_for(2)]


def test_keep_best_requires_the_metric(tmp_path: Path) -> None:
    rotation = Rotation(tmp_path, keep_best=("loss", "min"))
    with pytest.raises(ValueError, match="loss"):
        rotation.save(Checkpoint(value=[0]), 1, metadata={"other": 1.0})
    with pytest.raises(ValueError, match="loss"):
        rotation.save(Checkpoint(value=[0]), 1, metadata={"loss": "low"})


def test_prune_returns_removed_and_leaves_foreign_entries(tmp_path: Path) -> None:
    rotation = Rotation(tmp_path, keep_last=3)
    ckpt = Checkpoint(value=[0])
    for step in range(1, 5):
        rotation.save(ckpt, step)
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "checkpoint-000000000000").mkdir()  # looks like one, has no manifest: never touched
    rotation.keep_last = 1
    assert names(rotation.prune()) == ["checkpoint-000000000002", "checkpoint-000000000003"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != STATE_NAME) == [
        "checkpoint-000000000000", "checkpoint-000000000004", "notes.txt"]


def test_archive_format_and_replacement_of_other_form(tmp_path: Path) -> None:
    rotation = Rotation(tmp_path, keep_last=5)
    ckpt = Checkpoint(value={"w": [1]})
    rotation.save(ckpt, 7)
    archive = rotation.save(ckpt, 7, format="archive")
    assert archive.name == "checkpoint-000000000007.ocp" and archive.is_file()
    assert rotation.checkpoints() == [archive]


def test_load_latest(tmp_path: Path) -> None:
    rotation = Rotation(tmp_path)
    weights = {"w": np.zeros(3)}
    ckpt = Checkpoint(weights=weights)
    for step in (1, 2):
        weights["w"][:] = step
        rotation.save(ckpt, step)
    weights["w"][:] = -1
    result = rotation.load_latest(ckpt)
    mark = {"prefix": "checkpoint", "step": 2, "sequence": 2, "name": "checkpoint-000000000002"}
    assert list(result.manifest["metadata"]) == ["opencheckpoint.rotation"]
    assert mark.items() <= result.manifest["metadata"]["opencheckpoint.rotation"].items()
    assert weights["w"].tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(NotACheckpoint):
        Rotation(tmp_path / "empty").load_latest(ckpt)


def test_prefix_and_argument_checks(tmp_path: Path) -> None:
    rotation = Rotation(tmp_path, prefix="policy")
    path = rotation.save(Checkpoint(value=[1]), 3)
    assert path.name == "policy-000000000003"
    assert Rotation(tmp_path).latest() is None
    for bad in ({"keep_last": 0}, {"prefix": "a/b"}, {"prefix": ""}, {"keep_best": ("loss", "lowest")}):
        with pytest.raises(ValueError):
            Rotation(tmp_path, **bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        rotation.save(Checkpoint(value=[1]), -1)


def test_resolve_checkpoint_path(tmp_path: Path) -> None:
    rotation = Rotation(tmp_path / "run")
    first = rotation.save(Checkpoint(value=[1]), 1)
    second = rotation.save(Checkpoint(value=[1]), 2, format="archive")
    assert resolve_checkpoint_path(tmp_path / "run") == second
    assert resolve_checkpoint_path(first) == first
    assert resolve_checkpoint_path(second) == second
    (tmp_path / "empty").mkdir()
    for not_one in (tmp_path / "empty", tmp_path / "missing"):
        with pytest.raises(NotACheckpoint):
            resolve_checkpoint_path(not_one)
    with pytest.raises(NotACheckpoint):
        resolve_checkpoint_path(tmp_path / "run", prefix="other")
