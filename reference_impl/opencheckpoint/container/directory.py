"""The directory form: files below the checkpoint directory, opened without following symlinks.

Every path is opened one segment at a time relative to the checkpoint's
directory descriptor with ``O_NOFOLLOW``, and the inventory walks directory
descriptors with ``lstat`` semantics (R-CON-6, R-CON-7), so a symlink anywhere
inside the checkpoint is an :class:`UnsafePath`, never a read outside it.

Once the inventory has passed, :meth:`DirectorySource.pin` opens every listed
file and keeps the descriptors until :meth:`~DirectorySource.close`: a writer
that then replaces the checkpoint (renames it aside and deletes it) cannot
take a file away from this reader, which goes on reading the checkpoint it
opened, whole (R-RDR-14). Every later read goes through those descriptors
with positioned reads (``pread``), so descriptors shared by several reads
never disturb each other.
"""

from __future__ import annotations

import errno
import mmap
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from ..format.errors import CheckpointError, MissingFile
from ..format.limits import ARCHIVE_MAX_MEMBERS
from ..format.manifest import MANIFEST_NAME
from ..rules import raise_if, required
from ..rules.container import CON
from . import pins
from .base import FileRegion, FileStamp, Source, file_stamp, gone_while_reading, size_mismatch

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | _CLOEXEC
class _OutOfDescriptors(Exception):
    """Pinning stops: the process's descriptor limit is reached (never escapes :meth:`DirectorySource.pin`)."""


