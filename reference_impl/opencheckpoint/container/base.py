"""The reader's view of a checkpoint container, whatever its form.

A :class:`Source` lists files, reads small files whole and memory-maps big
ones. :func:`open_source` picks the form and treats a missing name whose
previous version was moved aside during a non-atomic replace (``.NAME.oc-old-*``)
as that previous version (spec "Atomic publication").
"""

from __future__ import annotations

import abc
import os
from pathlib import Path

from ..errors import IntegrityError, NotACheckpoint


class Source(abc.ABC):
    """Read access to the files of one checkpoint."""

    #: "directory" or "archive"
    form: str

    def __init__(self, path: Path) -> None:
        self.path = path

    @abc.abstractmethod
    def read_manifest(self) -> bytes:
        """The bytes of ``manifest.json`` (:class:`NotACheckpoint` when there is none)."""

    @abc.abstractmethod
    def list_files(self) -> dict[str, int]:
        """Every file in the container (``manifest.json`` included) -> size; rejects symlinks and specials."""

    @abc.abstractmethod
    def read_file(self, rel: str, size: int) -> bytes:
        """The whole file, which must be exactly ``size`` bytes."""

    @abc.abstractmethod
    def map_file(self, rel: str, size: int) -> memoryview:
        """A read-only memory map of the file, which must be exactly ``size`` bytes."""

    def close(self) -> None:
        """Release resources (maps stay valid while arrays use them)."""

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def size_mismatch(rel: str, actual: int, size: int) -> IntegrityError:
    what = "truncated" if actual < size else "extended"
    return IntegrityError(f"file is {actual} bytes, the manifest says {size} ({what})", file=rel,
                          field="size", section="R-CHK-4")


def previous_version(path: Path) -> Path | None:
    """The moved-aside previous checkpoint of a name caught mid-replace, if any."""
    parent = path.parent
    prefix = f".{path.name}.oc-old-"
    try:
        candidates = [parent / n for n in os.listdir(parent) if n.startswith(prefix)]
    except OSError:
        return None
    return max(candidates, key=lambda p: p.stat().st_mtime) if candidates else None


def open_source(path: str | os.PathLike[str]) -> Source:
    """Open a directory or archive checkpoint for reading."""
    from .archive import ArchiveSource
    from .directory import DirectorySource

    target = Path(path)
    if not target.exists():
        fallback = previous_version(target)
        if fallback is None:
            raise NotACheckpoint("no such file or directory", file=str(target), section="R-PUB-5")
        target = fallback
    if target.is_dir():
        return DirectorySource(target)
    if target.is_file():
        return ArchiveSource(target)
    raise NotACheckpoint("neither a directory nor a regular file", file=str(target), section="R-PUB-5")
