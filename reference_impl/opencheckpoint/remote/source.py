"""The reader's view of a checkpoint on an fsspec filesystem (directory form, spec §3.2 and §12.7).

A checkpoint on an object store is a *prefix*: its files are the objects below
it, ``manifest.json`` among them. :class:`RemoteSource` lists them (step 10),
reads small files with one GET, and reads everything else by byte range in
pieces of at most 16 MiB, several at a time (:mod:`.ranges`): a load's
:class:`RemoteRegion` reads the data file piece by piece ahead of the arrays
being checked, a lazy read of one array fetches that array's bytes only, a
shard of a sharded array is fetched alone (:meth:`RemoteSource.private_range`),
and ``validate`` streams each file once (:meth:`RemoteSource.read_chunks`).
Bytes that a load reads twice (a verify-first restore into live arrays) are
kept on local disk after their first fetch (:mod:`.spill`). There are no
symbolic links or special files on an object store: every object is a regular
file, and an unlisted one is an :class:`~opencheckpoint.format.errors.ExtraFile`
as in the local form.

A file that was listed when the checkpoint was opened and is gone when read
was deleted by another process (a rotation pruning it): that is reported as
:class:`~opencheckpoint.format.errors.ConcurrentModification` (R-RDR-14), never as a
defect of the checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from functools import partial
from typing import Any

from ..container.base import FileRegion, Source, gone_while_reading, size_mismatch
from ..format.errors import CheckpointError
from ..format.limits import ARCHIVE_MAX_MEMBERS
from ..format.manifest import MANIFEST_NAME
from ..rules import raise_if, required
from ..rules.container import CON
from . import ranges
from .failures import is_storage_error, storage_error
from .fspath import FsPath, is_folder_marker
from .ranges import fetch_into, in_order, pieces
from .spill import Spill


class RemoteSource(Source):
    """The objects below one prefix of an fsspec filesystem, read as a directory-form checkpoint."""

    form = "directory"
    reads_by_request = True

    def __init__(self, location: FsPath) -> None:
        super().__init__(location)
        self.location = location
        #: files the inventory found: one of them missing later means the checkpoint was deleted
        self._listed: frozenset[str] = frozenset()
        #: files some of whose ranges will be read again: the ranges fetched so far, kept (:meth:`open_region_kept`)
        self._spills: dict[str, Spill] = {}
        #: small files read whole so far (immutable bytes; every reader checks their CRC-32C on each use)
        self._documents: dict[str, bytes] = {}

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

    def fetch_range(self, rel: str, start: int, end: int, *, size: int | None = None, probe: bool = True) -> bytes:
        """Bytes ``[start, end)`` of a file: one ranged request.

        ``size``: the file's listed size. With ``probe`` a range ending there asks for one byte more, so an
        object that grew since the listing is reported (R-CHK-6) as when it is read whole. An object that shrank
        since (a short answer, or a range the storage refuses as past its end) is reported as R-CHK-6 too, with
        its listed and its current size.
        """
        ask = end + 1 if probe and size is not None and end == size else end
        try:
            data = self._fetch(rel, start, ask)
        except CheckpointError as exc:
            if size is None or exc.__cause__ is None:  # no size to compare, or already the library's own finding
                raise
            now = self._size_now(rel)
            if now is not None and now != size:  # e.g. "range not satisfiable": the object was truncated
                raise size_mismatch(rel, now, size) from exc
            raise
        if len(data) != end - start:
            raise size_mismatch(rel, start + len(data), end if size is None else size)
        return data

    def _size_now(self, rel: str) -> int | None:
        """The object's size now (a failed range read asks: did it change?); None if the storage cannot say."""
        key = self.location.key(rel)
        self.location.fs.invalidate_cache(key)  # the inventory's listing holds the size it had then
        try:
            return int(self.location.fs.info(key).get("size") or 0)
        except FileNotFoundError:
            raise gone_while_reading(rel, "another process deleted the checkpoint (a rotation pruning it?) "
                                          "while it was being read") from None
        except Exception as exc:
            if not is_storage_error(exc):
                raise
            return None

    def read_file(self, rel: str, size: int) -> bytes:
        """The whole file; a small one (a tree document, a JSON value: at most one range) is fetched once per
        open checkpoint, and kept: a load reads a component's document when it plans and again when it reads."""
        kept = self._documents.get(rel)
        if kept is not None and len(kept) == size:
            return kept
        if size <= ranges.RANGE_BYTES:
            data = self._fetch(rel, None, None)
            if len(data) != size:
                raise size_mismatch(rel, len(data), size)
            self._documents[rel] = data
            return data
        return bytes(self._fetch_whole(rel, size))

    def _fetch_whole(self, rel: str, size: int) -> bytearray:
        """The object in bounded ranges fetched concurrently (:mod:`.ranges`), its size checked."""
        whole = bytearray(size)
        fetch_into(lambda start, end: self.fetch_range(rel, start, end, size=size), memoryview(whole), 0)
        return whole

    def map_file(self, rel: str, size: int) -> memoryview:
        """The whole object, fetched into memory (there is nothing to map) in bounded ranges, several at a time:
        ``copy=False`` reads need it; array reads, shard reads and ``validate`` fetch by range instead."""
        if size <= ranges.RANGE_BYTES:
            data = self._fetch(rel, None, None)
            if len(data) != size:
                raise size_mismatch(rel, len(data), size)
            return memoryview(data)
        return memoryview(self._fetch_whole(rel, size)).toreadonly()

    def read_chunks(self, rel: str, size: int) -> Iterator[memoryview]:
        """The object in ranges of at most :data:`~.ranges.RANGE_BYTES`, yielded in order while the next
        :data:`~.ranges.IN_FLIGHT` are being fetched: each byte once, memory a few ranges whatever the size."""
        fetch = partial(self.fetch_range, rel, size=size)
        for data in in_order(fetch, pieces(0, size)):
            yield memoryview(data)

    def private_range(self, rel: str, size: int, offset: int, nbytes: int) -> memoryview:
        """Bytes ``[offset, offset + nbytes)`` of a file, fetched by range into memory of their own (a shard of a
        sharded array: only the shards a read overlaps are fetched, never a whole shard object)."""
        if offset < 0 or offset + nbytes > size:
            raise size_mismatch(rel, size, offset + nbytes)
        out = bytearray(nbytes)
        fetch_into(lambda start, end: self.fetch_range(rel, start, end, size=size), memoryview(out), offset)
        return memoryview(out)

    def open_region(self, rel: str, size: int) -> FileRegion:
        return RemoteRegion(self, rel, size, read_ahead=True, spill=self._spills.get(rel))

    def open_region_kept(self, rel: str, size: int) -> FileRegion:
        """A region whose fetched ranges are kept (:mod:`.spill`) for every later region of the file."""
        spill = self._spills.get(rel)
        if spill is None:
            spill = self._spills[rel] = Spill(rel)
        return RemoteRegion(self, rel, size, read_ahead=True, spill=spill, keep=True)

    def lazy_data(self, rel: str, size: int) -> FileRegion:
        return RemoteRegion(self, rel, size, read_ahead=False)

    def close(self) -> None:
        for spill in self._spills.values():
            spill.close()
        self._spills.clear()
        self._documents.clear()


