"""Objects with ``load_state_dict``: restored from views of the data file lent to it, then taken back.

``StateDictAdapter`` hands ``load_state_dict`` verified, writeable views of a
private map of the component's data file (one copy into the object's arrays,
no fresh array). Whatever the object does with them, it must end up holding
no array that lives in a map of the checkpoint's file: a later save replaces
that file, and the object's arrays must stay its own, writeable ones.
"""

from __future__ import annotations

import gc
import mmap
import os
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from ckpt_helpers import forms

from opencheckpoint import Checkpoint, IncompatibleComponent, IntegrityError, open_checkpoint
from opencheckpoint.format.errors import ConcurrentModification
from opencheckpoint.read.lent_views import LentTree

FORMS = ["directory", "archive"]
MMAP = mmap.mmap  # the type itself, also while a test replaces the constructor


def is_lent(array: np.ndarray) -> bool:
    """Whether ``array`` views a memory map (of the checkpoint's data file) rather than owning its memory."""
    root = array
    while isinstance(root.base, np.ndarray):
        root = root.base
    return isinstance(root.base, memoryview) and isinstance(root.base.obj, MMAP)


class Copier:
    """Copies what it is given into the arrays it has (the usual object); records whether it was lent views."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.arrays = arrays
        self.calls = 0
        self.lent: list[bool] = []

    def state_dict(self) -> dict[str, np.ndarray]:
        return dict(self.arrays)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.record(state)
        if state.keys() != self.arrays.keys():
            raise KeyError("state keys differ from the object's arrays")
        for key, value in state.items():
            np.copyto(self.arrays[key], value)

    def record(self, state: dict[str, Any]) -> None:
        self.calls += 1
        self.lent.append(all(is_lent(value) for value in state.values()))


class Keeper(Copier):
    """Stores the arrays it is given instead of copying them."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.record(state)
        self.arrays = dict(state)


def stored() -> dict[str, np.ndarray]:
    return {
        "w": np.arange(12, dtype=np.float32).reshape(3, 4),
        "bf": np.arange(5, dtype=np.float32).astype(ml_dtypes.bfloat16),
        "scalar": np.array(7, dtype=np.int64),
        "mask": np.array([True, False, True]),
        "c": np.array([1 + 2j, -3j], dtype=np.complex64),
    }


def zeros() -> dict[str, np.ndarray]:
    return {key: np.zeros_like(value) for key, value in stored().items()}


def save(tmp_path: Path, form: str, arrays: dict[str, np.ndarray] | None = None, name: str = "ckpt") -> Path:
    directory = Checkpoint(model=Copier(stored() if arrays is None else arrays), durable=False).save(tmp_path / name)
    return forms(directory, form)


def data_file(path: Path) -> Path:
    """The file whose pages the arrays of component ``model`` live in (the archive itself in that form)."""
    return path if path.is_file() else path / "components" / "model" / "data.bin"


def mapped_inodes() -> set[tuple[int, int]]:
    """(device, inode) of every file mapped into this process."""
    found = set()
    with open("/proc/self/maps", encoding="utf-8") as maps:
        for line in maps:
            fields = line.split()
            inode = int(fields[4])
            if inode:
                major, minor = (int(part, 16) for part in fields[3].split(":"))
                found.add((os.makedev(major, minor), inode))
    return found


def identity(path: Path) -> tuple[int, int]:
    info = os.stat(path)
    return info.st_dev, info.st_ino


def assert_owned(arrays: dict[str, np.ndarray]) -> None:
    """Every array owns its memory (or views an array or a fresh read's ``bytearray`` that does) and can be
    written in place."""
    for key, array in arrays.items():
        root = array
        while isinstance(root.base, np.ndarray):
            root = root.base
        assert root.base is None or type(root.base) is bytearray, f"{key} lives in a {type(root.base).__name__}"
        assert array.flags.writeable, key


