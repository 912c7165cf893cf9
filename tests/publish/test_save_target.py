"""A save replaces only nothing or a checkpoint (spec R-PUB-16): anything else at the target raises
TargetExists naming the path, and nothing on disk changes."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from opencheckpoint import Checkpoint, CheckpointError, TargetExists, read_component, validate
from opencheckpoint.container import publish


@pytest.fixture(autouse=True)
def _reset_hooks() -> Iterator[None]:
    yield
    publish.FAULT_HOOK = None
    publish.USE_EXCHANGE = True


def snapshot(root: Path) -> dict[str, str]:
    """Every entry below ``root`` (hidden ones too): kind and content hash, or link target."""
    out: dict[str, str] = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = "link:" + os.readlink(path)
            elif path.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def user_folder(path: Path) -> Path:
    path.mkdir()
    (path / "thesis.tex").write_text("\\chapter{One}")
    (path / "figures").mkdir()
    (path / "figures" / "plot.png").write_bytes(b"\x89PNG")
    return path


def checkpoint_with_stray_file(path: Path) -> Path:
    Checkpoint(model={"w": np.ones(3)}).save(path)
    (path / "components" / "model" / "notes.txt").write_text("mine")
    return path


def user_file(path: Path) -> Path:
    path.write_text("my notes")
    return path


def zip_that_is_not_a_checkpoint(path: Path) -> Path:
    path.write_bytes(b"PK\x03\x04" + b"\0" * 60)
    return path


def manifest_of_another_format(path: Path) -> Path:
    path.mkdir()
    (path / "manifest.json").write_text('{"format": "other"}')
    (path / "data.csv").write_text("1,2")
    return path


def symlink_to_a_checkpoint(path: Path) -> Path:
    Checkpoint(model={"w": np.ones(3)}).save(path.with_name("real"))
    path.symlink_to("real")
    return path


MAKERS: dict[str, Callable[[Path], Path]] = {
    "user-folder": user_folder,
    "user-file": user_file,
    "zip-that-is-not-a-checkpoint": zip_that_is_not_a_checkpoint,
    "manifest-of-another-format": manifest_of_another_format,
    "checkpoint-with-a-file-its-manifest-does-not-list": checkpoint_with_stray_file,
    "symlink-to-a-checkpoint": symlink_to_a_checkpoint,
}


@pytest.mark.parametrize("form", ["directory", "archive"])
@pytest.mark.parametrize("maker", sorted(MAKERS))
@pytest.mark.parametrize("use_exchange", [True, False], ids=["exchange", "rename-aside"])
def test_save_onto_what_is_not_a_checkpoint_raises_and_changes_nothing(
    tmp_path: Path, maker: str, form: str, use_exchange: bool
) -> None:
    publish.USE_EXCHANGE = use_exchange
    target = MAKERS[maker](tmp_path / "target")
    before = snapshot(tmp_path)
    for overwrite in (True, False):
        with pytest.raises(TargetExists) as caught:
            Checkpoint(model={"w": np.zeros(3)}, format=form).save(target, overwrite=overwrite)  # type: ignore[arg-type]
        assert str(target) in str(caught.value) and "nothing was changed" in str(caught.value)
        assert isinstance(caught.value, CheckpointError) and caught.value.rule == "R-PUB-16"
    assert snapshot(tmp_path) == before


def test_thesis_in_a_user_folder_survives(tmp_path: Path) -> None:
    """The issue's case: save() onto an existing user folder used to swap it out and delete it."""
    folder = user_folder(tmp_path / "experiment")
    with pytest.raises(TargetExists, match=r"no manifest\.json"):
        Checkpoint(model={"w": np.zeros(3)}).save(folder)
    assert (folder / "thesis.tex").read_text() == "\\chapter{One}"
    assert sorted(os.listdir(tmp_path)) == ["experiment"]  # no staging debris either


@pytest.mark.parametrize("old_form", ["directory", "archive"])
@pytest.mark.parametrize("new_form", ["directory", "archive"])
def test_a_checkpoint_is_replaced_by_default_and_kept_with_overwrite_false(
    tmp_path: Path, old_form: str, new_form: str
) -> None:
    target = tmp_path / "ckpt"
    Checkpoint(model={"step": 1}, format=old_form).save(target)  # type: ignore[arg-type]
    Checkpoint(model={"step": 2}, format=new_form).save(target)  # type: ignore[arg-type]
    assert read_component(target, "model") == {"step": 2} and validate(target).ok
    assert os.listdir(tmp_path) == ["ckpt"]
    with pytest.raises(TargetExists, match="overwrite=False"):
        Checkpoint(model={"step": 3}, format=new_form).save(target, overwrite=False)  # type: ignore[arg-type]
    assert read_component(target, "model") == {"step": 2}


def test_overwrite_false_keeps_an_existing_checkpoint(tmp_path: Path) -> None:
    target = tmp_path / "ckpt"
    Checkpoint(model={"step": 1}).save(target, overwrite=False)  # nothing there: saves
    before = snapshot(tmp_path)
    with pytest.raises(TargetExists, match="overwrite=False"):
        Checkpoint(model={"step": 2}).save(target, overwrite=False)
    assert snapshot(tmp_path) == before


