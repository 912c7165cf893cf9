"""Two saves without an atomic exchange overlapping (R-PUB-6): readers see a whole checkpoint or the race.

One save may move the other's new checkpoint aside before the other deleted its own old copy: for a moment
the name is empty and two whole ``.NAME.oc-old-*`` copies stand beside it. R-PUB-14 reads that as "no
checkpoint" when the copies are leftovers; while a writer that made one still runs it is a race in progress,
reported as ``ConcurrentModification`` (retried once, R-RDR-13), never NotACheckpoint.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from opencheckpoint import Checkpoint, read_component
from opencheckpoint.container.debris import release, working_path
from opencheckpoint.format.errors import ConcurrentModification, NotACheckpoint


def _two_copies_aside(tmp_path: Path, names: tuple[Path, Path]) -> Path:
    target = tmp_path / "ckpt"
    for generation, copy in enumerate(names):
        Checkpoint(config={"generation": generation}, durable=False).save(target)
        shutil.move(target, copy)
    return target


def test_two_copies_moved_aside_by_running_saves_are_a_race(tmp_path: Path) -> None:
    target = tmp_path / "ckpt"
    copies = (working_path(target, "old"), working_path(target, "old"))  # held in use: saves in progress
    try:
        _two_copies_aside(tmp_path, copies)
        with pytest.raises(ConcurrentModification, match="moved aside by saves still running"):
            read_component(target, "config")
    finally:
        for copy in copies:
            release(copy)


def test_two_copies_left_by_ended_writers_are_not_a_checkpoint(tmp_path: Path) -> None:
    target = tmp_path / "ckpt"
    _two_copies_aside(tmp_path, (tmp_path / ".ckpt.oc-old-1-aaaaaaaa", tmp_path / ".ckpt.oc-old-2-bbbbbbbb"))
    with pytest.raises(NotACheckpoint, match="2 of 2"):
        read_component(target, "config")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".ckpt.oc-old-1-aaaaaaaa", ".ckpt.oc-old-2-bbbbbbbb"]