needs_proc_maps = pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc/self/maps (Linux)")


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("verify", [True, False])
def test_copying_object_is_lent_views_gets_every_dtype_and_keeps_no_map(tmp_path: Path, form: str,
                                                                         verify: bool) -> None:
    path = save(tmp_path, form)
    target = Copier(zeros())
    own = dict(target.arrays)
    result = Checkpoint(model=target).load(path, verify=verify)
    assert result.loaded == {"model"} and target.lent == [True]  # views of the file, not fresh copies
    for key, value in stored().items():
        assert target.arrays[key] is own[key]  # copied into the object's own arrays
        assert target.arrays[key].dtype == value.dtype and target.arrays[key].shape == value.shape
        assert target.arrays[key].tobytes() == value.tobytes(), key
    if os.path.exists("/proc/self/maps"):
        assert identity(data_file(path)) not in mapped_inodes()


def test_non_contiguous_live_arrays_are_filled_from_lent_views(tmp_path: Path) -> None:
    path = save(tmp_path, "directory", {"t": np.arange(12.0).reshape(4, 3), "s": np.arange(5.0)})
    fortran = np.zeros((3, 4)).T  # shape (4, 3), not C-contiguous
    backing = np.zeros(10)
    target = Copier({"t": fortran, "s": backing[::2]})
    Checkpoint(model=target).load(path)
    assert target.lent == [True]
    assert np.array_equal(fortran, np.arange(12.0).reshape(4, 3))
    assert np.array_equal(backing, [0, 0, 1, 0, 2, 0, 3, 0, 4, 0])


@pytest.mark.parametrize("form", FORMS)
def test_corrupt_checkpoint_leaves_the_object_unchanged(tmp_path: Path, form: str) -> None:
    directory = save(tmp_path, "directory")
    data = directory / "components" / "model" / "data.bin"
    raw = bytearray(data.read_bytes())
    raw[-1] ^= 0x01  # the last array's last byte: every other array passes its check first
    data.write_bytes(bytes(raw))
    target = Copier(zeros())
    before = {key: value.tobytes() for key, value in target.arrays.items()}
    with pytest.raises(IntegrityError):
        Checkpoint(model=target).load(forms(directory, form))
    assert target.calls == 0
    assert {key: value.tobytes() for key, value in target.arrays.items()} == before


@needs_proc_maps
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("verify", [True, False])
def test_object_that_keeps_the_arrays_gets_owned_writeable_ones(tmp_path: Path, form: str, verify: bool) -> None:
    path = save(tmp_path, form)
    target = Keeper(zeros())
    Checkpoint(model=target).load(path, verify=verify)
    assert target.lent == [True, False]  # the lent views, then owned copies
    assert_owned(target.arrays)
    assert identity(data_file(path)) not in mapped_inodes()
    for key, value in stored().items():
        assert target.arrays[key].tobytes() == value.tobytes(), key
    target.arrays["w"] += 1  # in-place updates work
    assert target.arrays["w"][0, 0] == 1


@needs_proc_maps
def test_kept_arrays_survive_a_later_save_that_replaces_the_file(tmp_path: Path) -> None:
    path = save(tmp_path, "directory")
    target = Keeper(zeros())
    Checkpoint(model=target).load(path)
    old = identity(data_file(path))
    Checkpoint(model=Copier({key: np.ones_like(v) for key, v in stored().items()}), durable=False).save(path)
    assert identity(data_file(path)) != old
    assert old not in mapped_inodes()
    assert target.arrays["w"].tobytes() == stored()["w"].tobytes()


class ViewKeeper(Copier):
    """Copies most arrays but keeps a derived view (a reshape) of one."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.record(state)
        for key, value in state.items():
            np.copyto(self.arrays[key], value)
        self.flat = state["w"].reshape(-1)


@needs_proc_maps
def test_a_kept_derived_view_is_replaced_too(tmp_path: Path) -> None:
    path = save(tmp_path, "archive")
    target = ViewKeeper(zeros())
    Checkpoint(model=target).load(path)
    assert target.lent == [True, False]
    assert_owned({"flat": target.flat})
    assert identity(data_file(path)) not in mapped_inodes()


class Scaler(Copier):
    """Writes into the arrays it is given before copying them (an in-place conversion)."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state["w"] *= 2
        super().load_state_dict(state)


