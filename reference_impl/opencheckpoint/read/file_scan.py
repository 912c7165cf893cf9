"""Step 16 of ``validate`` for one file, in one streamed pass over its bytes.

A file is read once, chunk by chunk (:meth:`Source.read_chunks
<opencheckpoint.container.base.Source.read_chunks>`: slices of the memory map for
local forms, ranged GETs of at most 16 MiB for a remote checkpoint), and every
check of its bytes is done on the way: the CRC-32C and bool bytes of each array
extent in it (R-ARR-14, R-ARR-13), the zero padding between them (R-ARR-12),
and the whole file's CRC-32C, SHA-256 and ZIP CRC-32 (R-CHK-7, R-CHK-8,
R-ZIP-22). Memory is one chunk, whatever the file's size. The errors are
reported afterwards, in the order the spec's validation order gives them
(arrays in document order, then the padding), by :mod:`opencheckpoint.read.validate`.

>>> import crc32c
>>> from .tree.nodes import ArrayRef
>>> ref = ArrayRef("uint8", (2,), 0, 2, crc32c.crc32c(b"ab"), "$.a")
>>> scan = FileScan([ref], 4, FileHashes(sha256=False, zip_crc32=False))
>>> scan.feed(memoryview(b"ab\\x00\\x01"), 0)
>>> scan.array_errors([ref], "data.bin"), str(scan.padding_error("data.bin"))
([None], 'ArrayLayoutError: data.bin: $: bytes after the last extent [2, 4) are not zero [R-ARR-12]')
"""

from __future__ import annotations

import bisect
import zlib
from collections.abc import Sequence

import numpy as np

from ..format.errors import CheckpointError
from ..format.integrity import crc32c_of, new_sha256
from ..tree.layout import padding_error, padding_gaps
from ..tree.nodes import ArrayRef
from .array_runs import bool_error as _bool_error
from .array_runs import check_crc as _check_crc
from .arrays import array_view, verify_view


class FileHashes:
    """The checksums of one whole file, updated chunk by chunk: CRC-32C always, SHA-256 and ZIP CRC-32 if asked."""

    __slots__ = ("crc32c", "sha256", "zip_crc32", "nbytes")

    def __init__(self, *, sha256: bool, zip_crc32: bool) -> None:
        self.crc32c = 0
        self.sha256 = new_sha256() if sha256 else None
        self.zip_crc32: int | None = 0 if zip_crc32 else None
        self.nbytes = 0

    def update(self, chunk: memoryview) -> None:
        self.crc32c = crc32c_of(chunk, self.crc32c)
        if self.sha256 is not None:
            self.sha256.update(chunk)
        if self.zip_crc32 is not None:
            self.zip_crc32 = zlib.crc32(chunk, self.zip_crc32)
        self.nbytes += len(chunk)


class FileScan:
    """What one pass over a data file of ``size`` bytes finds: each array extent's CRC-32C and whether it
    holds a byte other than 00/01 (for bool arrays), the first non-zero padding gap, the file's checksums.

    Identical extents (aliases, R-ARR-10) are read once. Chunks must be fed in file order, each one
    starting where the previous one ended.
    """

    def __init__(self, arrays: Sequence[ArrayRef], size: int, hashes: FileHashes) -> None:
        self.size = size
        self.hashes = hashes
        bools = {(r.offset, r.nbytes) for r in arrays if r.dtype == "bool"}
        #: Unique non-empty extents by offset: (offset, end, wants the bool check).
        self._extents = sorted({(r.offset, r.offset + r.nbytes, (r.offset, r.nbytes) in bools)
                                for r in arrays if r.nbytes})
        self._starts = [extent[0] for extent in self._extents]
        self._index = {(offset, stop): index for index, (offset, stop, _) in enumerate(self._extents)}
        self._crc = [0] * len(self._extents)
        self._bad_bool = [False] * len(self._extents)
        self._gaps = padding_gaps(arrays, size)
        self._gap_starts = [gap[0] for gap in self._gaps]
        self._bad_gap: int | None = None  # index of the first gap found to hold a non-zero byte

    def feed(self, chunk: memoryview, start: int) -> None:
        """Check the bytes ``[start, start + len(chunk))`` of the file."""
        self.hashes.update(chunk)
        end = start + len(chunk)
        # Extents are disjoint or identical (step 15 passed), so those that overlap the chunk are
        # the one that began before it (if it reaches in) and those that begin inside it.
        first = max(0, bisect.bisect_right(self._starts, start) - 1)
        for index in range(first, bisect.bisect_left(self._starts, end)):
            offset, stop, is_bool = self._extents[index]
            lo, hi = max(offset, start), min(stop, end)
            if lo >= hi:
                continue
            piece = chunk[lo - start : hi - start]
            self._crc[index] = crc32c_of(piece, self._crc[index])
            if is_bool and not self._bad_bool[index]:
                self._bad_bool[index] = bool(np.frombuffer(piece, dtype=np.uint8).max() > 1)
        first = max(0, bisect.bisect_right(self._gap_starts, start) - 1)
        for index in range(first, bisect.bisect_left(self._gap_starts, end)):
            if self._bad_gap is not None and self._bad_gap <= index:
                break
            gap_start, gap_end = self._gaps[index]
            lo, hi = max(gap_start, start), min(gap_end, end)
            if lo < hi and np.frombuffer(chunk[lo - start : hi - start], dtype=np.uint8).any():
                self._bad_gap = index

    def array_errors(self, arrays: Sequence[ArrayRef], file: str) -> list[CheckpointError | None]:
        """Per array node, in document order: its first error (R-ARR-14, then R-ARR-13) or None.

        An alias of an extent already listed gives no entry (same bytes, same checksum), as a
        bool alias does (its bytes are checked as bool); an empty array is checked as on any read
        (its shape must fit NumPy).
        """
        out: list[CheckpointError | None] = []
        seen: set[tuple[int, int]] = set()
        for ref in arrays:
            if (ref.offset, ref.nbytes) in seen and ref.dtype != "bool":
                continue
            seen.add((ref.offset, ref.nbytes))
            try:
                if not ref.nbytes:
                    verify_view(array_view(memoryview(b""), ref), ref, file)
                else:
                    index = self._index[ref.offset, ref.offset + ref.nbytes]
                    _check_crc(self._crc[index], ref, file)
                    if ref.dtype == "bool" and self._bad_bool[index]:
                        raise _bool_error(ref, file)
                out.append(None)
            except CheckpointError as exc:
                out.append(exc)
        return out

    def padding_error(self, file: str) -> CheckpointError | None:
        """R-ARR-12: the first gap between (or after) the extents that holds a non-zero byte, or None."""
        if self._bad_gap is None:
            return None
        start, end = self._gaps[self._bad_gap]
        return padding_error(start, end, self.size).at(file=file)
