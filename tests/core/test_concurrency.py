"""Readers racing writers see the old checkpoint whole, the new one whole, or a CheckpointError (R-RDR-13, R-RDR-14).

A reader that has opened a checkpoint keeps reading that checkpoint while
another writer replaces it; opening retries once when the name was
replaced under it; two saves racing on a missing target never leak a raw
``OSError``. The subprocess test races a real writer process against
``validate``, ``read_component`` and a lazy reader, bounded in count.
"""

from __future__ import annotations

import functools
import os
import random
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import opencheckpoint.container.directory as directory_module
import opencheckpoint.read.opening as opening_module
import opencheckpoint.tools.inspect as inspect_module
from opencheckpoint import Checkpoint, open_checkpoint, read_component, validate
from opencheckpoint.container import pins, publish
from opencheckpoint.container.debris import release, working_path
from opencheckpoint.format.errors import CheckpointError, ConcurrentModification, NotACheckpoint
from opencheckpoint.format.strict_json import parse_ijson


def _state(generation: int) -> dict[str, Any]:
    """Every value of generation ``g`` holds ``g``: a mix of two checkpoints is visible at once."""
    return {"model": {f"w{i}": np.full(256 + generation, generation, np.int64) for i in range(4)},
            "config": {"generation": generation}}


def _save(path: Path, generation: int, form: str = "directory") -> Path:
    return Checkpoint(**_state(generation), durable=False, format=form).save(path)  # type: ignore[arg-type]


@pytest.fixture(params=[True, False], ids=["exchange", "rename-aside"])
def publication(request: pytest.FixtureRequest) -> Iterator[bool]:
    """Both directory replacement procedures: RENAME_EXCHANGE (R-PUB-5) and rename aside (R-PUB-6)."""
    saved = publish.USE_EXCHANGE
    publish.USE_EXCHANGE = request.param
    yield request.param
    publish.USE_EXCHANGE = saved


@pytest.mark.parametrize("form", ["directory", "archive"])
def test_lazy_reader_keeps_reading_the_checkpoint_it_opened(tmp_path: Path, form: str, publication: bool) -> None:
    path = _save(tmp_path / "ckpt", 1, form)
    with open_checkpoint(path) as held:
        # Replaced twice while held: the first checkpoint's files are deleted from disk.
        _save(path, 2, form)
        _save(path, 3, form)
        assert read_component(path, "config") == {"generation": 3}
        lazy = held.tree("model")
        assert {key: lazy[key].read()[0] for key in lazy} == {f"w{i}": 1 for i in range(4)}
        assert all(lazy[key].shape == (257,) for key in lazy)
        eager = held.read("model")
        assert all((array == 1).all() and array.shape == (257,) for array in eager.values())
        assert held.read("config") == {"generation": 1}
        live = {f"w{i}": np.zeros(257, np.int64) for i in range(4)}
        held.read_into("model", live)
        assert all((array == 1).all() for array in live.values())


def test_a_file_the_reader_could_not_hold_is_a_concurrent_modification(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, publication: bool) -> None:
    """Beyond the descriptor budget files are opened when read; one gone by then is reported as a race."""
    monkeypatch.setattr(pins, "PIN_MAX_FILES", 0)
    path = _save(tmp_path / "ckpt", 1)
    with open_checkpoint(path) as held:
        _save(path, 2)
        with pytest.raises(ConcurrentModification, match="another process replaced") as caught:
            held.read("model")
        assert caught.value.rule == "R-RDR-14"
    assert read_component(path, "config") == {"generation": 2}


def test_open_retries_once_when_the_checkpoint_is_replaced_while_opening(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, publication: bool) -> None:
    """The inventory of a checkpoint deleted half-way fails; the name now holds the new one: read that."""
    path = _save(tmp_path / "ckpt", 1)
    original = directory_module.DirectorySource.inventory
    replaced: list[int] = []

    def replace_first(self: directory_module.DirectorySource) -> Any:
        if not replaced:
            replaced.append(1)
            _save(path, 2)  # deletes the checkpoint this source has open
        return original(self)

    monkeypatch.setattr(directory_module.DirectorySource, "inventory", replace_first)
    assert read_component(path, "config") == {"generation": 2}
    assert replaced == [1]