def test_writes_into_the_given_arrays_work_and_never_reach_the_file(tmp_path: Path) -> None:
    path = save(tmp_path, "directory")
    first = Scaler(zeros())
    Checkpoint(model=first).load(path)
    assert first.lent == [True]  # writeable views: the private map takes the write
    assert np.array_equal(first.arrays["w"], stored()["w"] * 2)
    again = Copier(zeros())
    Checkpoint(model=again).load(path)  # verified: the file still holds what was saved
    assert np.array_equal(again.arrays["w"], stored()["w"])


class PartialThenRaise(Copier):
    """Copies the first array, then refuses the state."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.record(state)
        first = next(iter(state))
        np.copyto(self.arrays[first], state[first])
        raise ValueError("refused after the first array")


def test_load_state_dict_that_raises_changes_only_what_the_object_changed(tmp_path: Path) -> None:
    path = save(tmp_path, "directory")
    target = PartialThenRaise(zeros())
    with pytest.raises(IncompatibleComponent, match="refused after the first array"):
        Checkpoint(model=target).load(path)
    assert target.lent == [True]  # kept nothing: no second call
    assert np.array_equal(target.arrays["w"], stored()["w"])  # changed by the object itself
    for key in ("bf", "scalar", "mask", "c"):
        assert not target.arrays[key].any(), key


class KeepThenRaise(Copier):
    """Stores the arrays it is given, then raises."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.record(state)
        self.arrays = dict(state)
        raise RuntimeError("refused after storing")


@needs_proc_maps
def test_load_state_dict_that_keeps_then_raises_ends_with_owned_arrays(tmp_path: Path) -> None:
    path = save(tmp_path, "directory")
    target = KeepThenRaise(zeros())
    with pytest.raises(IncompatibleComponent, match="refused after storing") as info:
        Checkpoint(model=target).load(path)
    assert target.lent == [True, False]
    assert_owned(target.arrays)
    del info  # the error is gone: nothing else may hold a view
    assert identity(data_file(path)) not in mapped_inodes()


class KeepsThenRefusesOwned(Keeper):
    """Keeps the arrays of the first call; refuses any later call."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.calls:
            self.record(state)
            raise ValueError("only once")
        super().load_state_dict(state)


def test_a_keeper_that_refuses_the_owned_copies_raises_naming_both_calls(tmp_path: Path) -> None:
    target = KeepsThenRefusesOwned(zeros())
    with pytest.raises(IncompatibleComponent, match="kept arrays it was given; given owned copies of them, it "
                                                    "failed: load_state_dict failed: only once"):
        Checkpoint(model=target).load(save(tmp_path, "directory"))
    assert target.lent == [True, False]


class Hoarder(Copier):
    """Keeps every state it was ever given."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        super().__init__(arrays)
        self.history: list[dict[str, Any]] = []

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.record(state)
        self.history.append(state)
        self.arrays = dict(state)


def test_an_object_that_never_drops_a_view_is_warned_about(tmp_path: Path) -> None:
    path = save(tmp_path, "directory")
    target = Hoarder(zeros())
    with pytest.warns(RuntimeWarning, match="still holds arrays of the first load_state_dict call"):
        Checkpoint(model=target).load(path)
    assert_owned(target.arrays)  # the arrays it uses are the owned ones of the second call


