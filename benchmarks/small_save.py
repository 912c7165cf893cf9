"""A small durable save against torch.save, and the floor under it: the fsyncs of files and directories.

    .venv/bin/python benchmarks/small_save.py [--repeat 30] [--dir /tmp]

Each row is the median of ``--repeat`` saves of the same tiny state (a 4x4 float32 weight, a bias and a
step counter) into a fresh name. ``fsyncs`` counts ``os.fsync`` calls made by the save (files and
directories; the library's only way to make bytes durable). The "floor" rows do only the file system
work a durable atomic save cannot skip, with no checkpoint code: write the files, fsync each file and
each directory, rename, fsync the parent (spec §12). Prints a Markdown table (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from opencheckpoint import Checkpoint

_fsyncs = 0
_real_fsync = os.fsync


def _counting_fsync(fd: int) -> None:
    global _fsyncs
    _fsyncs += 1
    _real_fsync(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _floor(root: Path, name: str, files: dict[str, bytes], durable: bool, together: bool = False) -> None:
    """Write ``files`` under a staging directory, fsync them and every directory, rename, fsync the parent.
    ``together``: the fsyncs of the files and directories run at once, one thread each (one journal commit)."""
    staging = root / f".{name}.staging"
    directories = {staging}
    for rel, data in files.items():
        path = staging / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        directories.update(p for p in path.parents if staging in (p, *p.parents))
        with open(path, "wb") as handle:
            handle.write(data)
            if durable and not together:
                os.fsync(handle.fileno())
    if durable and together:
        from concurrent.futures import ThreadPoolExecutor

        def one(path: Path) -> None:
            fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0))
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(one, [*(staging / rel for rel in files), *directories]))
    elif durable:
        for directory in sorted(directories, key=lambda p: -len(p.parts)):
            _fsync_dir(directory)
    os.rename(staging, root / name)
    if durable:
        _fsync_dir(root)


def measure(repeat: int, base: Path) -> list[tuple[str, float, float]]:
    import torch

    global _fsyncs
    state = {"w": np.ones((4, 4), np.float32), "b": np.zeros(4, np.float32), "step": 7}
    tensors = {"w": torch.ones(4, 4), "b": torch.zeros(4), "step": 7}
    files = {"manifest.json": b"x" * 900, "components/model/tree.msgpack": b"x" * 90,
             "components/model/data.bin": b"x" * 80}

    def torch_save(path: Path, durable: bool) -> None:
        with open(path, "wb") as handle:
            torch.save(tensors, handle)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        if durable:
            _fsync_dir(path.parent)

    cases: list[tuple[str, Callable[[Path], object]]] = [
        ("torch.save, no fsync", lambda p: torch_save(p, False)),
        ("torch.save + fsync file and directory", lambda p: torch_save(p, True)),
        ("floor: 3 files, staging dir, rename, no fsync", lambda p: _floor(p.parent, p.name, files, False)),
        ("floor: same + fsync 3 files, 3 dirs, parent, one after the other",
         lambda p: _floor(p.parent, p.name, files, True)),
        ("floor: same, the 6 fsyncs before the rename at once (threads)",
         lambda p: _floor(p.parent, p.name, files, True, together=True)),
        ("Checkpoint.save, directory, durable=False", lambda p: Checkpoint(model=state, durable=False).save(p)),
        ("Checkpoint.save, directory, durable", lambda p: Checkpoint(model=state).save(p)),
        ("Checkpoint.save, archive, durable=False",
         lambda p: Checkpoint(model=state, format="archive", durable=False).save(p)),
        ("Checkpoint.save, archive, durable", lambda p: Checkpoint(model=state, format="archive").save(p)),
    ]
    rows = []
    os.fsync = _counting_fsync  # type: ignore[assignment]  # counted for the table; restored below
    try:
        for label, save in cases:
            folder = Path(tempfile.mkdtemp(dir=base))
            save(folder / "warm")
            times, counts = [], []
            for index in range(repeat):
                _fsyncs = 0
                start = time.perf_counter()
                save(folder / f"s{index}")
                times.append(time.perf_counter() - start)
                counts.append(_fsyncs)
            rows.append((label, statistics.median(times) * 1000, statistics.median(counts)))
    finally:
        os.fsync = _real_fsync
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--dir", default=None, help="where to save (default: the system temp directory)")
    args = parser.parse_args()
    rows = measure(args.repeat, Path(args.dir or tempfile.gettempdir()))
    print("| save of a tiny state | median ms | fsyncs |")
    print("|---|---|---|")
    for label, ms, count in rows:
        print(f"| {label} | {ms:.2f} | {count:g} |")


if __name__ == "__main__":
    main()
