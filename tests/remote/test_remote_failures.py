"""Remote rotations and storage failures on ``memory://``: a valid step is never deleted before its
replacement exists, pruning verifies checksums, a failed prune never fails a save, and every storage
failure is a :class:`CheckpointError` naming the URL (spec §12.7, R-PUB-19, R-PUB-21)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from opencheckpoint import Checkpoint, CheckpointError, TargetExists, validate
from opencheckpoint.cli.main import main
from opencheckpoint.container import publish as local_publish
from opencheckpoint.container.debris import machine_token
from opencheckpoint.remote import FsPath
from opencheckpoint.run.checkpointer import Rotation

fsspec = pytest.importorskip("fsspec")



class _Unsaveable:
    """A value no adapter can write: the save fails after the rotation decided what to delete."""


def test_resaving_the_newest_valid_step_is_refused_and_it_stays(mem_url: str) -> None:
    Rotation(mem_url, keep_last=1).save(Checkpoint(model={"w": np.ones(4)}), 1)
    newest = Rotation(mem_url, keep_last=1).save(Checkpoint(model={"w": np.ones(4)}), 2)
    with pytest.raises(TargetExists, match="never overwritten in place") as refused:
        Rotation(mem_url, keep_last=1).save(Checkpoint(model={"w": _Unsaveable()}), 2)  # a fresh rotation
    assert refused.value.file == str(newest)
    assert Rotation(mem_url, keep_last=1).checkpoints() == [newest] and validate(newest).ok


def test_pruning_verifies_the_newest_with_checksums_before_deleting_the_last_valid_one(
        mem_url: str, memfs: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    rotation = Rotation(mem_url, keep_last=1)
    older = rotation.save(Checkpoint(model={"w": np.ones(64)}), 1)
    target = rotation.path_for(2)

    def flip_a_bit_once_uploaded(name: str) -> None:  # the store changes a byte, same size, before the manifest
        if name == "upload:manifest.json":
            data = target.key("components/model/data.bin")
            raw = bytearray(memfs.cat_file(data))
            raw[3] ^= 0x10
            memfs.pipe_file(data, bytes(raw))

    monkeypatch.setattr(local_publish, "FAULT_HOOK", flip_a_bit_once_uploaded)
    assert rotation.save(Checkpoint(model={"w": np.full(64, 2.0)}), 2) == target
    assert not validate(target).ok
    assert older in rotation.checkpoints() and validate(older).ok  # the only valid one was kept


def test_access_denied_on_upload_is_a_checkpoint_error_naming_the_url(mem_url: str, memfs: Any,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(*args: Any, **kwargs: Any) -> None:
        raise PermissionError("AccessDenied")

    monkeypatch.setattr(memfs, "put_file", denied)
    with pytest.raises(CheckpointError, match="AccessDenied") as failed:
        Checkpoint(model={"w": np.ones(2)}).save(f"{mem_url}/ckpt")
    assert failed.value.file == f"{mem_url}/ckpt"


def test_saving_below_an_object_is_target_exists(mem_url: str, memfs: Any) -> None:
    memfs.pipe_file(f"{memfs._strip_protocol(mem_url)}/f", b"a user's file")
    with pytest.raises(TargetExists) as refused:
        Checkpoint(model={"w": np.ones(2)}).save(f"{mem_url}/f/ckpt")
    assert refused.value.file == f"{mem_url}/f/ckpt"


@pytest.fixture
def unreachable(mem_url: str, memfs: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """Two saved checkpoints whose store then refuses every connection (as an unreachable endpoint)."""
    first = Checkpoint(model={"w": np.ones(2)}).save(f"{mem_url}/a")
    second = Checkpoint(model={"w": np.zeros(2)}).save(f"{mem_url}/b")

    def refused(*args: Any, **kwargs: Any) -> None:
        raise ConnectionRefusedError("connection refused")

    for method in ("info", "cat_file", "find", "ls", "isfile", "exists"):
        monkeypatch.setattr(memfs, method, refused)
    return str(first), str(second)


def test_an_unreachable_store_is_reported_by_validate_and_read_paths(unreachable: tuple[str, str]) -> None:
    url = unreachable[0]
    report = validate(url)
    assert not report.ok and report.errors[0].file == url and "connection refused" in report.errors[0].message
    with pytest.raises(CheckpointError, match="connection refused"):
        Checkpoint(model={"w": np.ones(2)}).load(url)


def test_the_cli_prints_one_error_line_and_diff_exits_2(unreachable: tuple[str, str],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", *unreachable]) == 2
    assert main(["inspect", unreachable[0]]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("error: CheckpointError") == 2 and unreachable[0] in err


def test_a_bucket_root_is_an_unsupported_location() -> None:
    s3fs = pytest.importorskip("s3fs")
    from opencheckpoint import UnsupportedLocation

    fs = s3fs.S3FileSystem(skip_instance_cache=True, key="k", secret="s",
                           client_kwargs={"endpoint_url": "http://127.0.0.1:9", "region_name": "eu-west-1"})
    with pytest.raises(UnsupportedLocation, match="bucket's root"):  # refused before any request is sent
        Checkpoint(model={"w": np.ones(2)}).save(FsPath(fs, "some-bucket"))


def _killed_writer_marker(memfs: Any, target: FsPath, objects: list[str]) -> str:
    """The staging marker a writer killed mid-upload leaves (its process has ended), with its upload plan."""
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                           check=True)
    marker = target.parent.key(f".{target.name}.oc-staging-{int(child.stdout)}-{machine_token()}{'0' * 8}{'c' * 12}")
    memfs.pipe_file(marker, json.dumps({"target": target.name, "objects": objects}).encode())
    return marker


def test_debris_cleanup_deletes_only_what_the_dead_writer_planned(mem_url: str, memfs: Any) -> None:
    target = FsPath(memfs, memfs._strip_protocol(mem_url)) / "ckpt"
    memfs.pipe_file(target.key("components/model/data.bin"), b"\0" * 16)  # the killed writer's upload
    memfs.pipe_file(target.key("components/notes.txt"), b"a user's object")  # placed there by someone else
    marker = _killed_writer_marker(memfs, target, ["components/model/data.bin", "manifest.json"])
    with pytest.raises(TargetExists, match=r"notes\.txt"):
        Checkpoint(model={"w": np.ones(2)}).save(target)
    assert memfs.cat_file(target.key("components/notes.txt")) == b"a user's object"
    assert not memfs.exists(target.key("components/model/data.bin")) and not memfs.exists(marker)


def test_folder_marker_objects_are_no_entries(mem_url: str, memfs: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A zero-byte key ending in ``/`` (an S3 console folder) is a pseudo-directory (§12.7): ignored."""
    saved = Checkpoint(model={"w": np.ones(2)}).save(f"{mem_url}/ck")
    empty = FsPath(memfs, memfs._strip_protocol(mem_url)) / "empty"
    markers = {saved.key("components/"), empty.key("")}
    original = memfs.find

    def find_with_folder_markers(path: str, *args: Any, **kwargs: Any) -> Any:
        found = original(path, *args, **kwargs)  # memory:// has no such keys: list them as S3 does
        for key in markers:
            if key.startswith(path.rstrip("/") + "/"):
                found = {**found, key: {"name": key, "size": 0, "type": "file"}} if isinstance(found, dict) \
                    else [*found, key]
        return found

    monkeypatch.setattr(memfs, "find", find_with_folder_markers)
    assert validate(saved).ok
    assert Checkpoint(model={"w": np.ones(2)}).save(empty) == empty and validate(empty).ok
