"""The reader's view of a checkpoint on an fsspec filesystem (directory form, spec §3.2 and §12.7).

A checkpoint on an object store is a *prefix*: its files are the objects below
it, ``manifest.json`` among them. :class:`RemoteSource` lists them (step 10),
reads whole small files, and hands array reads a :class:`RemoteRegion` that
fetches byte ranges (``cat_file(path, start, end)``: one ranged GET on S3, no
block cache), so a lazy read of one array moves that array's bytes only. Bytes
that a load reads twice (a verify-first restore into live arrays) are kept on
local disk after their first fetch (:mod:`.spill`), and ``validate`` streams
each file once in bounded ranges (:meth:`RemoteSource.read_chunks`). There
are no symbolic links or special files on an object store: every object is a
regular file, and an unlisted one is an :class:`~opencheckpoint.format.errors.ExtraFile`
as in the local form.

A file that was listed when the checkpoint was opened and is gone when read
was deleted by another process (a rotation pruning it): that is reported as
:class:`~opencheckpoint.format.errors.ConcurrentModification` (R-RDR-14), never as a
defect of the checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from ..container.base import FileRegion, Source, gone_while_reading, size_mismatch
from ..format.errors import CheckpointError
from ..format.limits import ARCHIVE_MAX_MEMBERS
from ..format.manifest import MANIFEST_NAME
from ..rules import raise_if, required
from ..rules.container import CON
from .failures import is_storage_error, storage_error
from .fspath import FsPath, is_folder_marker
from .spill import Spill

#: Reads of a whole-component load smaller than this fetch this much ahead (one request per window,
#: not one per 1 MiB chunk); lazy reads of single arrays fetch exactly their range. ``validate`` streams
#: each file in ranges of this size, so its memory is one range whatever the file's size.
READ_AHEAD_BYTES = 16 << 20


class RemoteSource(Source):
    """The objects below one prefix of an fsspec filesystem, read as a directory-form checkpoint."""

    form = "directory"

    def __init__(self, location: FsPath) -> None:
        super().__init__(location)
        self.location = location
        #: files the inventory found: one of them missing later means the checkpoint was deleted
        self._listed: frozenset[str] = frozenset()
        #: files some of whose ranges will be read again: the ranges fetched so far, kept (:meth:`open_region_kept`)
        self._spills: dict[str, Spill] = {}

    def read_manifest(self) -> bytes:
        key = self.location.key(MANIFEST_NAME)
        try:
            info = self.location.fs.info(key)
        except FileNotFoundError:
            raise required(CON.check("R-CON-1", None, "remote", "absent", file=str(self.location))) from None
        except Exception as exc:  # unreachable, no credentials, access denied: the storage's failure, named
            if not is_storage_error(exc):
                raise
            raise storage_error(exc, str(self.location), "read manifest.json") from exc
        found = "file" if info.get("type") == "file" else "directory"
        raise_if(CON.check("R-CON-1", None, "remote", found, file=str(self.location)))
        raise_if(CON.check("R-LIM-1", None, int(info.get("size") or 0), file=MANIFEST_NAME))
        data = self._fetch(MANIFEST_NAME, None, None)
        # replaced by a bigger object since the listing?
        raise_if(CON.check("R-LIM-1", None, len(data), file=MANIFEST_NAME))
        return data

    def inventory(self) -> tuple[dict[str, int], list[CheckpointError], list[str]]:
        root = self.location.path.rstrip("/") + "/"
        self.location.fs.invalidate_cache(self.location.path)  # a listing cached before the manifest was read
        try:
            listing: dict[str, Any] = self.location.fs.find(self.location.path, detail=True)
        except Exception as exc:
            if not is_storage_error(exc):
                raise
            raise storage_error(exc, str(self.location), "list the checkpoint's objects") from exc
        found: dict[str, int] = {}
        errors: list[CheckpointError] = []
        for name in sorted(listing):
            info = listing[name]
            if info.get("type") != "file" or not name.startswith(root) or is_folder_marker(name, info):
                continue  # pseudo-directories (also folder-marker objects); nothing outside the prefix is listed
            found[name[len(root):]] = int(info.get("size") or 0)
            if len(found) > ARCHIVE_MAX_MEMBERS:
                errors.append(required(CON.check("R-CON-2", None, 0, entries="objects", file=name[len(root):])))
                break
        return found, errors, []

    def pin(self, rels: Iterable[str]) -> None:
        """Remember what the inventory listed (an object store has no handle to hold, R-RDR-14)."""
        self._listed = frozenset(rels)

    def _fetch(self, rel: str, start: int | None, end: int | None) -> bytes:
        try:
            return bytes(self.location.fs.cat_file(self.location.key(rel), start=start, end=end))
        except FileNotFoundError:
            if rel in self._listed:
                raise gone_while_reading(rel, "another process deleted the checkpoint (a rotation pruning it?) "
                                              "while it was being read") from None
            raise required(CON.check("R-CON-3", None, "absent", file=rel)) from None
        except Exception as exc:
            if not is_storage_error(exc):
                raise
            raise storage_error(exc, str(self.location / rel), f"read {rel}") from exc

    def read_file(self, rel: str, size: int) -> bytes:
        data = self._fetch(rel, None, None)
        if len(data) != size:
            raise size_mismatch(rel, len(data), size)
        return data

    def map_file(self, rel: str, size: int) -> memoryview:
        """The whole object, fetched into memory (there is nothing to map): views of a whole file (``copy=False``
        reads, shard files) need it; ``validate`` and array reads fetch by range instead."""
        return memoryview(self.read_file(rel, size))

    def read_chunks(self, rel: str, size: int) -> Iterator[memoryview]:
        """The object in ranges of :data:`READ_AHEAD_BYTES`, each fetched when the previous one was used.

        The last request asks for one byte more than the manifest lists, so an object that grew
        since the inventory is reported (R-CHK-6) as when it is read whole.
        """
        for start in range(0, size, READ_AHEAD_BYTES):
            end = min(size, start + READ_AHEAD_BYTES)
            data = self._fetch(rel, start, end + 1 if end == size else end)
            if len(data) != end - start:
                raise size_mismatch(rel, start + len(data), size)
            yield memoryview(data)

    def open_region(self, rel: str, size: int) -> FileRegion:
        return RemoteRegion(self, rel, size, window=READ_AHEAD_BYTES, spill=self._spills.get(rel))

    def open_region_kept(self, rel: str, size: int) -> FileRegion:
        """A region whose fetched ranges are kept (:mod:`.spill`) for every later region of the file."""
        spill = self._spills.get(rel)
        if spill is None:
            spill = self._spills[rel] = Spill(rel)
        return RemoteRegion(self, rel, size, window=READ_AHEAD_BYTES, spill=spill, keep=True)

    def lazy_data(self, rel: str, size: int) -> FileRegion:
        return RemoteRegion(self, rel, size, window=0)

    def fetch_range(self, rel: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of a file: one ranged request."""
        return self._fetch(rel, start, end)

    def close(self) -> None:
        for spill in self._spills.values():
            spill.close()
        self._spills.clear()


