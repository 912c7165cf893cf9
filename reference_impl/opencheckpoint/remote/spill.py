"""Byte ranges of a remote file kept after their first fetch, in an unlinked local temporary file.

A verify-first restore reads the bytes of its targets twice: phase 1 checks
them, phase 2 copies them into the live arrays (spec R-CHK-11 keeps both
checks). Locally the second read comes from the page cache; from an object
store it would be a second download. :class:`Spill` keeps what phase 1 fetched
on local disk (never in memory: a model's worth of bytes would double the
process's size), so every range is fetched once per open checkpoint, and is
gone when the checkpoint is closed (or the process ends: the file has no name).

>>> spill = Spill()
>>> spill.write(4, b"abcd"); spill.covers(5, 8), spill.covers(3, 6)
(True, False)
>>> out = bytearray(3); spill.readinto(memoryview(out), 5); bytes(out)
b'bcd'
>>> spill.close()
"""

from __future__ import annotations

import bisect
import os
import tempfile

from ..container.base import size_mismatch


class Spill:
    """The ranges ``[start, end)`` of one file fetched so far, and their bytes at the same offsets on disk."""

    __slots__ = ("_file", "_starts", "_ends", "rel")

    def __init__(self, rel: str = "") -> None:
        self.rel = rel
        # Held open until close(): the file lives as long as the open checkpoint, not one block.
        self._file = tempfile.TemporaryFile(prefix="opencheckpoint-fetched-")  # noqa: SIM115
        #: disjoint, sorted, merged ranges held
        self._starts: list[int] = []
        self._ends: list[int] = []

    def covers(self, start: int, end: int) -> bool:
        """Whether every byte of ``[start, end)`` is held."""
        index = bisect.bisect_right(self._starts, start) - 1
        return index >= 0 and self._ends[index] >= end

    def write(self, start: int, data: bytes) -> None:
        """Hold ``data`` as the bytes at ``start``."""
        end = start + len(data)
        view = memoryview(data)
        written = 0
        while written < len(view):
            written += os.pwrite(self._file.fileno(), view[written:], start + written)
        # Merge the new range with every held range it touches.
        lo = bisect.bisect_left(self._ends, start)
        hi = bisect.bisect_right(self._starts, end)
        if lo < hi:
            start, end = min(start, self._starts[lo]), max(end, self._ends[hi - 1])
        self._starts[lo:hi] = [start]
        self._ends[lo:hi] = [end]

    def readinto(self, view: memoryview, start: int) -> None:
        """Fill ``view`` with the held bytes at ``start`` (:meth:`covers` said they are held)."""
        done = 0
        while done < len(view):
            count = os.preadv(self._file.fileno(), [view[done:]], start + done)
            if count == 0:  # cannot happen for a held range; never hand back unfilled memory
                raise size_mismatch(self.rel, start + done, start + len(view))
            done += count

    def close(self) -> None:
        self._file.close()
