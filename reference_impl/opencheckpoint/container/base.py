"""The reader's view of a checkpoint container, whatever its form (spec §3 and §12.3).

A :class:`Source` reads ``manifest.json`` (steps 2-3 of §15), lists every entry
of the container (step 10) and reads or memory-maps one file at a time.
:func:`look_beside` and :func:`check_locatable` serve step 1 (what a path names, and the
``.NAME.oc-old-*`` fallback of a checkpoint caught in the middle of a non-atomic replace);
:mod:`.opener` picks the form. This module imports neither form, so the forms import it one way.

>>> is_staging_name(Path("/ckpts/.step-1.oc-staging-42-abcdefgh"))
True
"""

from __future__ import annotations

import abc
import dataclasses
import mmap
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..format.errors import CheckpointError, ConcurrentModification, IntegrityError, out_of_descriptors
from ..format.integrity import CHUNK_BYTES
from ..location import Location
from ..rules.container import CON
from ..rules.container import STAGING_MARK as STAGING_MARK  # where writers and readers have always found it

OLD_MARK = ".oc-old-"

#: What identifies a file's contents without reading them: inode, device, size, modification and
#: status-change times (nanoseconds).
FileStamp = tuple[int, int, int, int, int]


def file_stamp(info: os.stat_result) -> FileStamp:
    """The :data:`FileStamp` of a ``stat`` result."""
    return info.st_ino, info.st_dev, info.st_size, info.st_mtime_ns, info.st_ctime_ns


