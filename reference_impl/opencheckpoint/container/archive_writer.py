"""Writing the archive form in one pass: members go straight into the ZIP file (spec §3.3, §12.2).

Each member's local header, padded with an extra field (header id 0xD935, the
one Android's zipalign uses) so that its data starts at a multiple of 64, is
written with positioned writes once the member's CRC-32 is known; the data is
streamed to its final offset as it is produced, so no byte is written twice
and no staging copy of the checkpoint exists on disk.

A tree component needs one more trick: ``tree.msgpack`` precedes ``data.bin``
in the archive, but its bytes (the array checksums) are known only after the
array bytes were written. :meth:`ArchiveWriter.reserve` keeps room for a member
of at most ``size`` bytes; the next member streams to where its data lands if
the reserved member is full size; :meth:`ArchiveWriter.fill` then writes the
reserved member and, because the next member's local header absorbs the
difference in its padding field, nothing moves unless the shorter member lets
the next data start one 64-byte slot earlier (then that member's data is moved
back once: rare, see :meth:`ArchiveWriter.fill`).

The headers, central directory and end records are serialised by the standard
library's :mod:`zipfile` (``ZipInfo.FileHeader`` and ``ZipFile.close``), so the
bytes are exactly those the earlier copy-through-``zipfile`` writer produced
(the frozen conformance cases pin them).

>>> import io
>>> stream = io.BytesIO()
>>> writer = ArchiveWriter(stream)
>>> slot = writer.reserve("t/tree.msgpack", 8)
>>> with writer.stream("t/data.bin", 3) as member:
...     _ = member.write(b"abc")
>>> writer.fill(slot, b"tree")
>>> writer.add_bytes("manifest.json", b"{}")
192
>>> writer.close()
>>> import zipfile
>>> [(i.filename, i.file_size) for i in zipfile.ZipFile(stream).infolist()]
[('t/tree.msgpack', 4), ('t/data.bin', 3), ('manifest.json', 2)]
"""

from __future__ import annotations

import os
import struct
import zipfile
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, BinaryIO, Final

from ..format.limits import ALIGNMENT
from .writeback import WRITEBACK_BYTES

try:  # ISA-L's CRC-32 runs at memory speed (~25 GiB/s); zlib's at ~3, slower than the disk.
    from isal.isal_zlib import crc32 as _crc32
except ImportError:  # pragma: no cover - isal is a dependency; zlib keeps a broken install working
    from zlib import crc32 as _crc32

PADDING_HEADER_ID: Final = 0xD935
#: zipfile's own rule for when a member needs ZIP64 records.
_ZIP64_LIMIT: Final = (1 << 31) - 1
_FIXED_TIME: Final = (1980, 1, 1, 0, 0, 0)
_LOCAL_HEADER_BYTES: Final = 30
_ZIP64_EXTRA_BYTES: Final = 20
#: Largest single write/CRC step (bounds the bytes a call holds; big enough to amortise calls).
_CHUNK: Final = 16 << 20
#: Members at least this big have their CRC computed in the helper thread (below, the hand-off
#: costs more than the overlap gains).
_THREADED_CRC_BYTES: Final = 1 << 20


def zip_crc32(data: Any, value: int = 0) -> int:
    """The ZIP CRC-32 (ISO-HDLC) of a buffer, continuing from ``value``.

    >>> hex(zip_crc32(b"123456789"))
    '0xcbf43926'
    """
    return int(_crc32(data, value))


class _Member:
    """A member being placed: its ZipInfo, whether it needs ZIP64 records, where its header and data go."""

    __slots__ = ("info", "zip64", "header", "data", "size", "crc")

    def __init__(self, name: str, size: int, header: int) -> None:
        info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
        info.compress_type = zipfile.ZIP_STORED
        info.file_size = info.compress_size = size
        info.external_attr = 0o644 << 16
        self.info = info
        self.zip64 = size * 1.05 > _ZIP64_LIMIT
        self.size = size
        self.crc = 0
        self.header = header
        self.data = self._data_offset(header)

    def _data_offset(self, header: int) -> int:
        """Where the data starts for a header at ``header``: the next multiple of 64 that leaves room for
        a whole padding record (4 bytes), as the padding rule of the earlier writer chose it."""
        base = header + _LOCAL_HEADER_BYTES + len(self.info.filename.encode("utf-8"))
        base += _ZIP64_EXTRA_BYTES if self.zip64 else 0
        pad = -base % ALIGNMENT
        if pad and pad < 4:
            pad += ALIGNMENT
        return base + pad

    def header_bytes(self) -> bytes:
        """The local header for the current ``header``/``data`` offsets (padding fills the gap)."""
        base = self.header + _LOCAL_HEADER_BYTES + len(self.info.filename.encode("utf-8"))
        base += _ZIP64_EXTRA_BYTES if self.zip64 else 0
        pad = self.data - base
        assert pad == 0 or 4 <= pad < 65536, pad
        self.info.extra = struct.pack("<HH", PADDING_HEADER_ID, pad - 4) + bytes(pad - 4) if pad else b""
        self.info.CRC = self.crc
        self.info.header_offset = self.header
        header: bytes = self.info.FileHeader(self.zip64)
        return header