class RemoteRegion(FileRegion):
    """A remote file read by byte range into caller buffers, optionally ``window`` bytes ahead at a time.

    With a ``spill``, ranges it holds are read from it instead of fetched; with ``keep``, every range
    fetched is added to it.
    """

    __slots__ = ("_source", "_window", "_ahead", "_ahead_start", "_spill", "_keep")

    def __init__(self, source: RemoteSource, rel: str, size: int, *, window: int, spill: Spill | None = None,
                 keep: bool = False) -> None:
        super().__init__(-1, 0, size, rel, owns_fd=False)
        self._source = source
        self._window = window
        self._ahead = b""
        self._ahead_start = 0
        self._spill = spill
        self._keep = keep

    def readinto(self, buffer: Any, offset: int) -> None:
        view = self.requested(buffer, offset)
        want = len(view)
        if not want:
            return
        ahead_end = self._ahead_start + len(self._ahead)
        if not (self._ahead_start <= offset and offset + want <= ahead_end):
            if self._spill is not None and self._spill.covers(offset, offset + want):
                self._spill.readinto(view, offset)  # fetched before by a kept region of this file
                return
            data = self._fetch_from(offset, want)
            if want >= self._window:
                view[:] = data
                return
            self._ahead, self._ahead_start = data, offset
        start = offset - self._ahead_start
        view[:] = memoryview(self._ahead)[start : start + want]

    def _fetch_from(self, offset: int, want: int) -> bytes:
        """The bytes from ``offset`` to the end of the next window (at least ``want``), each byte fetched once:
        a read that begins inside the current window fetches only what follows it."""
        ahead_end = self._ahead_start + len(self._ahead)
        begin, head = offset, b""
        if self._ahead_start <= offset < ahead_end:
            begin, head = ahead_end, self._ahead[offset - self._ahead_start :]
        end = min(self.size, offset + max(want, self._window))
        data = self._source.fetch_range(self.rel, begin, end)
        if len(data) != end - begin:  # the object shrank after the inventory
            raise size_mismatch(self.rel, begin + len(data), self.size)
        if self._keep and self._spill is not None:
            self._spill.write(begin, data)
        return head + data if head else data

    def close(self) -> None:
        self._ahead = b""
