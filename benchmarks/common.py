"""What every benchmark section shares: the run context, result records, and file helpers.

>>> r = Result("baseline", "memcpy", [0.5, 0.25], 1 << 30)
>>> r.seconds, r.gib_s
(0.25, 4.0)
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from timing import Timing

GIB = 1 << 30
MIB = 1 << 20


@dataclass
class Result:
    """One measured operation: best time over its samples, and the bytes it moved (if any)."""

    group: str
    name: str
    samples: list[float]
    nbytes: int | None = None
    note: str = ""

    @property
    def seconds(self) -> float:
        return min(self.samples)

    @property
    def gib_s(self) -> float | None:
        return None if not self.nbytes else self.nbytes / GIB / self.seconds

    def as_json(self) -> dict[str, Any]:
        return {"group": self.group, "name": self.name, "seconds": self.seconds, "samples": self.samples,
                "nbytes": self.nbytes, "gib_s": self.gib_s, "note": self.note}


@dataclass
class Context:
    """Shared state of one run: the arrays, the scratch directory, the repeat count, what was measured."""

    arrays: dict[str, np.ndarray]
    tmp: Path
    repeat: int
    quick: bool
    results: list[Result] = field(default_factory=list)
    skipped: list[tuple[str, str, str]] = field(default_factory=list)
    step: Callable[[str], None] = lambda description: None

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays.values())

    def record(self, group: str, name: str, timing: Timing, nbytes: int | None = None, note: str = "") -> Result:
        result = Result(group, name, list(timing.samples), nbytes, note)
        self.results.append(result)
        return result

    def skip(self, group: str, name: str, reason: str) -> None:
        self.skipped.append((group, name, reason))

    @contextlib.contextmanager
    def guard(self, group: str, name: str) -> Iterator[None]:
        """Record a failure as a skipped measurement (with the error) and let the run go on."""
        try:
            yield
        except Exception as exc:  # one broken operation must not lose the whole run
            self.skip(group, name, f"failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")

    def get(self, name: str) -> Result | None:
        for result in self.results:
            if result.name == name:
                return result
        return None

    def fresh(self, name: str) -> Path:
        """A scratch path that does not exist (anything there before is removed, untimed)."""
        path = self.tmp / name
        remove(path)
        return path


def remove(path: Path) -> None:
    """Delete a file or a directory tree, including hidden siblings a checkpoint writer may leave."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()


def write_all(fd: Any, view: memoryview) -> None:
    """Write a whole buffer to an unbuffered file (``write`` may be partial)."""
    while view:
        written = fd.write(view)
        view = view[written:]


def read_into(fd: Any, view: memoryview) -> None:
    """Fill a whole buffer from an unbuffered file."""
    while view:
        count = fd.readinto(view)
        if not count:
            raise EOFError("file ended early")
        view = view[count:]


def byte_view(array: np.ndarray) -> memoryview:
    return array.reshape(-1).view(np.uint8).data


def filesystem_of(path: Path) -> str:
    """The filesystem type of ``path`` from /proc/mounts (``?`` where unknown)."""
    try:
        mounts = [line.split() for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return "?"
    resolved = str(path.resolve())
    best = ("", "?")
    for parts in mounts:
        mount_point, fstype = parts[1], parts[2]
        if (resolved == mount_point or resolved.startswith(mount_point.rstrip("/") + "/")) and len(
                mount_point) >= len(best[0]):
            best = (mount_point, fstype)
    return best[1]