class _Reserved:
    """Room for a member whose bytes are known later (:meth:`ArchiveWriter.fill`)."""

    __slots__ = ("name", "size", "header")

    def __init__(self, name: str, size: int, header: int) -> None:
        self.name, self.size, self.header = name, size, header


class MemberStream:
    """Streams one member's data to its final offset, computing the ZIP CRC-32 as it goes.

    For members of 1 MiB or more the CRC runs in the archive's helper thread, in write order,
    while this thread writes (ISA-L releases the GIL): a buffer passed to :meth:`write` must not
    change until :meth:`close`.
    """

    def __init__(self, writer: ArchiveWriter, member: _Member) -> None:
        self._writer = writer
        self._member = member
        self._position = member.data
        self._threaded = member.size >= _THREADED_CRC_BYTES
        self._last: Future[None] | None = None

    def _update(self, piece: memoryview) -> None:
        self._member.crc = zip_crc32(piece, self._member.crc)

    def write(self, buffer: Any) -> int:
        """Write the whole buffer (any object with the buffer protocol); return its length."""
        view = memoryview(buffer).cast("B")
        end = self._position + len(view)
        if end > self._member.data + self._member.size:
            raise OSError(f"{self._member.info.filename}: more than the declared {self._member.size} bytes")
        for start in range(0, len(view), _CHUNK):
            piece = view[start : start + _CHUNK]
            if self._threaded:
                # One worker runs the updates in submission order, so the running CRC chains correctly.
                self._last = self._writer._helper().submit(self._update, piece)
            else:
                self._update(piece)
            self._writer._write_at(piece, self._position)
            self._position += len(piece)
        return len(view)

    def close(self) -> None:
        if self._last is not None:
            self._last.result()
            self._last = None
        written = self._position - self._member.data
        if written != self._member.size:
            raise OSError(f"{self._member.info.filename}: {written} bytes written, {self._member.size} declared")
        self._writer._finish(self._member)

    def __enter__(self) -> MemberStream:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.close()
        elif self._last is not None:
            self._last.exception()  # let the helper finish with the buffers before they go away