@pytest.mark.parametrize("form", FORMS)
def test_a_map_that_cannot_be_made_falls_back_to_fresh_arrays(tmp_path: Path, form: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    path = save(tmp_path, form)

    def refuse(*args: Any, **kwargs: Any) -> mmap.mmap:
        raise OSError(12, "Cannot allocate memory")  # ENOMEM: strict overcommit, no address space

    monkeypatch.setattr(mmap, "mmap", refuse)
    target = Copier(zeros())
    Checkpoint(model=target).load(path)
    assert target.lent == [False]
    assert all(target.arrays[key].tobytes() == value.tobytes() for key, value in stored().items())


@pytest.mark.parametrize("form", FORMS)
def test_returned_only_once_no_view_is_alive(tmp_path: Path, form: str) -> None:
    with open_checkpoint(save(tmp_path, form)) as reader:
        lent = reader.lend("model")
    assert isinstance(lent, LentTree)
    tree = lent.take()
    assert lent.take() is None  # handed out once: the lender holds no view
    kept = tree["w"][1:]
    del tree
    assert not lent.returned()
    del kept
    assert lent.returned()


def test_returned_collects_views_held_only_by_an_unreachable_cycle(tmp_path: Path) -> None:
    with open_checkpoint(save(tmp_path, "directory")) as reader:
        lent = reader.lend("model")
    assert lent is not None
    cycle: list[Any] = [lent.take()]
    cycle.append(cycle)
    gc.disable()  # the cycle stays until returned() collects it
    try:
        del cycle
        assert lent.returned()
    finally:
        gc.enable()


def change_in_place(file: Path) -> None:
    """What ``rsync --inplace`` or another process does: flip the file's first bytes, same size (its times move)."""
    with open(file, "r+b") as handle:
        head = handle.read(4)
        handle.seek(0)
        handle.write(bytes(byte ^ 0x40 for byte in head))


class ChangesTheFile(Copier):
    """Copies what it is given, after changing the checkpoint's data file in place (between the phases)."""

    file: Path

    def load_state_dict(self, state: dict[str, Any]) -> None:
        change_in_place(self.file)
        super().load_state_dict(state)


@pytest.mark.parametrize("form", FORMS)
def test_a_data_file_changed_in_place_while_views_are_lent_raises_concurrent_modification(
        tmp_path: Path, form: str) -> None:
    path = save(tmp_path, form)
    file = data_file(path)
    stat = os.stat(file)
    os.utime(file, ns=(stat.st_atime_ns, stat.st_mtime_ns - 10**10))  # saved 10 s ago: a new write moves mtime
    target = ChangesTheFile(zeros())
    target.file = file
    with pytest.raises(ConcurrentModification, match="changed in place while it was being loaded") as info:
        Checkpoint(model=target).load(path)
    assert target.calls == 1 and target.lent == [True]
    assert info.value.file is not None and info.value.file.startswith("components/model/data.bin")
    assert info.value.result is not None and info.value.result.loaded == {"model"}


class ScaleKeeper(Copier):
    """Converts the arrays it is given in place (doubles them), then keeps them."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.record(state)
        state["w"] *= 2
        self.arrays = dict(state)


@needs_proc_maps
@pytest.mark.parametrize("verify", [True, False])
def test_a_keeper_that_converted_the_views_in_place_gets_arrays_read_from_the_file(tmp_path: Path,
                                                                                   verify: bool) -> None:
    path = save(tmp_path, "directory")
    target = ScaleKeeper(zeros())
    Checkpoint(model=target).load(path, verify=verify)  # the owned copies are not the map's written pages
    assert target.lent == [True, False]
    assert_owned(target.arrays)
    assert np.array_equal(target.arrays["w"], stored()["w"] * 2)  # converted once, as with fresh arrays
    assert identity(data_file(path)) not in mapped_inodes()


class KeepThenInterrupt(Copier):
    """Stores the arrays it is given, then a KeyboardInterrupt arrives (the first call only)."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.record(state)
        self.arrays = dict(state)
        if self.calls == 1:
            raise KeyboardInterrupt


@needs_proc_maps
def test_a_keeper_interrupted_by_a_base_exception_ends_with_owned_arrays(tmp_path: Path) -> None:
    path = save(tmp_path, "directory")
    target = KeepThenInterrupt(zeros())
    with pytest.raises(KeyboardInterrupt) as info:
        Checkpoint(model=target).load(path)
    assert target.lent == [True, False]
    assert_owned(target.arrays)
    del info
    assert identity(data_file(path)) not in mapped_inodes()
