"""A durable collective save makes every file and directory durable before its rename, with fewer waits.

The coordinator's own data files are fsynced while it waits for the other
ranks, ``tree.msgpack``, the manifest and the directories in one batch of
concurrent fsyncs (:func:`~opencheckpoint.container.publish.fsync_together`),
and a rank's shard file has its writeback started while it is written
(:mod:`opencheckpoint.container.writeback`). These tests check what each promises:
nothing is left unsynced when the rename comes, the batch really runs at once,
and the writeback hints cover the whole file.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from shard_helpers import ThreadWorld

import opencheckpoint.container.staged as staged_module
import opencheckpoint.tree.datafile as datafile_module
from opencheckpoint import Checkpoint, read_component
from opencheckpoint.container.publish import fsync_together
from opencheckpoint.container.writeback import WRITEBACK_BYTES, WritebackFile
from opencheckpoint.sharding import LocalShard, ShardedValue

FULL = np.arange(6 * (1 << 19), dtype=np.float32).reshape(6, -1)  # 12 MiB: more than one writeback chunk

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="names fsynced fds via /proc")


def _band(rank: int) -> dict[str, Any]:
    start, stop = (0, 3) if rank == 0 else (3, 6)
    return {"w": ShardedValue(FULL.shape, "float32", [LocalShard((start, 0), FULL[start:stop])]),
            "plain": np.arange(4)}


@linux_only
def test_every_file_and_directory_of_a_collective_save_is_fsynced_before_the_rename(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "c"
    synced: list[str] = []  # paths relative to the staging directory, in fsync order
    events: list[str] = []
    lock = threading.Lock()
    real_fsync, real_publish = os.fsync, staged_module.publish

    def recording_fsync(fd: int) -> None:
        real_fsync(fd)
        name = os.readlink(f"/proc/self/fd/{fd}")
        with lock:
            synced.append(name)
            events.append("fsync")

    def recording_publish(staged: Path, *args: Any, **kwargs: Any) -> None:
        with lock:
            events.append(f"publish {staged}")
        real_publish(staged, *args, **kwargs)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    monkeypatch.setattr(staged_module, "publish", recording_publish)
    results = ThreadWorld(2).run(lambda group: Checkpoint(state=_band(group.rank)).save(target, process_group=group))
    assert results == [target, target]
    renamed = [event for event in events if event.startswith("publish ")]
    assert len(renamed) == 1
    staging = renamed[0].removeprefix("publish ")
    before = events.index(renamed[0])
    relative = {os.path.relpath(name, staging) for name in synced[:before] if name.startswith(staging)}
    published = {p.relative_to(target).as_posix() for p in target.rglob("*")} | {"."}
    assert published <= relative, sorted(published - relative)
    assert "components/state/shards/rank-00001.bin" in published  # the other rank's file, fsynced by that rank
    assert np.array_equal(read_component(target, "state")["w"], FULL)


def test_fsync_together_runs_the_fsyncs_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sub").mkdir()
    files = [tmp_path / f"f{i}" for i in range(3)]
    for file in files:
        file.write_bytes(b"x")
    # 3 files and 2 directories: each fsync waits until all 5 are in flight; one after the other, the first
    # would wait alone and the barrier would break (after its timeout, a bound against hanging, not a timing).
    together = threading.Barrier(5, timeout=30)
    real_fsync = os.fsync

    def waiting_fsync(fd: int) -> None:
        together.wait()
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", waiting_fsync)
    fsync_together(files, tmp_path)
    assert together.n_waiting == 0 and not together.broken


def test_fsync_together_raises_the_error_of_a_path_that_is_gone(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        fsync_together([tmp_path / "a", tmp_path / "missing"])


def test_a_durable_data_file_starts_the_writeback_of_every_chunk(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[tuple[int, int]] = []
    monkeypatch.setattr(datafile_module, "start_writeback", lambda: lambda fd, offset, n: started.append((offset, n)))
    Checkpoint(state={"w": FULL, "v": FULL + 1, "small": np.arange(3)}).save(tmp_path / "c")
    size = (tmp_path / "c" / "components" / "state" / "data.bin").stat().st_size
    assert len(started) >= 2 and started[0][0] == 0
    for (offset, n), (following, _) in itertools.pairwise(started):
        assert following == offset + n  # contiguous ranges, in file order
    assert all(n >= WRITEBACK_BYTES for _, n in started)
    assert size - (started[-1][0] + started[-1][1]) < WRITEBACK_BYTES  # the fsync is left only the tail
    started.clear()
    Checkpoint(state={"w": FULL}, durable=False).save(tmp_path / "d")
    assert started == []  # a save without durability asks for no writeback


@pytest.mark.skipif(datafile_module.start_writeback() is None, reason="no sync_file_range in this C library")
def test_the_writeback_hint_leaves_the_bytes_as_written(tmp_path: Path) -> None:
    start = datafile_module.start_writeback()
    assert start is not None
    data = np.random.default_rng(0).integers(0, 256, 3 * WRITEBACK_BYTES + 5, dtype=np.uint8).tobytes()
    with open(tmp_path / "f", "wb", buffering=0) as out:
        wrapped = WritebackFile(out, start)
        view = memoryview(data)
        while view:
            written = wrapped.write(view[: WRITEBACK_BYTES // 3])
            assert written
            view = view[written:]
    assert (tmp_path / "f").read_bytes() == data


def test_a_durable_archive_starts_the_writeback_as_it_is_written(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The single-file form gets the same early writeback as a data file (its fsync waits for the tail only)."""
    from opencheckpoint.container import staged as staged_module

    started: list[tuple[int, int]] = []
    monkeypatch.setattr(staged_module, "start_writeback", lambda: lambda fd, offset, n: started.append((offset, n)))
    path = Checkpoint(state={"w": FULL, "v": FULL + 1}).save(tmp_path / "c.ocp", format="archive")
    assert len(started) >= 2 and started[0][0] == 0
    for (offset, n), (following, _) in itertools.pairwise(started):
        assert following == offset + n
    assert path.stat().st_size - (started[-1][0] + started[-1][1]) < WRITEBACK_BYTES
    started.clear()
    Checkpoint(state={"w": FULL}, durable=False).save(tmp_path / "d.ocp", format="archive")
    assert started == []