class ArchiveWriter:
    """Write members one after another, each one's data aligned to 64 bytes, the central directory last.

    ``stream`` is a seekable binary file open for writing (positioned writes where it has a file
    descriptor, seek + write otherwise).
    """

    def __init__(self, stream: BinaryIO, *, writeback: Callable[[int, int, int], None] | None = None) -> None:
        self._stream = stream
        #: ``start(fd, offset, nbytes)`` (:func:`..tree.writeback.start_writeback`) for a durable save: the
        #: written bytes start going to disk every ``WRITEBACK_BYTES``, so the final fsync waits for the tail.
        self._writeback = writeback
        self._written_back = 0
        try:
            self._fd: int | None = stream.fileno()
        except (AttributeError, OSError):  # io.BytesIO and friends: no descriptor
            self._fd = None
        self._infos: list[zipfile.ZipInfo] = []
        self._position = stream.tell()
        self._reserved: _Reserved | None = None
        self._names: set[str] = set()
        self._pool: ThreadPoolExecutor | None = None
        #: The member streamed after a reservation: its header waits for :meth:`fill`.
        self._after: _Member | None = None

    def _write_at(self, data: bytes | memoryview, offset: int) -> None:
        """A positioned write into the archive (``os.pwrite``, or seek + write without a descriptor)."""
        if self._fd is not None:
            _pwrite_all(self._fd, memoryview(data), offset)
            end = offset + len(data)
            if self._writeback is not None and end - self._written_back >= WRITEBACK_BYTES:
                self._writeback(self._fd, self._written_back, end - self._written_back)
                self._written_back = end
        else:
            self._stream.seek(offset)
            self._stream.write(data)

    def _helper(self) -> ThreadPoolExecutor:
        """The one thread that computes big members' CRC-32 while the caller writes."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, "oc-zip-crc32")
        return self._pool

    def shutdown(self) -> None:
        """Stop the helper thread (:meth:`close` does; call it when a save is abandoned)."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def __contains__(self, name: object) -> bool:
        """Whether a member of that name was added (or reserved)."""
        return name in self._names

    # -- members ---------------------------------------------------------------------------
    def _claim(self, name: str) -> None:
        if name in self._names:
            raise ValueError(f"{name}: already a member")  # the spec forbids duplicate names (R-ZIP-11)
        self._names.add(name)

    def _place(self, name: str, size: int) -> _Member:
        self._claim(name)
        if self._after is not None:
            raise ValueError("only one member may follow a reserved member before fill()")
        if self._reserved is not None:
            # Placed as if the reserved member were full size; fill() settles it.
            self._after = _Member(name, size, self._position)
            return self._after
        return _Member(name, size, self._position)

    def stream(self, name: str, size: int) -> MemberStream:
        """A member of exactly ``size`` bytes written through the returned stream (a context manager)."""
        return MemberStream(self, self._place(name, size))

    def add_bytes(self, name: str, data: bytes | memoryview) -> int:
        """Add a member from memory; return its data offset."""
        with self.stream(name, len(data)) as member:
            member.write(data)
        return member._member.data

    def add(self, name: str, source: BinaryIO, size: int) -> int:
        """Copy ``size`` bytes from ``source`` as member ``name``; return the data offset."""
        with self.stream(name, size) as member:
            remaining = size
            while remaining:
                chunk = source.read(min(remaining, _CHUNK))
                if not chunk:
                    raise OSError(f"{name}: source ended {remaining} bytes early")
                member.write(chunk)
                remaining -= len(chunk)
        return member._member.data

    def reserve(self, name: str, size: int) -> _Reserved:
        """Keep room for member ``name`` of at most ``size`` bytes, written later by :meth:`fill`."""
        if self._reserved is not None:
            raise ValueError("one reservation at a time")
        self._claim(name)
        slot = _Reserved(name, size, self._position)
        self._reserved = slot
        probe = _Member(name, size, self._position)
        self._position = probe.data + size
        return slot

    def fill(self, slot: _Reserved, data: bytes) -> None:
        """Write the reserved member's bytes (at most the reserved size) and settle the member after it.

        The member after it keeps its data offset when its padding can absorb the shorter reserved
        member; when the shorter member lets that data start a slot earlier (the padding rule wants the
        nearest multiple of 64), its bytes are moved back once — the bytes must match what a writer
        that knew the size in advance would write.
        """
        if slot is not self._reserved:
            raise ValueError("not the pending reservation")
        if len(data) > slot.size:
            raise ValueError(f"{slot.name}: {len(data)} bytes, {slot.size} reserved")
        self._reserved = None
        member = _Member(slot.name, len(data), slot.header)
        member.crc = zip_crc32(data)
        self._write_at(data, member.data)
        self._write_at(member.header_bytes(), member.header)
        self._record(member)
        self._position = member.data + member.size
        after, self._after = self._after, None
        if after is None:
            return
        wanted = after._data_offset(self._position)
        if wanted != after.data:
            self._move(after.data, wanted, after.size)
            after.data = wanted
        after.header = self._position
        self._finish(after)

    def _move(self, source: int, destination: int, size: int) -> None:
        """Move ``size`` bytes to a lower offset, ascending in chunks (no chunk overwrites unread bytes)."""
        assert destination < source
        for start in range(0, size, _CHUNK):
            length = min(_CHUNK, size - start)
            if self._fd is not None:
                chunk = os.pread(self._fd, length, source + start)
            else:
                self._stream.seek(source + start)
                chunk = self._stream.read(length)
            self._write_at(chunk, destination + start)

    def _finish(self, member: _Member) -> None:
        """A member's data is complete: write its header (unless it waits for a reservation)."""
        if member is self._after:
            self._position = member.data + member.size
            return
        self._write_at(member.header_bytes(), member.header)
        self._record(member)
        self._position = member.data + member.size

    def _record(self, member: _Member) -> None:
        self._infos.append(member.info)

    def close(self) -> None:
        """Write the central directory and end records after the last member's data."""
        if self._reserved is not None:
            raise ValueError(f"{self._reserved.name}: reserved but never filled")
        self.shutdown()
        # The central directory and end records are zipfile's: close() serialises every ZipInfo of
        # filelist at start_dir. A ZipFile made only now holds no open state if a save fails earlier.
        # (start_dir is a private field of zipfile.ZipFile, unchanged since Python 3.0; mode "w"
        # writes nothing before close().)
        self._stream.seek(self._position)
        archive = zipfile.ZipFile(self._stream, "w", compression=zipfile.ZIP_STORED, allowZip64=True)
        for info in self._infos:
            archive.filelist.append(info)
            archive.NameToInfo[info.filename] = info
        archive.start_dir = self._position
        archive.close()


def _pwrite_all(fd: int, view: memoryview, offset: int) -> None:
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


__all__ = ["PADDING_HEADER_ID", "ArchiveWriter", "MemberStream", "zip_crc32"]
