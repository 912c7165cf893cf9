"""Saves racing one another: readers see a whole checkpoint or the race, and so does the losing save.

Two saves without an atomic exchange (R-PUB-6) may overlap: one moves the other's new checkpoint aside
before the other deleted its own old copy, so for a moment the name is empty and two whole
``.NAME.oc-old-*`` copies stand beside it. R-PUB-14 reads that as "no checkpoint" when the copies are
leftovers; while a writer that made one still runs it is a race in progress, reported as
``ConcurrentModification`` (retried once, R-RDR-13), never NotACheckpoint. A save that lost its final rename
and looks at what it met while a third writer replaces that reports the race too."""

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


def test_a_save_losing_its_rename_to_a_checkpoint_being_replaced_reports_the_race(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This save's final rename meets writer A's checkpoint, which writer C replaces and deletes while this
    save looks at what it met: a race (ConcurrentModification), not "something was put here" (TargetExists;
    three rename-aside writers in a loop met it once in ~370 saves)."""
    import opencheckpoint.container.directory as directory_module
    from opencheckpoint.container import publish

    target = tmp_path / "ckpt"
    listing_entry = directory_module._entry_kind
    state = {"published": False, "armed": False, "fired": False}

    def writer_a_publishes_first(operation: str) -> None:
        if operation == "rename" and not state["published"]:
            state["published"] = True
            Checkpoint(config={"generation": 7}, durable=False).save(target)
            state["armed"] = True

    def writer_c_replaces_it_while_listed(entry: object) -> str:
        if state["armed"] and not state["fired"]:
            state["fired"] = True
            Checkpoint(config={"generation": 8}, durable=False).save(target)
        return listing_entry(entry)  # type: ignore[arg-type]

    monkeypatch.setattr(publish, "FAULT_HOOK", writer_a_publishes_first)
    monkeypatch.setattr(directory_module, "_entry_kind", writer_c_replaces_it_while_listed)
    with pytest.raises(ConcurrentModification, match="another process published or is publishing"):
        Checkpoint(config={"generation": 2}, durable=False).save(target)
    assert state["fired"]
    assert read_component(target, "config") == {"generation": 8}
