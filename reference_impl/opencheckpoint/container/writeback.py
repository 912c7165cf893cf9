"""A data file whose bytes start going to disk while the rest is still being written.

A durable save ends each data file with an ``fsync``, which waits until every
dirty page of the file is on disk. Written first and flushed last, a 64 MiB
shard file kept a rank waiting in that ``fsync`` for the whole file's
writeback (a profile of a 2-rank save: 20 to 40 ms of a 100 ms write). Linux's
``sync_file_range(SYNC_FILE_RANGE_WRITE)`` starts the writeback of a range
without waiting for it, so each chunk goes to disk while the next one is copied
and checksummed, and the final ``fsync`` (still the one durability guarantee)
waits for the tail only. Elsewhere (no such call), the file is written as it is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable
from typing import Any, Final, Protocol

__all__ = ["WritebackFile", "start_writeback"]

#: Writeback is started once this many bytes have been written since the last start.
WRITEBACK_BYTES: Final = 8 << 20
#: sync_file_range's flag: start writing the dirty pages of the range, do not wait (linux/fs.h).
_SYNC_FILE_RANGE_WRITE: Final = 2


class _RawFile(Protocol):
    def write(self, buffer: Any, /) -> int | None: ...

    def fileno(self) -> int: ...


@functools.cache
def start_writeback() -> Callable[[int, int, int], None] | None:
    """``start(fd, offset, nbytes)``: the C library's ``sync_file_range`` as a hint, or None where it has none."""
    name = ctypes.util.find_library("c")
    function = getattr(ctypes.CDLL(name), "sync_file_range", None) if name else None
    if function is None:
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    function.restype = ctypes.c_int

    def start(fd: int, offset: int, nbytes: int) -> None:
        function(fd, offset, nbytes, _SYNC_FILE_RANGE_WRITE)  # a hint: an error only means no early start

    return start


class WritebackFile:
    """Wraps a raw file opened for writing at offset 0: every ``WRITEBACK_BYTES`` written, their writeback starts."""

    def __init__(self, out: _RawFile, start: Callable[[int, int, int], None]) -> None:
        self._out = out
        self._fd = out.fileno()
        self._start = start
        self._position = 0
        self._started = 0  # bytes before this offset have had their writeback started

    def write(self, buffer: Any, /) -> int | None:
        written = self._out.write(buffer)
        if written:
            self._position += written
            if self._position - self._started >= WRITEBACK_BYTES:
                self._start(self._fd, self._started, self._position - self._started)
                self._started = self._position
        return written