class DirectorySource(Source):
    form = "directory"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        try:
            # The caller's path may pass through symlinks (a `latest` link): only entries below count.
            self._root = os.open(path, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
        except OSError as exc:
            raise required(CON.check("R-PUB-11", None, True, exc, "open directory", file=str(path))) from None
        #: relative path -> descriptor held from :meth:`pin` until :meth:`close`
        self._pinned: dict[str, int] = {}
        #: files the inventory found: one of them missing later means the checkpoint was replaced
        self._listed: frozenset[str] = frozenset()

    def close(self) -> None:
        pinned, self._pinned = self._pinned, {}
        for fd in pinned.values():
            os.close(fd)
        if self._root >= 0:
            os.close(self._root)
            self._root = -1

    def pin(self, rels: Iterable[str]) -> None:
        """Hold every file of ``rels`` (which passed the inventory) open until :meth:`close` (R-RDR-14).

        Beyond :func:`.pins.pin_allowance` files (which leaves the process half its descriptor limit),
        the rest are opened when read; one of those that has disappeared by then is reported as
        :class:`ConcurrentModification`.
        """
        listed = list(rels)
        self._listed = frozenset(listed)
        # Deferred files (shard data files) are opened on their first read, through the root descriptor held
        # since opening: a file of this checkpoint, or, once it was replaced and deleted, ConcurrentModification.
        wanted = [rel for rel in listed if rel not in self.deferred and rel not in self._pinned]
        for rel in wanted[:pins.pin_allowance(len(wanted))]:
            try:
                self._pinned[rel] = self._open_path(rel, pinning=True)
            except _OutOfDescriptors:  # the process holds many files already: the rest stay lazy
                break

    def _open(self, rel: str) -> int:
        """A descriptor of its own for ``rel`` (the caller closes it): a duplicate of a pinned one if held."""
        pinned = self._pinned.get(rel)
        if pinned is not None:
            return os.dup(pinned)
        try:
            if rel in self.deferred:  # pinned from its first read on: later reads get this same file
                self._pinned[rel] = self._open_path(rel)
                return os.dup(self._pinned[rel])
            return self._open_path(rel)
        except MissingFile as exc:
            if rel in self._listed:
                raise gone_while_reading(rel, "another process replaced or deleted the checkpoint while it was "
                                              "being read; open it again") from exc
            raise

    def _open_path(self, rel: str, *, pinning: bool = False) -> int:
        parts = rel.split("/")
        fd = self._root
        opened: list[int] = []
        try:
            for part in parts[:-1]:
                fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                opened.append(fd)
            result = os.open(parts[-1], _FILE_FLAGS, dir_fd=fd)
        except OSError as exc:
            if pinning and exc.errno in (errno.EMFILE, errno.ENFILE):
                raise _OutOfDescriptors from None
            raise _open_failure(rel, exc) from None
        finally:
            for d in opened:
                os.close(d)
        if not stat.S_ISREG(os.fstat(result).st_mode):
            os.close(result)  # a FIFO opened with O_NONBLOCK is never read
            raise_if(CON.check("R-CON-4", None, "opened", file=rel))
        return result

    def read_manifest(self) -> bytes:
        try:
            info: os.stat_result | None = os.stat(MANIFEST_NAME, dir_fd=self._root, follow_symlinks=False)
        except OSError:
            info = None
        found = "absent" if info is None else "directory" if stat.S_ISDIR(info.st_mode) else "file"
        raise_if(CON.check("R-CON-1", None, "directory", found, file=str(self.path)))
        assert info is not None  # for mypy: "absent" was raised
        raise_if(CON.check("R-CON-4", None, "file" if stat.S_ISREG(info.st_mode) else "manifest", file=MANIFEST_NAME))
        raise_if(CON.check("R-LIM-1", None, info.st_size, file=MANIFEST_NAME))
        fd = self._open_path(MANIFEST_NAME)
        try:
            size = os.fstat(fd).st_size
            raise_if(CON.check("R-LIM-1", None, size, file=MANIFEST_NAME))  # it may have grown since
            return _read_all(fd, size, MANIFEST_NAME)
        finally:
            os.close(fd)

    def inventory(self) -> tuple[dict[str, int], list[CheckpointError], list[str]]:
        found: dict[str, int] = {}
        errors: list[CheckpointError] = []
        rejected: list[str] = []
        stack: list[tuple[str, int]] = [("", os.dup(self._root))]
        try:
            while stack:
                prefix, fd = stack.pop()
                try:
                    try:
                        with os.scandir(fd) as entries:
                            listing = sorted((entry.name, entry) for entry in entries)
                    except OSError as exc:  # e.g. the directory was deleted under us
                        errors.append(required(CON.check("R-CON-3", None, failure=exc, action="list directory",
                                                       file=prefix or ".")))
                        continue
                    for name, entry in listing:
                        rel = f"{prefix}{name}"
                        kind = _entry_kind(entry)
                        failure: OSError | None = None
                        if kind == "directory":
                            try:
                                stack.append((rel + "/", os.open(name, _DIR_FLAGS, dir_fd=fd)))
                            except OSError as exc:
                                failure = exc
                        elif kind == "file" and rel in self.deferred:
                            found[rel] = -1  # present; its size is checked when it is first opened (R-CHK-6)
                        elif kind == "file":
                            try:
                                found[rel] = entry.stat(follow_symlinks=False).st_size
                            except FileNotFoundError:  # deleted since the listing: not a regular file now
                                continue
                            if len(found) > ARCHIVE_MAX_MEMBERS:
                                # More files than any manifest can list (R-LIM-6): some are unlisted.
                                errors.append(required(CON.check("R-CON-2", None, 0, entries="files", file=rel)))
                                return found, errors, rejected
                        bad = CON.check("R-CON-4", None, kind, failure, file=rel)
                        if bad is not None:
                            errors.append(bad)
                            rejected.append(rel)
                finally:
                    os.close(fd)
        finally:
            for _, fd in stack:
                os.close(fd)
        return found, errors, rejected

    def read_file(self, rel: str, size: int) -> bytes:
        fd = self._open(rel)
        try:
            actual = os.fstat(fd).st_size
            if actual != size:
                raise size_mismatch(rel, actual, size)
            return _read_all(fd, size, rel)
        finally:
            os.close(fd)

    def map_file(self, rel: str, size: int) -> memoryview:
        fd = self._open(rel)
        try:
            self._check_size(fd, rel, size)
            if size == 0:
                return memoryview(b"")
            try:
                return memoryview(mmap.mmap(fd, size, access=mmap.ACCESS_READ))
            except (OSError, ValueError) as exc:
                raise required(CON.check("R-CON-3", None, failure=str(exc), action="map", file=rel)) from None
        finally:
            os.close(fd)

    def private_map(self, rel: str, size: int) -> tuple[mmap.mmap, int] | None:
        fd = self._open(rel)
        try:
            self._check_size(fd, rel, size)
            try:
                return mmap.mmap(fd, size, access=mmap.ACCESS_COPY), 0
            except (OSError, ValueError):
                return None  # no address space or commit charge for it (strict overcommit): read instead
        finally:
            os.close(fd)

    def _check_size(self, fd: int, rel: str, size: int) -> None:
        """R-CHK-6 for a file about to be mapped, and its stamp recorded (:meth:`Source.check_mapped`)."""
        info = os.fstat(fd)
        if info.st_size != size:
            raise size_mismatch(rel, info.st_size, size)
        self._record_mapped(rel, file_stamp(info))

    def stamp(self, rel: str) -> FileStamp | None:
        """The file's stamp now, through the descriptor this reader holds (a map's pages are that file's)."""
        fd = self._open(rel)
        try:
            return file_stamp(os.fstat(fd))
        finally:
            os.close(fd)

    def open_region(self, rel: str, size: int) -> FileRegion:
        """The file for positioned reads into caller buffers (no map: no file pages in RSS)."""
        fd = self._open(rel)
        try:
            actual = os.fstat(fd).st_size
            if actual != size:
                raise size_mismatch(rel, actual, size)
        except BaseException:
            os.close(fd)
            raise
        return FileRegion(fd, 0, size, rel, owns_fd=True)


def _read_all(fd: int, size: int, rel: str) -> bytes:
    """The whole file as ``bytes``: one ``read`` into an immutable object, no second copy.

    A regular file usually answers in one call; only a short read (files over
    2 GiB on Linux, unusual file systems) goes on into a buffer and is copied once.
    """
    try:
        # Positioned reads: the descriptor may be a duplicate of a pinned one, sharing its file offset.
        first = os.pread(fd, size, 0) if size else b""
        if len(first) == size:
            return first
        buffer = bytearray(size)
        view = memoryview(buffer)
        view[: len(first)] = first
        position = len(first)
        while first and position < size:
            count = os.preadv(fd, [view[position:]], position)
            if count == 0:
                break
            position += count
    except OSError as exc:
        raise required(CON.check("R-CON-3", None, failure=exc, file=rel)) from None
    if position != size:
        raise size_mismatch(rel, position, size)
    return bytes(buffer)


def _entry_kind(entry: os.DirEntry[str]) -> str:
    """What a directory entry is, without following a symlink (the facts R-CON-4 judges)."""
    if entry.is_symlink():
        return "symlink"
    if entry.is_dir(follow_symlinks=False):
        return "directory"
    return "file" if entry.is_file(follow_symlinks=False) else "special"


def _open_failure(rel: str, exc: OSError) -> CheckpointError:
    """The rule an ``open`` of a listed file broke: absent (R-CON-3), through a link (R-CON-4), unreadable."""
    if exc.errno == errno.ENOENT:
        return required(CON.check("R-CON-3", None, "absent", file=rel))
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        return required(CON.check("R-CON-4", None, "through", file=rel))
    return required(CON.check("R-CON-3", None, failure=exc, action="open", file=rel))

