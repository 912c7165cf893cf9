"""Byte ranges of remote objects fetched in bounded pieces, several at a time, handed over in order.

Every remote read of the library goes through here: a range ``[start, end)`` of
an object is cut into pieces of at most :data:`RANGE_BYTES` (one ranged GET
each on S3), and :func:`in_order` fetches them on a small shared thread pool,
at most :data:`IN_FLIGHT` pieces ahead of the one the caller is using, and
yields them in file order. The caller verifies each piece as it arrives while
the next ones are on the network; its memory is the pieces in flight, whatever
the range's size. The fetch function is the caller's (one ranged read of an
fsspec filesystem, its errors translated), so this module knows nothing of
checkpoints and a writer may use it as well (a collective save reading a
shard back, a copy between stores).

>>> list(pieces(0, 10, limit=4))
[(0, 4), (4, 8), (8, 10)]
>>> fetch = lambda start, end: bytes(range(start, end))
>>> [bytes(piece) for piece in in_order(fetch, pieces(2, 9, limit=3))]
[b'\\x02\\x03\\x04', b'\\x05\\x06\\x07', b'\\x08']
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

#: The most bytes one request asks for: a piece's memory, and the unit of a retry on a flaky network.
RANGE_BYTES = 16 << 20
#: Pieces fetched ahead of the one being used: the concurrency of one stream of reads (and its memory:
#: ``(IN_FLIGHT + 1) * RANGE_BYTES``).
IN_FLIGHT = 4
#: Threads of the pool every stream shares (requests of several streams at once: a lazy read on each of
#: several threads, or a load's phases).
POOL_THREADS = 8

Fetch = Callable[[int, int], bytes]

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def pool() -> ThreadPoolExecutor:
    """The process's pool of fetching threads, made on first use (a process that never reads remotely has none)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=POOL_THREADS, thread_name_prefix="opencheckpoint-fetch")
        return _pool


def _forget_pool_in_child() -> None:
    """A forked child has none of the parent's fetching threads: work handed to their pool would never run."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_in_child)


def pieces(start: int, end: int, *, limit: int | None = None) -> Iterator[tuple[int, int]]:
    """``[start, end)`` cut into consecutive ranges of at most ``limit`` (default :data:`RANGE_BYTES`) bytes."""
    step = limit or RANGE_BYTES
    for first in range(start, end, step):
        yield first, min(end, first + step)


def in_order(fetch: Fetch, ranges: Iterable[tuple[int, int]], *, ahead: int | None = None) -> Iterator[bytes]:
    """The bytes of each range, in the order given, fetched up to ``ahead`` (default :data:`IN_FLIGHT`) ranges
    ahead of the one yielded. A failed fetch raises its error when its turn comes; pieces not yet used when the
    caller stops (or fails) are cancelled, or dropped once they arrive."""
    depth = max(1, IN_FLIGHT if ahead is None else ahead)
    waiting = iter(ranges)
    flying: deque[Future[bytes]] = deque()
    try:
        while True:
            while len(flying) <= depth:
                nxt = next(waiting, None)
                if nxt is None:
                    break
                flying.append(pool().submit(fetch, *nxt))
            if not flying:
                return
            yield flying.popleft().result()
    finally:
        for future in flying:
            future.cancel()


def fetch_into(fetch: Fetch, view: memoryview, start: int, *, ahead: int | None = None) -> None:
    """Fill ``view`` with the bytes at ``start``: bounded pieces fetched concurrently, each copied as it arrives."""
    if len(view) <= RANGE_BYTES:  # one piece: fetched on the caller's thread, no hand-over
        view[:] = fetch(start, start + len(view))
        return
    position = 0
    for data in in_order(fetch, pieces(start, start + len(view)), ahead=ahead):
        view[position : position + len(data)] = data
        position += len(data)