class Source(abc.ABC):
    """Read access to the files of one checkpoint."""

    #: "directory" or "archive"
    form: str
    #: whether every read is a request over the network (an object store): a partial load then reads only the
    #: arrays it restores, each by its exact range, rather than the whole data file
    reads_by_request = False

    def __init__(self, path: Location) -> None:
        self.path = path
        #: each file mapped so far -> its stamp when it was first mapped (:meth:`check_mapped`)
        self._mapped: dict[str, FileStamp] = {}

    def _record_mapped(self, rel: str, stamp: FileStamp) -> None:
        """Remember what ``rel`` was when it was first mapped (the forms call this from their maps)."""
        self._mapped.setdefault(rel, stamp)

    def stamp(self, rel: str) -> FileStamp | None:
        """The file's :data:`FileStamp` now, as a map of it sees the file; None where the form maps nothing."""
        return None

    def check_mapped(self) -> None:
        """Raise :class:`ConcurrentModification` when a file mapped since this source was opened has changed.

        A restore that copies from a map verifies the map's bytes first, then
        copies them: a file changed in place in between (``rsync --inplace``,
        another process) would hand its new bytes over unchecked. A load calls
        this after its apply step: one ``fstat`` per mapped file, no pass over
        the bytes. It sees what the file system records (size, inode, times),
        not a change within its timestamp granularity.
        """
        for rel, stamp in self._mapped.items():
            if self.stamp(rel) != stamp:
                raise ConcurrentModification(
                    "the file changed in place while it was being loaded; the live objects may hold its new "
                    "bytes: load again", file=rel)

    @abc.abstractmethod
    def read_manifest(self) -> bytes:
        """The bytes of ``manifest.json`` (steps 2 and 3: R-CON-1, R-CON-4, R-LIM-1)."""

    #: Listed files opened, and their size checked (R-CHK-6), on their first read instead of at opening: the
    #: shard data files of sharded arrays, most of which one rank never reads (set by the opener, step 10).
    deferred: frozenset[str] = frozenset()

    @abc.abstractmethod
    def inventory(self) -> tuple[dict[str, int], list[CheckpointError], list[str]]:
        """Step 10: every regular file (``manifest.json`` included) -> size, the errors found
        (non-regular entries, archive member rules), and the paths of rejected entries."""

    @abc.abstractmethod
    def read_file(self, rel: str, size: int) -> bytes:
        """The whole file as immutable ``bytes`` (in every form), which must be exactly ``size`` bytes."""

    @abc.abstractmethod
    def map_file(self, rel: str, size: int) -> memoryview:
        """A read-only memory map of the file, which must be exactly ``size`` bytes."""

    @abc.abstractmethod
    def open_region(self, rel: str, size: int) -> FileRegion:
        """The file (which must be exactly ``size`` bytes) for positioned reads into caller buffers.

        Array reads use this rather than :meth:`map_file`, so no page of the
        file stays resident in the process. The caller closes the region.
        """

    def open_region_kept(self, rel: str, size: int) -> FileRegion:
        """:meth:`open_region` for bytes that will be read again while the source is open (a verify-first
        restore reads its targets' bytes to check them, then to fill them). Here the second read comes from
        the page cache; a remote source keeps what this region fetches, so each range is fetched once."""
        return self.open_region(rel, size)

    def read_chunks(self, rel: str, size: int) -> Iterator[memoryview]:
        """The file's bytes in order (exactly ``size`` of them), one chunk at a time, for one pass over them.

        Here slices of :meth:`map_file`; a remote source fetches each chunk by byte range
        instead, so the memory a pass takes is one chunk, not the file.
        """
        view = self.map_file(rel, size)
        for start in range(0, size, CHUNK_BYTES):
            yield view[start : start + CHUNK_BYTES]

    def private_map(self, rel: str, size: int) -> tuple[mmap.mmap, int] | None:
        """A copy-on-write map that nothing else holds, and where the file's ``size`` bytes (more than 0)
        start in it; None where the form has no map (remote) or the map cannot be made (no address
        space, or no commit charge under strict overcommit): the caller reads the file instead.

        Its views are writeable, and writes never reach the file; the caller
        closes the map (:mod:`opencheckpoint.read.lent_views` lends its views to an
        object's own load method and closes it once they are all gone).
        """
        return None

    def private_range(self, rel: str, size: int, offset: int, nbytes: int) -> memoryview | None:
        """Bytes ``[offset, offset + nbytes)`` of a file (``size`` bytes) in memory of their own, where the form
        reads by byte range (remote: a shard's extent fetched alone); None where readers view a map instead."""
        return None

    def lazy_data(self, rel: str, size: int) -> memoryview | FileRegion:
        """What lazy arrays read from: a map (local forms), or a region read by byte range (remote)."""
        return self.map_file(rel, size)

    def zip_crc32(self, rel: str) -> int | None:
        """The ZIP CRC-32 the container records for a file (R-ZIP-22), or None when it records none."""
        return None

    def pin(self, rels: Iterable[str]) -> None:  # noqa: B027  (an archive holds its one file open already)
        """Hold the listed files (which passed the inventory) for the reader's lifetime (R-RDR-14)."""

    def close(self) -> None:  # noqa: B027  (a no-op by default: a source without handles need not override it)
        """Release resources (maps stay valid while arrays use them)."""

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FileRegion:
    """``size`` bytes of an open file starting at ``base``, read with ``preadv`` straight into buffers.

    Reading copies pages from the page cache into the caller's memory once;
    unlike a map, nothing of the file stays resident in the process.

    >>> import tempfile
    >>> with tempfile.TemporaryFile() as f:
    ...     _ = f.write(b"headerpayload"); f.flush()
    ...     region = FileRegion(f.fileno(), 6, 7, "x", owns_fd=False)
    ...     out = bytearray(4); region.readinto(out, 3); bytes(out)
    b'load'
    """

    __slots__ = ("fd", "base", "size", "rel", "_owns_fd")

    #: Whether each read is a network request (a remote region): then an array is read with one call, which
    #: the region cuts into bounded concurrent requests, rather than chunk by chunk.
    ranged = False

    def __init__(self, fd: int, base: int, size: int, rel: str, *, owns_fd: bool) -> None:
        self.fd = fd
        self.base = base
        self.size = size
        self.rel = rel
        self._owns_fd = owns_fd

    def requested(self, buffer: Any, offset: int) -> memoryview:
        """``buffer`` as bytes, once the range it asks for (at ``offset``) is known to lie inside the region."""
        view = memoryview(buffer).cast("B")
        if offset < 0 or offset + len(view) > self.size:
            raise size_mismatch(self.rel, self.size, offset + len(view))
        return view

    def readinto(self, buffer: Any, offset: int) -> None:
        """Fill ``buffer`` (any writable buffer) with the bytes at ``offset`` of the region."""
        view = self.requested(buffer, offset)
        want = len(view)
        position = 0
        try:
            while position < want:
                count = os.preadv(self.fd, [view[position:]], self.base + offset + position)
                if count == 0:
                    break
                position += count
        except OSError as exc:
            unreadable = CON.check("R-CON-3", None, failure=exc, file=self.rel)
            assert unreadable is not None  # a failure always breaks the rule
            raise unreadable from None
        if position != want:  # the file shrank after its size was checked
            raise size_mismatch(self.rel, offset + position, offset + want)

    def close(self) -> None:
        if self._owns_fd and self.fd >= 0:
            os.close(self.fd)
        self.fd = -1

    def __enter__(self) -> FileRegion:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def gone_while_reading(rel: str, how: str) -> CheckpointError:
    """R-RDR-14: a file present when the checkpoint was opened is gone: another process replaced or deleted it."""
    return CON.error("R-RDR-14", f"the file was present when the checkpoint was opened and is gone now: {how}",
                     file=rel)