def test_open_reports_a_second_race_as_concurrent_modification(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _save(tmp_path / "ckpt", 1)
    original = directory_module.DirectorySource.inventory
    generation = iter(range(2, 10))

    saving: list[bool] = []

    def replace_always(self: directory_module.DirectorySource) -> Any:
        if not saving:  # a save looks at its target's inventory too (R-PUB-16): replace only around reads
            saving.append(True)
            try:
                _save(path, next(generation))
            finally:
                saving.clear()
        return original(self)

    monkeypatch.setattr(directory_module.DirectorySource, "inventory", replace_always)
    with pytest.raises(ConcurrentModification, match="another process replaced or is writing"):
        open_checkpoint(path)
    report = validate(path)
    assert [issue.error for issue in report.errors] == ["ConcurrentModification"]


def test_two_saves_racing_on_a_missing_target_give_no_raw_os_error(tmp_path: Path) -> None:
    """The second save's rename meets the first one's directory; it reports the race, the winner stays whole."""
    target = tmp_path / "ckpt"
    fired: list[str] = []

    def other_writer_publishes_first(operation: str) -> None:
        if operation == "rename" and not fired:
            fired.append(operation)
            _save(target, 7)

    publish.FAULT_HOOK = other_writer_publishes_first
    try:
        with pytest.raises(ConcurrentModification, match="another process published or is publishing") as caught:
            _save(target, 8)
    finally:
        publish.FAULT_HOOK = None
    assert fired == ["rename"]
    assert isinstance(caught.value, CheckpointError)
    assert validate(target).ok
    assert read_component(target, "config") == {"generation": 7}
    assert not [p for p in tmp_path.iterdir() if p.name != "ckpt"]


def _rename_aside_saves(path: Path, generations: range) -> list[Callable[[], None]]:
    """The file-system steps of saves without an atomic exchange (R-PUB-6), one callable per step: move the
    checkpoint aside, rename the staged one in, delete the old copy. The staged checkpoints are written now."""
    steps: list[Callable[[], None]] = []
    for generation in generations:
        staged = path.parent / f".{path.name}.oc-staging-{generation}-abcdefgh"
        _save(path.parent / f"staged-{generation}", generation).rename(staged)
        old = path.parent / f".{path.name}.oc-old-{generation}-abcdefgh"
        steps += [functools.partial(os.rename, path, old), functools.partial(os.rename, staged, path),
                  functools.partial(shutil.rmtree, old)]
    return steps


@pytest.mark.parametrize("seed", range(6))
def test_a_reader_interleaved_with_rename_aside_saves_sees_a_whole_checkpoint_or_a_named_race(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """Six saves moving the checkpoint aside run 0-3 steps (drawn from ``seed``) every time the reader looks at
    the name or its directory, from each of the first 12 steps: each read, validate or lazy read gets one
    generation, whole, or ConcurrentModification; never NotACheckpoint (once read as "nothing here": a name
    emptied twice between two looks, or found, then moved aside again before it was opened; §12.6)."""
    path = tmp_path / "ckpt"
    pending: list[Callable[[], None]] = []
    strides = random.Random(seed)

    def writer_runs(look: Callable[..., Any]) -> Callable[..., Any]:
        def looking(target: Any, *rest: Any) -> Any:
            if Path(target) == path:
                for _ in range(min(strides.randint(0, 3), len(pending))):
                    pending.pop(0)()
            return look(target, *rest)
        return looking

    for name in ("identity", "look_beside", "check_locatable"):
        monkeypatch.setattr(opening_module, name, writer_runs(getattr(opening_module, name)))
    monkeypatch.setattr(os.path, "exists", writer_runs(os.path.exists))
    outcomes: dict[str, int] = {}
    served_aside = 0
    for start in range(12):
        for entry in tmp_path.iterdir():
            shutil.rmtree(entry)
        _save(path, 1)
        pending[:] = _rename_aside_saves(path, range(2, 8))
        for step in pending[:start]:
            step()
        del pending[:start]
        served_aside += not os.path.lexists(path)
        outcome = _read_once(path, ("read", "validate", "lazy")[start % 3])
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert set(outcomes) <= {"whole", "ConcurrentModification"}, outcomes
    assert outcomes.get("whole", 0) >= 5 and served_aside >= 3, (outcomes, served_aside)


def test_a_first_save_in_progress_is_still_not_a_checkpoint(tmp_path: Path) -> None:
    """A name where nothing was ever published, with a writer at work beside it, is NotACheckpoint (R-PUB-10),
    naming the writer: the reader's one listing shows neither the name nor an old copy."""
    (tmp_path / ".ckpt.oc-staging-12345-abcdef").mkdir()
    with pytest.raises(NotACheckpoint, match="another process is writing a checkpoint here"):
        read_component(tmp_path / "ckpt", "config")


_WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    from opencheckpoint import Checkpoint
    from opencheckpoint.container import pins, publish
    path, form, count, exchange = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
    publish.USE_EXCHANGE = exchange
    for g in range(2, 2 + count):
        state = {"model": {f"w{i}": np.full(256 + g, g, np.int64) for i in range(4)}, "config": {"generation": g}}
        Checkpoint(**state, durable=False, format=form).save(path)
""")


@pytest.mark.parametrize("form", ["directory", "archive"])
def test_readers_racing_a_writer_process_see_whole_checkpoints(tmp_path: Path, form: str,
                                                               publication: bool) -> None:
    path = _save(tmp_path / "ckpt", 1, form)
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(path), form, "25", "1" if publication else "0"])
    outcomes: dict[str, int] = {}
    try:
        while writer.poll() is None:
            for operation in ("validate", "read", "lazy"):
                outcome = _read_once(path, operation)
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
    finally:
        writer.wait(timeout=120)
    assert writer.returncode == 0
    assert not [o for o in outcomes if o.startswith("raw") or o.startswith("mixed")], outcomes
    # Every failure that remains is a race the reader names as such.
    assert set(outcomes) <= {"whole", "ConcurrentModification"}, outcomes
    assert _read_once(path, "lazy") == "whole" and read_component(path, "config") == {"generation": 26}


def _read_once(path: Path, operation: str) -> str:
    """'whole', 'mixed ...', a CheckpointError class name, or 'raw ...' for anything else."""
    try:
        if operation == "validate":
            report = validate(path)
            return "whole" if report.ok else report.errors[0].error
        if operation == "read":
            model = read_component(path, "model")
            generations = {int(a[0]) for a in model.values()} | {a.shape[0] - 256 for a in model.values()}
        else:
            with open_checkpoint(path) as held:
                tree = held.tree("model")
                generations = {int(tree[k].read()[-1]) for k in tree} | {held.read("config")["generation"]}
        return "whole" if len(generations) == 1 else f"mixed {sorted(generations)}"
    except CheckpointError as exc:
        return type(exc).error_class
    except Exception as exc:  # the property under test: nothing else escapes
        return f"raw {type(exc).__name__}: {exc}"


def test_opening_with_no_descriptor_to_spare_holds_fewer_files(tmp_path: Path) -> None:
    """Holding files open is best effort: at the descriptor limit a reader still opens and reads."""
    import gc
    import resource

    path = _save(tmp_path / "ckpt", 1)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    spare: list[int] = []
    held = open_checkpoint(path)  # opened with descriptors to spare, for comparison
    try:
        # Descriptors that earlier tests left to the garbage collector would be closed in the middle of
        # the test and give the reader room it should not have: collect them before filling the table.
        gc.collect()
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 256), hard))
        while True:
            try:
                spare.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                break
        for _ in range(5):  # room to open and list the checkpoint, not to hold its three files too
            os.close(spare.pop())
        with open_checkpoint(path) as tight:
            assert len(tight.source._pinned) < 3  # type: ignore[attr-defined]  # a DirectorySource
            for fd in spare[-8:]:
                os.close(fd)
            del spare[-8:]
            assert tight.read("config") == held.read("config") == {"generation": 1}
    finally:
        for fd in spare:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        held.close()


def test_a_save_whose_target_another_writer_moved_aside_gives_no_raw_os_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without RENAME_EXCHANGE another writer may rename the target aside first (R-PUB-6): report the race."""
    monkeypatch.setattr(publish, "USE_EXCHANGE", False)
    target = _save(tmp_path / "ckpt", 1)
    aside = tmp_path / ".ckpt.oc-old-otherwriter"

    def other_writer_renames_it_first(operation: str) -> None:
        if operation == "rename-old" and not aside.exists():
            os.rename(target, aside)  # the other writer, between its two renames

    publish.FAULT_HOOK = other_writer_renames_it_first
    try:
        with pytest.raises(ConcurrentModification, match="another process published or is publishing"):
            _save(target, 2)
    finally:
        publish.FAULT_HOOK = None
    # Readers still find the previous checkpoint, through the other writer's old copy (R-PUB-13).
    assert read_component(target, "config") == {"generation": 1}


def test_inspect_describes_the_checkpoint_it_opened_when_replaced_meanwhile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _save(tmp_path / "ckpt", 1)
    original = inspect_module.check_structure

    def replaced_first(reader: Any, report: Any) -> Any:
        _save(path, 2)  # deletes the files of the checkpoint being described
        return original(reader, report)

    monkeypatch.setattr(inspect_module, "check_structure", replaced_first)
    summary = inspect_module.describe(path)
    assert summary["ok"], summary["errors"]
    assert {tuple(a["shape"]) for a in summary["components"]["model"]["arrays"]} == {(257,)}


def test_a_rename_aside_save_leaves_another_live_writers_old_copy_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another writer moves the checkpoint aside after this save saw the name present: its old copy is the only
    copy of the checkpoint (R-PUB-13) and its writer runs, so this save reports the race and deletes nothing
    (R-PUB-17, R-PUB-18). It used to delete every old copy: the checkpoint was lost and readers got NotACheckpoint."""
    monkeypatch.setattr(publish, "USE_EXCHANGE", False)
    target = _save(tmp_path / "ckpt", 1)
    others_old = working_path(target, "old")  # named and held as in use by a running writer
    listing = publish._old_copies

    def other_writer_moves_it_aside_first(name: Path) -> list[Path]:
        if os.path.lexists(target):
            os.rename(target, others_old)
        return listing(name)

    monkeypatch.setattr(publish, "_old_copies", other_writer_moves_it_aside_first)
    try:
        with pytest.raises(ConcurrentModification) as caught:
            _save(target, 2)
        assert read_component(target, "config") == {"generation": 1}  # served from the other writer's copy
        assert "another process is publishing" in caught.value.message
    finally:
        release(others_old)


def test_a_rename_aside_save_that_loses_the_final_rename_keeps_no_old_copy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another writer publishes at the name this save moved aside: this save reports the race and drops its
    superseded old copy, which would otherwise outlive it (and stop other writers, above)."""
    monkeypatch.setattr(publish, "USE_EXCHANGE", False)
    target = _save(tmp_path / "ckpt", 1)
    fired: list[str] = []

    def other_writer_publishes_in_the_window(operation: str) -> None:
        if operation == "rename" and not os.path.lexists(target) and not fired:
            fired.append(operation)
            _save(target, 7)

    monkeypatch.setattr(publish, "FAULT_HOOK", other_writer_publishes_in_the_window)
    with pytest.raises(ConcurrentModification, match="another process published or is publishing"):
        _save(target, 2)
    assert fired == ["rename"]
    assert read_component(target, "config") == {"generation": 7}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_a_save_checking_a_target_another_writer_replaces_reports_the_race(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, publication: bool) -> None:
    """R-PUB-16's check lists the target while another writer replaces it and deletes the old folder: what it
    finds half deleted was a checkpoint, so the save reports ConcurrentModification, not TargetExists ("not a
    file a checkpoint can hold"; two writers in a loop met this about once in 100 saves)."""
    import opencheckpoint.container.target as target_module

    target = _save(tmp_path / "ckpt", 1)
    state = {"armed": False, "fired": False}

    def manifest_read(*args: Any, **kwargs: Any) -> Any:
        state["armed"] = not state["fired"]
        return parse_ijson(*args, **kwargs)

    def listing_entry(entry: os.DirEntry[str]) -> str:
        if state["armed"] and not state["fired"]:
            state["fired"] = True
            _save(target, 7)  # the other writer, between this check's manifest read and its listing
        return entry_kind(entry)

    entry_kind = directory_module._entry_kind
    monkeypatch.setattr(target_module, "parse_ijson", manifest_read)
    monkeypatch.setattr(directory_module, "_entry_kind", listing_entry)
    with pytest.raises(ConcurrentModification, match="replaced or is replacing the checkpoint"):
        _save(target, 2)
    assert state["fired"]
    assert read_component(target, "config") == {"generation": 7}


def test_a_rename_aside_save_meeting_another_form_at_the_name_reports_the_race(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In the window of this directory save another writer publishes an archive at the name (the final rename
    meets a file: ``Not a directory``) and moves it aside again before the error is looked at: a race, not a
    raw ``NotADirectoryError`` (seen with two writers alternating forms, 1 in ~900 saves)."""
    monkeypatch.setattr(publish, "USE_EXCHANGE", False)
    target = _save(tmp_path / "ckpt", 1)
    others_old = working_path(target, "old")

    def other_writer_publishes_an_archive(operation: str) -> None:
        if operation == "rename" and not os.path.lexists(target):
            monkeypatch.setattr(publish, "FAULT_HOOK", None)
            _save(target, 7, "archive")

    settle = publish._settle_old_copy

    def then_moves_it_aside(old: Path, name: Path) -> None:
        settle(old, name)
        os.rename(target, others_old)

    monkeypatch.setattr(publish, "FAULT_HOOK", other_writer_publishes_an_archive)
    monkeypatch.setattr(publish, "_settle_old_copy", then_moves_it_aside)
    try:
        with pytest.raises(ConcurrentModification, match="another process published or is publishing"):
            _save(target, 2)
        assert read_component(target, "config") == {"generation": 7}  # from the other writer's old copy
    finally:
        release(others_old)


def test_inspect_of_a_checkpoint_replaced_before_its_inventory_describes_a_whole_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, publication: bool) -> None:
    """``inspect`` reads the manifest, then lists the files itself: a writer replacing the checkpoint in between
    deleted them, which read as MissingFile ("listed in the manifest but absent"). Now described once more."""
    path = _save(tmp_path / "ckpt", 1)
    listed = inspect_module.check_inventory
    replaced: list[int] = []

    def writer_replaces_it_first(*args: Any) -> None:
        if not replaced:
            replaced.append(2)
            _save(path, 2)
        listed(*args)

    monkeypatch.setattr(inspect_module, "check_inventory", writer_replaces_it_first)
    summary = inspect_module.describe(path)
    assert replaced == [2] and summary["ok"], summary["errors"]
    assert summary["components"]["model"]["kind"] == "tree" and summary["components"]["model"]["arrays"]


def test_inspect_of_a_checkpoint_replaced_before_it_holds_the_files_describes_a_whole_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, publication: bool) -> None:
    """The window after ``inspect``'s inventory, before it holds the files open: a file gone then raised
    MissingFile; the name resolving to another entry makes it a race, described once more."""
    path = _save(tmp_path / "ckpt", 1)
    hold = directory_module.DirectorySource.pin
    replaced: list[int] = []

    def writer_replaces_it_first(source: Any, rels: Any) -> None:
        if not replaced:
            replaced.append(2)
            _save(path, 2)
        hold(source, rels)

    monkeypatch.setattr(directory_module.DirectorySource, "pin", writer_replaces_it_first)
    summary = inspect_module.describe(path)
    assert replaced == [2] and summary["ok"], summary["errors"]
