"""The directory form: files below the checkpoint directory, opened without following symlinks.

Every path is opened one segment at a time relative to the checkpoint's
directory descriptor with ``O_NOFOLLOW``, so a symlink anywhere inside the
checkpoint is an :class:`UnsafePath`, never a read outside it.
"""

from __future__ import annotations

import errno
import mmap
import os
import stat
from pathlib import Path

from ..errors import LimitExceeded, MissingFile, NotACheckpoint, UnsafePath
from ..limits import MANIFEST_MAX_BYTES, MAX_FILES
from ..manifest import MANIFEST_NAME
from .base import Source, size_mismatch

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class DirectorySource(Source):
    form = "directory"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        try:
            self._root = os.open(path, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise NotACheckpoint(f"cannot open directory: {exc.strerror}", file=str(path)) from None

    def close(self) -> None:
        if self._root >= 0:
            os.close(self._root)
            self._root = -1

    def _open(self, rel: str) -> int:
        parts = rel.split("/")
        fd = self._root
        opened: list[int] = []
        try:
            for part in parts[:-1]:
                fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                opened.append(fd)
            result = os.open(parts[-1], _FILE_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                raise MissingFile("listed in the manifest but absent", file=rel, section="R-CON-3") from None
            if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                raise UnsafePath("path passes through a symlink or a non-directory", file=rel,
                                 section="R-CON-4") from None
            raise MissingFile(f"cannot open: {exc.strerror}", file=rel, section="R-CON-3") from None
        finally:
            for d in opened:
                os.close(d)
        if not stat.S_ISREG(os.fstat(result).st_mode):
            os.close(result)
            raise UnsafePath("not a regular file", file=rel, section="R-CON-4")
        return result

    def read_manifest(self) -> bytes:
        try:
            fd = self._open(MANIFEST_NAME)
        except MissingFile:
            raise NotACheckpoint("no manifest.json: not a checkpoint (or an unfinished one)",
                                 file=str(self.path), section="R-PUB-5") from None
        try:
            size = os.fstat(fd).st_size
            if size > MANIFEST_MAX_BYTES:
                raise LimitExceeded(f"manifest is {size} bytes, limit {MANIFEST_MAX_BYTES}", file=MANIFEST_NAME,
                                    section="R-LIM-1")
            return _read_all(fd, size)
        finally:
            os.close(fd)

    def list_files(self) -> dict[str, int]:
        found: dict[str, int] = {}
        stack = [""]
        while stack:
            prefix = stack.pop()
            with os.scandir(self.path / prefix if prefix else self.path) as entries:
                for entry in entries:
                    rel = f"{prefix}{entry.name}"
                    if entry.is_symlink():
                        raise UnsafePath("symlinks are not allowed in a checkpoint", file=rel, section="R-CON-4")
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(rel + "/")
                    elif entry.is_file(follow_symlinks=False):
                        found[rel] = entry.stat(follow_symlinks=False).st_size
                        if len(found) > MAX_FILES + 1:
                            raise LimitExceeded(f"more than {MAX_FILES} files", file=str(self.path),
                                                section="R-LIM-4")
                    else:
                        raise UnsafePath("special files are not allowed in a checkpoint", file=rel,
                                         section="R-CON-4")
        return found

    def read_file(self, rel: str, size: int) -> bytes:
        fd = self._open(rel)
        try:
            actual = os.fstat(fd).st_size
            if actual != size:
                raise size_mismatch(rel, actual, size)
            return _read_all(fd, size)
        finally:
            os.close(fd)

    def map_file(self, rel: str, size: int) -> memoryview:
        fd = self._open(rel)
        try:
            actual = os.fstat(fd).st_size
            if actual != size:
                raise size_mismatch(rel, actual, size)
            if size == 0:
                return memoryview(b"")
            return memoryview(mmap.mmap(fd, size, access=mmap.ACCESS_READ))
        finally:
            os.close(fd)


def _read_all(fd: int, size: int) -> bytes:
    buffer = bytearray(size)
    view = memoryview(buffer)
    position = 0
    while position < size:
        count = os.readv(fd, [view[position:]])
        if count == 0:
            break
        position += count
    if position != size:
        raise size_mismatch("(file)", position, size)
    return buffer  # type: ignore[return-value]  # bytearray: no second copy
