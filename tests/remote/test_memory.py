"""Checkpoints on fsspec's in-memory filesystem (``memory://``): every entry point, the object-store
publication rule of spec §12.7 (manifest last, never overwritten in place, manifest-first deletion) and
verified byte-range reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from remote_fetches import FetchCounter

from opencheckpoint import (
    Checkpoint,
    CheckpointError,
    IntegrityError,
    NotACheckpoint,
    TargetExists,
    UnsupportedLocation,
    open_checkpoint,
    read_component,
    validate,
)
from opencheckpoint.cli.main import main
from opencheckpoint.container import publish as local_publish
from opencheckpoint.container.debris import machine_token
from opencheckpoint.format.errors import ConcurrentModification
from opencheckpoint.remote import FsPath
from opencheckpoint.run.checkpointer import Rotation, RunCheckpointer, resolve_checkpoint_path
from opencheckpoint.tools.inspect import describe

fsspec = pytest.importorskip("fsspec")



@pytest.fixture
def count_fetches(monkeypatch: pytest.MonkeyPatch) -> Callable[[Any], FetchCounter]:
    """``count_fetches(fs)``: a :class:`FetchCounter` recording what ``fs.cat_file`` fetches from now on."""
    return lambda fs: FetchCounter(fs, monkeypatch)


def _state() -> dict[str, Any]:
    return {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones(5), "step": 3}


def _fault(monkeypatch: pytest.MonkeyPatch, operation: str) -> None:
    """Make the writer fail just before ``operation`` (a fault point of the library's writers)."""

    def hook(name: str) -> None:
        if name == operation:
            raise OSError(f"injected failure before {name}")

    monkeypatch.setattr(local_publish, "FAULT_HOOK", hook)


def test_save_and_every_reader_entry_point_on_a_memory_url(mem_url: str, memfs: Any) -> None:
    url = f"{mem_url}/ckpt"
    saved = Checkpoint(model=_state(), config={"lr": 0.1}).save(url, metadata={"step": 3})
    assert isinstance(saved, FsPath) and str(saved) == f"memory://{memfs._strip_protocol(url)}"
    stored = read_component(url, "model")
    np.testing.assert_array_equal(stored["w"], _state()["w"])
    assert stored["step"] == 3 and read_component(saved, "config") == {"lr": 0.1}
    live = {"w": np.zeros((3, 4), np.float32), "b": np.zeros(5), "step": 0}
    result = Checkpoint(model=live).load(url, components=["model"])
    assert result.loaded == {"model"} and live["w"][2, 3] == 11.0 and result.manifest["metadata"] == {"step": 3}
    with open_checkpoint(url) as reader:
        assert reader.tree("model")["b"].read().tolist() == [1.0] * 5
    report = validate(url)
    assert report.ok and report.checked_arrays == 2 and report.path == url
    summary = describe(url)
    assert summary["form"] == "directory" and summary["ok"]


def test_cli_validate_and_inspect_take_a_url(mem_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    Checkpoint(model=_state()).save(f"{mem_url}/ckpt")
    assert main(["validate", f"{mem_url}/ckpt"]) == 0
    assert main(["inspect", "--json", f"{mem_url}/ckpt"]) == 0
    assert json.loads(capsys.readouterr().out.split("\n", 1)[1])["form"] == "directory"


def test_a_filesystem_object_and_a_path_on_it(memfs: Any, mem_url: str) -> None:
    where = FsPath(memfs, memfs._strip_protocol(mem_url)) / "ckpt"
    Checkpoint(model=_state()).save(where)
    assert read_component(where, "model")["step"] == 3
    assert sorted(memfs.ls(where.path, detail=False)) == [where.key("components"), where.key("manifest.json")]


def test_the_manifest_is_uploaded_last(mem_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    monkeypatch.setattr(local_publish, "FAULT_HOOK", order.append)
    Checkpoint(model=_state(), config={"x": 1}).save(f"{mem_url}/ckpt")
    uploads = [name for name in order if name.startswith("upload:")]
    assert uploads[-1] == "upload:manifest.json" and len(uploads) == 4  # data.bin, tree.msgpack, value.json
    assert order.index("write-marker:staging") < order.index(uploads[0])


def test_an_existing_checkpoint_is_never_overwritten(mem_url: str) -> None:
    url = f"{mem_url}/ckpt"
    first = Checkpoint(model=_state()).save(url, checkpoint_id="first")
    for overwrite in (True, False):
        with pytest.raises(TargetExists, match="never overwritten in place") as caught:
            Checkpoint(model={"other": 1}).save(url, overwrite=overwrite)
        assert caught.value.rule == "R-PUB-21"
    with open_checkpoint(first) as reader:
        assert reader.manifest["checkpoint_id"] == "first"
    assert validate(url).ok


def test_a_prefix_without_manifest_is_not_a_checkpoint(mem_url: str, memfs: Any) -> None:
    saved = Checkpoint(model=_state()).save(f"{mem_url}/ckpt")
    memfs.rm_file(saved.key("manifest.json"))
    with pytest.raises(NotACheckpoint) as caught:
        read_component(saved, "model")
    assert caught.value.rule == "R-CON-1" and "written last" in caught.value.message
    assert not validate(saved).ok
    with pytest.raises(NotACheckpoint) as nothing:
        open_checkpoint(f"{mem_url}/absent")
    assert nothing.value.rule == "R-PUB-10"


@pytest.mark.parametrize("how", ["flip", "truncate"])
def test_a_corrupt_object_is_detected(mem_url: str, memfs: Any, how: str) -> None:
    saved = Checkpoint(model=_state()).save(f"{mem_url}/ckpt")
    key = saved.key("components/model/data.bin")
    data = bytearray(memfs.cat_file(key))
    if how == "flip":
        data[0] ^= 0x01
    else:
        del data[-8:]
    memfs.pipe_file(key, bytes(data))
    with pytest.raises(IntegrityError) as caught:
        read_component(saved, "model")
    assert caught.value.rule == ("R-ARR-14" if how == "flip" else "R-CHK-6")
    assert {e.rule for e in validate(saved).errors} >= {"R-ARR-14" if how == "flip" else "R-CHK-6"}


def test_a_lazy_read_fetches_only_that_arrays_bytes_verified(
    mem_url: str, memfs: Any, count_fetches: Callable[[Any], Any]
) -> None:
    big = {"big": np.arange(1 << 18, dtype=np.float64), "small": np.arange(10, dtype=np.int32)}
    saved = Checkpoint(model=big).save(f"{mem_url}/ckpt")
    counter = count_fetches(memfs)
    with open_checkpoint(saved) as reader:
        lazy = reader.tree("model")["small"]
        assert counter.fetched("data.bin") == 0
        assert lazy.read().tolist() == list(range(10))
    assert counter.fetched("data.bin") == lazy.nbytes == 40
    key = saved.key("components/model/data.bin")
    data = bytearray(memfs.cat_file(key))
    data[lazy.ref.offset] ^= 0x01
    memfs.pipe_file(key, bytes(data))
    with open_checkpoint(saved) as reader, pytest.raises(IntegrityError):
        reader.tree("model")["small"].read()


def test_a_failed_save_leaves_nothing_at_the_prefix(mem_url: str, memfs: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _fault(monkeypatch, "upload:manifest.json")
    with pytest.raises(CheckpointError, match="injected") as failed:  # the storage's failure, named
        Checkpoint(model=_state()).save(f"{mem_url}/ckpt")
    assert failed.value.file == f"{mem_url}/ckpt"
    assert memfs.find(memfs._strip_protocol(mem_url)) == []


def _dead_writer_token() -> str:
    """A writer token of this machine naming a process that has ended."""
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                           check=True)
    return f"{int(child.stdout)}-{machine_token()}{'0' * 8}{'a' * 12}"


@pytest.fixture
def killed_save(mem_url: str, memfs: Any) -> Iterator[FsPath]:
    """What a writer killed before its manifest leaves: data objects and its marker."""
    target = FsPath(memfs, memfs._strip_protocol(mem_url)) / "ckpt"
    memfs.pipe_file(target.key("components/model/data.bin"), b"\0" * 64)
    plan = {"target": "ckpt", "objects": ["components/model/data.bin", "components/model/tree.msgpack",
                                          "manifest.json"]}  # what it was going to write (R-PUB-24)
    memfs.pipe_file(target.parent.key(f".ckpt.oc-staging-{_dead_writer_token()}"), json.dumps(plan).encode())
    yield target


def test_debris_of_a_killed_writer_is_cleaned_by_the_next_save(killed_save: FsPath, memfs: Any) -> None:
    with pytest.raises(NotACheckpoint):
        open_checkpoint(killed_save)
    Checkpoint(model=_state()).save(killed_save)
    assert validate(killed_save).ok
    assert memfs.ls(killed_save.parent.path, detail=False) == [killed_save.path]


def test_a_running_writers_marker_refuses_a_second_writer(killed_save: FsPath, memfs: Any) -> None:
    token = f"{os.getpid()}-{machine_token()}{'0' * 8}{'b' * 12}"  # this process: it runs
    marker = killed_save.parent.key(f".ckpt.oc-staging-{token}")
    memfs.pipe_file(marker, b"{}")
    with pytest.raises(ConcurrentModification, match="another writer"):
        Checkpoint(model=_state()).save(killed_save)


def test_objects_not_ours_are_never_deleted(mem_url: str, memfs: Any) -> None:
    root = memfs._strip_protocol(mem_url)
    memfs.pipe_file(f"{root}/ckpt/notes.txt", b"mine")
    with pytest.raises(TargetExists, match="no manifest"):
        Checkpoint(model=_state()).save(f"{mem_url}/ckpt")
    saved = Checkpoint(model=_state()).save(f"{mem_url}/outer")
    with pytest.raises(TargetExists, match="inside the checkpoint"):
        Checkpoint(model=_state()).save(saved / "components" / "inner")
    assert memfs.cat_file(f"{root}/ckpt/notes.txt") == b"mine" and validate(saved).ok


def test_the_archive_form_is_local_only(mem_url: str, memfs: Any) -> None:
    with pytest.raises(UnsupportedLocation, match="directory form"):
        Checkpoint(model=_state(), format="archive").save(f"{mem_url}/ckpt.ocp")
    assert memfs.find(memfs._strip_protocol(mem_url)) == []


def test_rotation_keeps_the_policy_and_follows_manifests(mem_url: str, memfs: Any) -> None:
    rotation = Rotation(mem_url, keep_last=2, keep_best=("loss", "min"))
    checkpoint = Checkpoint(model=_state())
    for step, loss in [(1, 0.5), (2, 0.1), (3, 0.9), (4, 0.8)]:
        rotation.save(checkpoint, step, metadata={"loss": loss})
    assert [p.name for p in rotation.checkpoints()] == [f"checkpoint-{s:012d}" for s in (2, 3, 4)]
    assert rotation.best() == rotation.path_for(2) and rotation.latest() == rotation.path_for(4)
    memfs.rm_file(rotation.path_for(4).key("manifest.json"))  # an abandoned save of step 4
    assert rotation.latest() == rotation.path_for(3)
    live = {"w": np.zeros((3, 4), np.float32), "b": np.zeros(5), "step": 0}
    assert RunCheckpointer(Checkpoint(model=live), mem_url, interval=1).restore() == 3
    assert resolve_checkpoint_path(mem_url) == rotation.path_for(3)


def test_pruning_deletes_the_manifest_first(mem_url: str, memfs: Any, monkeypatch: pytest.MonkeyPatch,
                                           caplog: pytest.LogCaptureFixture) -> None:
    rotation = Rotation(mem_url, keep_last=1)
    checkpoint = Checkpoint(model=_state())
    rotation.save(checkpoint, 1)
    _fault(monkeypatch, "delete:components/model/data.bin")  # pruning step 1 stops after its manifest went
    # the save succeeded (step 2 is published): the failed prune is a warning, and the path is returned
    assert rotation.save(checkpoint, 2) == rotation.path_for(2)
    assert "pruning" in caplog.text and "injected" in caplog.text
    half = rotation.path_for(1)
    assert memfs.exists(half.key("components/model/data.bin")) and not memfs.exists(half.key("manifest.json"))
    assert rotation.checkpoints() == [rotation.path_for(2)] and validate(rotation.path_for(2)).ok
    monkeypatch.setattr(local_publish, "FAULT_HOOK", None)
    rotation.save(checkpoint, 3)  # the debris of the interrupted deletion goes with the next prune
    assert not memfs.exists(half.path) and [p.name for p in rotation.checkpoints()] == ["checkpoint-000000000003"]


def test_saving_a_step_again_replaces_the_rotations_own_checkpoint_only_when_it_fails_verification(
        mem_url: str, memfs: Any) -> None:
    rotation = Rotation(mem_url, keep_last=3)
    first = rotation.save(Checkpoint(model={"v": np.ones(4)}), 5)
    data = first.key("components/model/data.bin")
    memfs.pipe_file(data, b"\xff" * len(memfs.cat_file(data)))  # same size, wrong bytes: step 5 is corrupt
    rotation.save(Checkpoint(model={"v": np.full(4, 2.0)}), 5)  # resumed from an older step, reached 5 again
    assert read_component(rotation.path_for(5), "model")["v"].tolist() == [2.0] * 4
    assert len(rotation.checkpoints()) == 1


def test_local_urls_and_filesystems_keep_the_local_rename(tmp_path: Any) -> None:
    """``file://`` and fsspec's local filesystem are local paths: the atomic rename, overwrite allowed (§12.1)."""
    first = Checkpoint(model={"v": 1}).save(f"file://{tmp_path}/ckpt")
    again = Checkpoint(model={"v": 2}).save(FsPath(fsspec.filesystem("file"), f"{tmp_path}/ckpt"))
    assert first == again == tmp_path / "ckpt" and first.is_dir()
    assert read_component(tmp_path / "ckpt", "model") == {"v": 2}
    # RFC 8089: file://localhost/ABS is the local absolute path /ABS (not ./localhost/ABS)
    assert Checkpoint(model={"v": 3}).save(f"file://localhost{tmp_path}/lh") == tmp_path / "lh"
    assert read_component(tmp_path / "lh", "model") == {"v": 3}


def test_async_saves_to_an_object_store_upload_in_the_background(mem_url: str, memfs: Any) -> None:
    # one pipeline for every target: the plan and the snapshot now, the write and the upload later
    weights = {"a": np.arange(3.0)}
    handle = Checkpoint(w=weights).save_async(f"{mem_url}/ck")
    weights["a"][:] = 9  # the snapshot was taken: the upload still writes 0, 1, 2
    assert validate(handle.result()).ok and read_component(handle.result(), "w")["a"].tolist() == [0.0, 1.0, 2.0]
    with RunCheckpointer(Checkpoint(w=weights), f"{mem_url}/run", 1, keep_last=1, async_save=True) as run:
        for step in (1, 2, 3):
            run.save(step)
    assert [p.name for p in Rotation(f"{mem_url}/run").checkpoints()] == ["checkpoint-000000000003"]
