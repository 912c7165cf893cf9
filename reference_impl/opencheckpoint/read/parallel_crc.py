"""CRC-32C of many buffers at once: pieces shared by the calling thread and a small pool of helpers.

Verify-first restores (and ``validate``) checksum every array before any of
it is used, which is a full pass over the bytes on its own. The ``crc32c``
package releases the GIL for big buffers, so that pass runs on several cores:
buffers are cut into pieces of about :data:`PIECE_BYTES` (small buffers are
grouped, a big one is split and its pieces' CRCs are combined with
:func:`~opencheckpoint.format.crc_combine.crc32c_combine`), and the pieces are
handed out one at a time from a shared counter.

The caller works through the pieces itself; helpers only take pieces the
caller has not reached yet, and the caller never waits for one: a piece a
helper has not finished when nothing is left to take is computed by the
caller too. So when other processes keep every core busy and a helper
barely gets the CPU, the caller does (nearly) all the work: never much
slower than a single-threaded pass (decision 0011). The pool is created on first use,
forgotten in a forked child (whose copy has no threads), and not used once
the interpreter is shutting down (the caller then does everything itself).

>>> import numpy as np
>>> from opencheckpoint.format.integrity import crc32c_of
>>> data = np.arange(3 << 20, dtype=np.uint8)
>>> crc32c_many([data, data[:5]], piece_bytes=1 << 20) == [crc32c_of(data), crc32c_of(data[:5])]
True
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Final

import numpy as np

from ..format.crc_combine import crc32c_combine
from ..format.integrity import crc32c_of

#: The one checksum call (the ``crc32c`` package: any buffer, no copy, the GIL released for big ones).
_crc32c = crc32c_of

#: Bytes per piece: big enough that the per-piece Python work (taken under the GIL) is noise, small
#: enough that redoing a helper's unfinished piece costs little (about 0.2 ms at memory speed).
PIECE_BYTES = 2 << 20
#: Below this many bytes in all, one thread does the pass (starting helpers would cost more).
PARALLEL_MIN_BYTES = 8 << 20
#: The most helper threads (the caller is one more worker): checksumming is bound by memory bandwidth,
#: which a few cores saturate.
MAX_HELPERS: Final = 3

#: (buffer index, start, stop): one slice of one buffer.
_Slice = tuple[int, int, int]


def crc32c_many(buffers: Sequence[np.ndarray], *, piece_bytes: int | None = None) -> list[int]:
    """The CRC-32C of each buffer (1-d ``uint8`` arrays), computed by the caller and the pool's helpers.

    ``piece_bytes`` defaults to :data:`PIECE_BYTES` (read at call time, as is :data:`PARALLEL_MIN_BYTES`).
    """
    piece_bytes = piece_bytes or PIECE_BYTES
    total = sum(len(b) for b in buffers)
    helpers = _helper_count()
    if total < max(PARALLEL_MIN_BYTES, 2 * piece_bytes) or helpers == 0:
        return [_crc32c(b) for b in buffers]
    pieces = _pieces([len(b) for b in buffers], piece_bytes)
    crcs = _Pass(buffers, pieces).run(helpers)
    out = [0] * len(buffers)
    started = [False] * len(buffers)
    for piece, piece_crcs in zip(pieces, crcs, strict=True):
        for (index, start, stop), crc in zip(piece, piece_crcs, strict=True):
            # pieces come in buffer order, so each buffer's slices are combined left to right
            out[index] = crc32c_combine(out[index], crc, stop - start) if started[index] else crc
            started[index] = True
    return out


def _pieces(lengths: Sequence[int], piece_bytes: int) -> list[list[_Slice]]:
    """Cut the buffers into pieces of about ``piece_bytes``: small buffers grouped, big ones split
    (an empty buffer has no slice: its CRC-32C is 0)."""
    pieces: list[list[_Slice]] = []
    current: list[_Slice] = []
    size = 0
    for index, length in enumerate(lengths):
        for start in range(0, length, piece_bytes):
            stop = min(length, start + piece_bytes)
            current.append((index, start, stop))
            size += stop - start
            if size >= piece_bytes:
                pieces.append(current)
                current, size = [], 0
    if current:
        pieces.append(current)
    return pieces


class _Pass:
    """One call's pieces, handed out one at a time to whichever thread asks next.

    The caller never waits for a helper: once no piece is left to take, it computes
    itself every piece a helper took and has not finished (a helper descheduled by
    other processes would otherwise hold it up). Both results are the same, so the
    first one stored counts; a helper's error is dropped, the caller meets it again.
    """

    def __init__(self, buffers: Sequence[np.ndarray], pieces: list[list[_Slice]]) -> None:
        self.buffers = buffers
        self.pieces = pieces
        self.crcs: list[list[int]] = [[] for _ in pieces]
        self.done = [False] * len(pieces)
        self.next = 0  # the next piece nobody has taken
        self.lock = threading.Lock()

    def run(self, helpers: int) -> list[list[int]]:
        pool = _pool(helpers)
        try:
            for _ in range(helpers):
                pool.submit(self.work)
        except RuntimeError:  # the interpreter is shutting down: no new threads; the caller does it all
            pass
        while (number := self.take()) is not None:
            self.finish(number, self.compute(number))
        for number, done in enumerate(self.done):  # pieces still in a helper's hands: not waited for
            if not done:
                self.finish(number, self.compute(number))
        return self.crcs

    def work(self) -> None:
        """A helper: take pieces until none is left."""
        while (number := self.take()) is not None:
            try:
                crcs = self.compute(number)
            except Exception:  # the caller computes this piece again and raises
                return
            self.finish(number, crcs)

    def take(self) -> int | None:
        with self.lock:
            if self.next >= len(self.pieces):
                return None
            self.next += 1
            return self.next - 1

    def compute(self, number: int) -> list[int]:
        return [_crc32c(self.buffers[i][start:stop]) for i, start, stop in self.pieces[number]]

    def finish(self, number: int, crcs: list[int]) -> None:
        with self.lock:
            if not self.done[number]:
                self.crcs[number] = crcs
                self.done[number] = True


def _helper_count() -> int:
    """Helpers beside the caller: one fewer than the CPUs this process may run on, at most :data:`MAX_HELPERS`."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cpus = os.cpu_count() or 1
    return max(0, min(MAX_HELPERS, cpus - 1))


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool(helpers: int) -> ThreadPoolExecutor:
    """The process's helper pool, created on first use."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=helpers, thread_name_prefix="opencheckpoint-crc")
        return _POOL


def _forget_pool() -> None:
    """In a forked child: the parent's pool object has no threads there; the next call makes a new one."""
    global _POOL, _POOL_LOCK
    _POOL = None
    _POOL_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)