class RemoteRegion(FileRegion):
    """A remote file read by byte range into caller buffers.

    ``read_ahead`` (a reader of the whole file in file order: a component's
    load, a verify-first check): the file is read as consecutive pieces of
    :data:`~.ranges.RANGE_BYTES`, each fetched once, :data:`~.ranges.IN_FLIGHT`
    of them ahead of the one being used, so the network works while the
    caller checks what came. Without it (a lazy read of one array) exactly the
    bytes asked for are fetched, in bounded pieces fetched concurrently. With a
    ``spill``, ranges it holds are read from it instead of fetched; with
    ``keep``, every piece fetched is added to it.
    """

    __slots__ = ("_source", "_read_ahead", "_pieces", "_spilled", "_spill", "_keep")

    #: reads are network requests: read an array with one call, which the region cuts into bounded
    #: concurrent requests, rather than chunk by chunk (:func:`~opencheckpoint.read.arrays.read_verified_into`)
    ranged = True

    def __init__(self, source: RemoteSource, rel: str, size: int, *, read_ahead: bool, spill: Spill | None = None,
                 keep: bool = False) -> None:
        super().__init__(-1, 0, size, rel, owns_fd=False)
        self._source = source
        self._read_ahead = read_ahead
        self._pieces: dict[int, Future[bytes]] = {}  # piece index -> its bytes, fetched or on the way
        self._spilled: set[int] = set()  # pieces already added to the spill
        self._spill = spill
        self._keep = keep

    def _fetch(self, start: int, end: int) -> bytes:
        # A whole-file reader probes for growth at the end (as read_chunks does); a lazy read asks exactly its range.
        return self._source.fetch_range(self.rel, start, end, size=self.size, probe=self._read_ahead)

    def readinto(self, buffer: Any, offset: int) -> None:
        view = self.requested(buffer, offset)
        want = len(view)
        if not want:
            return
        if self._spill is not None and self._spill.covers(offset, offset + want):
            self._spill.readinto(view, offset)  # fetched before by a kept region of this file
            return
        if not self._read_ahead:
            fetch_into(self._fetch, view, offset)
            if self._keep and self._spill is not None:
                self._spill.write(offset, bytes(view))
            return
        step = ranges.RANGE_BYTES
        first, last = offset // step, (offset + want - 1) // step
        for index in range(first, last + 1):
            data = self._piece(index, step)
            begin = index * step
            lo, hi = max(offset, begin), min(offset + want, begin + len(data))
            view[lo - offset : hi - offset] = memoryview(data)[lo - begin : hi - begin]
        for index in [index for index in self._pieces if index < last]:  # used up: reads go forward
            del self._pieces[index]

    def _piece(self, index: int, step: int) -> bytes:
        """Piece ``index`` (of ``step`` bytes) of the file, once fetched; the next :data:`~.ranges.IN_FLIGHT`
        pieces are started now, so they are on the way while the caller uses this one."""
        count = -(-self.size // step)
        for ahead in range(index, min(count, index + ranges.IN_FLIGHT + 1)):
            if ahead not in self._pieces:
                start = ahead * step
                self._pieces[ahead] = ranges.pool().submit(self._fetch, start, min(self.size, start + step))
        data = self._pieces[index].result()
        if self._keep and self._spill is not None and index not in self._spilled:
            self._spill.write(index * step, data)
            self._spilled.add(index)
        return data

    def close(self) -> None:
        for future in self._pieces.values():
            future.cancel()
        self._pieces.clear()
