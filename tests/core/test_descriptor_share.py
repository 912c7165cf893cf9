"""Open checkpoints hold their files open (R-RDR-14) without taking the process's descriptors away.

Each open directory checkpoint holds at most a quarter of the soft ``RLIMIT_NOFILE``, and never so many that
the process would use more than half of it: several large checkpoints held open leave the application (and
the next reader) descriptors. Before, four checkpoints of 300 files took 1,023 of 1,024 descriptors and the
next ``read_component`` failed with ``MissingFile: cannot list directory: Too many open files``.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

import numpy as np

from opencheckpoint import Checkpoint, open_checkpoint, read_component


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