def size_mismatch(rel: str, actual: int, size: int) -> IntegrityError:
    """R-CHK-6's error for a listed file whose length ``actual`` differs from its entry's ``size``."""
    error = CON.check("R-CHK-6", "size", actual, size, file=rel)
    assert isinstance(error, IntegrityError), "called for a length that differs"
    return error


def is_staging_name(path: Path) -> bool:
    """R-PUB-12: a last segment that begins with ``.`` and contains ``.oc-staging-``."""
    return CON.check("R-PUB-12", None, path.name) is not None


def old_candidates(target: Path) -> list[Path]:
    """Entries ``.NAME.oc-old-<suffix>`` (suffix non-empty) next to ``target`` (R-PUB-13)."""
    return list(look_beside(target).old_copies)


@dataclasses.dataclass(frozen=True)
class Beside:
    """What one listing of a checkpoint's directory showed at and beside its name.

    ``present``: an entry at the name itself; ``old_copies``: ``.NAME.oc-old-*`` entries (R-PUB-13),
    ``writers``: names of ``.NAME.oc-staging-*`` entries (saves that may be in progress).
    """

    present: bool
    old_copies: tuple[Path, ...]
    writers: tuple[str, ...]


def look_beside(target: Path) -> Beside:
    """One look at the name ``target`` and the entries beside it, taken from a single directory listing.

    A writer without an atomic exchange (R-PUB-6) keeps either the name or its ``.NAME.oc-old-*`` copy in
    place at every instant; a reader that looked at the name and then, separately, for the copy could see
    neither (two saves between its looks). One listing is one instant on Linux for a directory that fits one
    ``getdents`` call (hundreds of entries: the directory's lock excludes renames meanwhile), so "neither"
    here means nothing was published then; beyond that the caller's retry (R-RDR-13) covers the window.

    >>> look_beside(Path("/nonexistent-dir/step-1"))
    Beside(present=False, old_copies=(), writers=())
    """
    try:
        names = os.listdir(target.parent)
    except OSError as exc:
        exhausted = out_of_descriptors(exc, str(target))
        if exhausted is not None:  # the directory could not be looked at: never "nothing here"
            raise exhausted from None
        names = []
    old, staging = f".{target.name}{OLD_MARK}", f".{target.name}{STAGING_MARK}"
    return Beside(present=target.name in names,
                  old_copies=tuple(sorted(target.parent / n for n in names
                                          if n.startswith(old) and len(n) > len(old))),
                  writers=tuple(sorted(n for n in names if n.startswith(staging))))


def identity(path: Path) -> tuple[int, int, int] | None:
    """What the name ``path`` resolves to now: device, inode and status-change time; None if nothing.

    A writer that replaces a checkpoint makes the name resolve to another entry (rename, exchange),
    whose inode differs, or, if the file system reuses the number, whose ctime does (a rename sets it).
    """
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino, info.st_ctime_ns


def check_locatable(target: Path) -> None:
    """R-PUB-12, R-PUB-10 and R-PUB-11 for a path that exists."""
    error = CON.check("R-PUB-12", None, target.name, file=str(target))
    if error is None:
        try:
            mode = os.stat(target).st_mode
        except OSError as exc:  # gone since the caller looked
            error = CON.check("R-PUB-10", None, False, f"cannot stat: {exc.strerror}", file=str(target))
        else:
            error = CON.check("R-PUB-11", None, stat.S_ISDIR(mode) or stat.S_ISREG(mode), file=str(target))
    if error is not None:
        raise error
