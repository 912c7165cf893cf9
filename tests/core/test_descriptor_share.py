"""Open checkpoints hold their files open (R-RDR-14) without taking the process's descriptors away.

Each open directory checkpoint holds at most a quarter of the soft ``RLIMIT_NOFILE``, and never so many that
the process would use more than half of it: several large checkpoints held open leave the application (and
the next reader) descriptors. Before, four checkpoints of 300 files took 1,023 of 1,024 descriptors and the
next ``read_component`` failed with ``MissingFile: cannot list directory: Too many open files``.
"""

from __future__ import annotations

import contextlib
import gc
import os
import resource
from pathlib import Path

import numpy as np
import pytest

from opencheckpoint import Checkpoint, open_checkpoint, read_component
from opencheckpoint.format.errors import OutOfDescriptors


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd")) - 1


def test_checkpoints_held_open_leave_the_process_half_its_descriptors(tmp_path: Path) -> None:
    paths = [Checkpoint(durable=False, **{f"c{j}": {"w": np.full(2, i)} for j in range(60)}).save(  # 120 files
        tmp_path / f"ckpt{i}") for i in range(4)]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = min(soft, 256)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    readers = []
    try:
        before = _open_descriptors()
        readers = [open_checkpoint(path) for path in paths[:3]]
        assert _open_descriptors() <= max(before, limit // 2) + len(readers)  # a root descriptor each
        assert len(readers[0].source._pinned) == limit // 4  # type: ignore[attr-defined]  # a DirectorySource
        for i, reader in enumerate(readers):
            assert all(int(reader.read(f"c{j}")["w"][0]) == i for j in (0, 59))
        assert int(read_component(paths[3], "c59")["w"][0]) == 3
    finally:
        for reader in readers:
            reader.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.parametrize("aside", [False, True], ids=["at-its-name", "moved-aside"])
def test_a_reader_out_of_descriptors_says_so(tmp_path: Path, aside: bool) -> None:
    """With 0-3 descriptors to spare, opening fails at the root, the manifest, the listing or a folder: the
    error says the process has none to spare (OutOfDescriptors, a CheckpointError), never that the
    checkpoint is not one (NotACheckpoint), unsafe (UnsafePath) or incomplete (MissingFile); moved aside by a
    writer between its renames, never "0 of 1 old copies open" (R-PUB-14) or "no such file" (R-PUB-10)."""
    target = Checkpoint(durable=False, a={"w": np.full(2, 1)}, b={"g": 1}).save(tmp_path / "ckpt")
    if aside:
        target.rename(tmp_path / ".ckpt.oc-old-1-abcdefgh")
    assert read_component(target, "b") == {"g": 1}  # everything a read imports is imported by now
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    gc.collect()  # descriptors closed by the collector mid-test would give the reader room
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 128), hard))
    hog: list[int] = []
    outcomes = []
    try:
        for spare in range(4):
            with contextlib.suppress(OSError):
                while True:
                    hog.append(os.open(os.devnull, os.O_RDONLY))
            for fd in hog[:spare]:
                os.close(fd)
            del hog[:spare]
            with pytest.raises(OutOfDescriptors, match="no file descriptor to spare") as caught:
                read_component(target, "b")
            outcomes.append(caught.value.error_class)
    finally:
        for fd in hog:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert outcomes == ["CheckpointError"] * 4
    assert read_component(target, "b") == {"g": 1}