def test_overwrite_false_also_keeps_a_checkpoint_whose_name_is_missing(tmp_path: Path) -> None:
    """An interrupted rename-aside replacement leaves the checkpoint at .NAME.oc-old-* (readers use it)."""
    publish.USE_EXCHANGE = False
    target = tmp_path / "ckpt"
    Checkpoint(model={"step": 1}).save(target)

    def interrupt(operation: str) -> None:
        if operation == "rename" and not target.exists():
            raise KeyboardInterrupt

    publish.FAULT_HOOK = interrupt
    with pytest.raises(KeyboardInterrupt):
        Checkpoint(model={"step": 2}).save(target)
    publish.FAULT_HOOK = None
    assert not target.exists() and read_component(target, "model") == {"step": 1}
    with pytest.raises(TargetExists, match="overwrite=False"):
        Checkpoint(model={"step": 3}).save(target, overwrite=False)
    assert read_component(target, "model") == {"step": 1}
    Checkpoint(model={"step": 3}).save(target)  # the default replaces it, and the old copy goes
    assert read_component(target, "model") == {"step": 3} and os.listdir(tmp_path) == ["ckpt"]


def test_an_empty_directory_and_a_damaged_checkpoint_may_be_replaced_a_hidden_file_may_not(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    Checkpoint(model={"step": 1}).save(empty)
    assert read_component(empty, "model") == {"step": 1}
    hidden_only = tmp_path / "hidden-only"
    hidden_only.mkdir()
    (hidden_only / ".keep").write_text("")  # not empty: a file of yours
    with pytest.raises(TargetExists):
        Checkpoint(model={"step": 1}).save(hidden_only)
    assert os.listdir(hidden_only) == [".keep"]
    damaged = tmp_path / "damaged"
    Checkpoint(model={"w": np.ones(1000)}).save(damaged)
    data = damaged / "components" / "model" / "data.bin"
    data.write_bytes(data.read_bytes()[:100])  # truncated: still recognisably a checkpoint
    (damaged / "components" / "model" / "tree.msgpack").unlink()  # a listed file missing: still one
    assert not validate(damaged).ok
    Checkpoint(model={"step": 2}).save(damaged)
    assert read_component(damaged, "model") == {"step": 2}


def test_something_put_at_the_target_during_the_save_is_not_replaced(tmp_path: Path) -> None:
    """The target is checked again just before publication."""
    target = tmp_path / "ckpt"

    def meanwhile(operation: str) -> None:
        if operation == "write-manifest" and not target.exists():
            user_folder(target)

    publish.FAULT_HOOK = meanwhile
    with pytest.raises(TargetExists):
        Checkpoint(model={"step": 1}).save(target)
    publish.FAULT_HOOK = None
    assert (target / "thesis.tex").read_text() == "\\chapter{One}"
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]


@pytest.mark.parametrize("moment", ["write-archive", "rename"])
def test_an_archive_save_rechecks_the_target_as_its_last_step(tmp_path: Path, moment: str) -> None:
    """A folder or file put at the target while the archive is packed, or just before the rename, stays."""
    target = tmp_path / "ckpt"

    def meanwhile(operation: str) -> None:
        if operation == moment and not os.path.lexists(target):
            user_folder(target) if moment == "write-archive" else user_file(target)

    publish.FAULT_HOOK = meanwhile
    with pytest.raises(TargetExists) as caught:
        Checkpoint(model={"step": 1}, format="archive").save(target)
    publish.FAULT_HOOK = None
    assert caught.value.file == str(target)
    if moment == "write-archive":
        assert (target / "thesis.tex").read_text() == "\\chapter{One}"
    else:
        assert target.read_bytes() == b"my notes"
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]


@pytest.mark.parametrize("use_exchange", [True, False], ids=["exchange", "rename-aside"])
@pytest.mark.parametrize("form", ["directory", "archive"])
def test_what_a_replacement_swaps_away_is_put_back_unless_it_is_a_checkpoint(
    tmp_path: Path, form: str, use_exchange: bool
) -> None:
    """A checkpoint swapped for a user folder between the last check and the rename is not deleted."""
    publish.USE_EXCHANGE = use_exchange
    target = tmp_path / "ckpt"
    Checkpoint(model={"step": 1}).save(target)
    operation_before_rename = "exchange" if use_exchange else "rename-old"

    def swap_in_a_user_folder(operation: str) -> None:
        if operation == operation_before_rename and not (tmp_path / "moved-by-user").exists():
            os.rename(target, tmp_path / "moved-by-user")
            user_folder(target)

    publish.FAULT_HOOK = swap_in_a_user_folder
    with pytest.raises(TargetExists) as caught:
        Checkpoint(model={"step": 2}, format=form).save(target)  # type: ignore[arg-type]
    publish.FAULT_HOOK = None
    assert caught.value.file == str(target) and "while the checkpoint was being written" in caught.value.message
    assert (target / "thesis.tex").read_text() == "\\chapter{One}"
    assert sorted(os.listdir(tmp_path)) == ["ckpt", "moved-by-user"]


@pytest.mark.parametrize("where", ["inside a checkpoint", "below a file"])
def test_a_target_inside_a_checkpoint_or_below_a_file_is_refused(tmp_path: Path, where: str) -> None:
    outer = tmp_path / "ck"
    Checkpoint(w=np.ones(2)).save(outer)
    (tmp_path / "notes").write_text("mine")
    target = outer / "components" / "new" if where == "inside a checkpoint" else tmp_path / "notes" / "ckpt"
    before = snapshot(tmp_path)
    with pytest.raises(TargetExists) as caught:
        Checkpoint(v=np.zeros(1)).save(target)
    assert caught.value.file == str(target)
    assert snapshot(tmp_path) == before and validate(outer).ok


def test_a_checkpoint_holding_a_folder_of_yours_is_not_replaced(tmp_path: Path) -> None:
    target = tmp_path / "ck"
    Checkpoint(w=np.ones(2)).save(target)
    (target / "mine" / "sub").mkdir(parents=True)  # empty, but not the checkpoint's
    before = snapshot(tmp_path)
    with pytest.raises(TargetExists, match="'mine/' inside it is a folder"):
        Checkpoint(w=np.zeros(2)).save(target)
    assert snapshot(tmp_path) == before
