"""One data file being written: its distinct 64-byte aligned extents, streamed with their CRC-32C.

``data.bin`` of a tree and each per-rank shard file ``shards/rank-NNNNN.bin`` are
written by the same code: the planner asks :meth:`DataFilePlan.extent_for` for the
extent of an array (arrays sharing memory share one extent) and appends the
msgpack node that refers to it to ``extent.nodes``; :meth:`DataFilePlan.stream`
writes every extent once, in order, and stores each extent's CRC-32C at index 5
of each of its nodes (a tag-6 array node and a shard record both keep their
``crc32c`` there).

Array bytes go straight from the source buffer to the file (no serialization
buffer). Big arrays are checksummed in a second thread while the main thread
writes them (``crc32c`` releases the GIL); the file's own CRC-32C is derived from
the array CRCs with :func:`crc32c_combine`, so no byte is hashed twice.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import accumulate, chain
from operator import add, attrgetter, sub
from pathlib import Path
from typing import Any, Final, Protocol

import numpy as np

from ..container.writeback import WritebackFile, start_writeback
from ..format.crc_combine import _multmodp, _x8nmodp
from ..format.integrity import crc32c as _crc32c
from ..format.integrity import file_entry, new_sha256
from ..format.limits import ALIGNMENT
from ..progress import advance
from . import ctree
from .ctree import gather_run as compiled_gather_run
from .ctree import plan_dict as compiled_plan_dict
from .ctree import plan_run as compiled_plan_run
from .file_array import FileArray
from .plan_runs import name_of

__all__ = ["DataFilePlan", "Writable"]



def _crc_in(pool: ThreadPoolExecutor, buffer: Any) -> Future[int] | None:
    """The checksum of ``buffer`` computed in ``pool`` while the caller writes it; None when the pool refuses
    work: at interpreter exit concurrent.futures stops accepting it, and a save still in flight then (an
    async save finishing at exit) checksums inline instead of failing."""
    try:
        return pool.submit(_crc32c, buffer)
    except RuntimeError:
        return None

class Writable(Protocol):
    """Where :meth:`DataFilePlan.stream` writes: a raw file or an archive member stream."""

    def write(self, buffer: Any, /) -> int | None: ...


#: Arrays at least this big are checksummed in the helper thread while being written
#: (below, the hand-off costs more than the overlap gains).
_THREADED_CRC_BYTES: Final = 512 << 10
#: Small arrays are gathered into one buffer to save system calls.
_COALESCE_BYTES: Final = 64 << 10
#: The gathered buffer is written (and folded into the file CRC) once it holds this much.
_PENDING_BYTES: Final = 1 << 20
_WRITE_CHUNK: Final = 16 << 20
_ZEROS: Final = bytes(ALIGNMENT)



def _address(array: np.ndarray, nbytes: int) -> tuple[int, int]:
    """The alias key of an array: its data address and length."""
    return array.__array_interface__["data"][0], nbytes


@functools.lru_cache(maxsize=256)
def _x8n(nbytes: int) -> int:
    """x^(8 * nbytes) mod P, memoised: models repeat the same tensor sizes."""
    return _x8nmodp(nbytes)


def _combine(crc1: int, crc2: int, len2: int) -> int:
    """:func:`crc32c_combine` with the length-dependent factor memoised."""
    return _multmodp(_x8n(len2), crc1) ^ crc2


class _Planned:
    """One distinct extent of a data file and the nodes that refer to it."""

    __slots__ = ("array", "nodes", "offset", "nbytes")

    def __init__(self, array: np.ndarray | FileArray, offset: int, nbytes: int) -> None:
        self.array = array  # C-contiguous, little-endian; kept alive until written
        self.nodes: list[list[Any]] = []
        self.offset = offset
        self.nbytes = nbytes

    @property
    def buffer(self) -> memoryview:
        """The extent's bytes (no copy; a file array's are read whole: small ones only come here)."""
        array = self.array.read() if isinstance(self.array, FileArray) else self.array
        try:
            return array.data.cast("B")  # .data is memoryview(array), typed as one on Python 3.11
        except (TypeError, ValueError):  # dtypes without a buffer format (ml_dtypes, 0-d arrays)
            return array.reshape(-1).view(np.uint8).data


class DataFilePlan:
    """The extents of one data file, in file order, with offsets aligned to 64 bytes (R-ARR-9)."""

    def __init__(self) -> None:
        self.extents: list[_Planned] = []
        self.size = 0
        self._by_address: dict[tuple[int, int], _Planned] = {}
        # Arrays that own their memory cannot share it with another owner: they are keyed by
        # object until the first view (which may alias one) turns on keying by data address.
        self._by_id: dict[int, _Planned] = {}
        # Runs planned in C (compiled_run) wait here to be keyed by id until a later array is planned: a tree
        # of one run (20,000 tiny arrays) never builds the index.
        self._unindexed: list[list[_Planned]] = []
        self._by_address_mode = False

    def extent_for(self, array: np.ndarray, nbytes: int, owndata: bool | None = None) -> _Planned:
        """The extent holding ``array`` (C-contiguous, ``nbytes > 0``): an earlier one it aliases, or a new one.

        ``owndata``: ``array.flags.owndata`` when the caller has the flags already.
        """
        if self._unindexed:
            self._index()
        if (array.flags.owndata if owndata is None else owndata) and not self._by_address_mode:
            planned = self._by_id.get(id(array))
            if planned is None:
                planned = self._by_id[id(array)] = self._new_extent(array, nbytes)
            return planned
        if not self._by_address_mode:
            self._by_address_mode = True
            for earlier in self._by_id.values():  # arrays only: a file array's extent is never shared
                assert isinstance(earlier.array, np.ndarray)
                self._by_address.setdefault(_address(earlier.array, earlier.nbytes), earlier)
        address = _address(array, nbytes)
        planned = self._by_address.get(address)
        if planned is None:
            planned = self._by_address[address] = self._new_extent(array, nbytes)
        return planned

    def new_extents(self, arrays: list[np.ndarray], sizes: list[int]) -> list[_Planned] | None:
        """New extents, in order, for distinct arrays that own their memory (C-contiguous, ``nbytes > 0``);
        None when one of them may alias an extent (keyed by address already, or planned before): the caller
        then asks :meth:`extent_for` one array at a time. The offsets are those :meth:`extent_for` gives.
        """
        if self._unindexed:
            self._index()
        ids = list(map(id, arrays))
        if self._by_address_mode or len(set(ids)) != len(ids) or not self._by_id.keys().isdisjoint(ids):
            return None
        start = -(-self.size // ALIGNMENT) * ALIGNMENT
        # Each extent starts at the aligned end of the one before it (sizes of arrays in memory: int64 holds them).
        aligned = (np.array(sizes[:-1], dtype=np.int64) + (ALIGNMENT - 1)) // ALIGNMENT * ALIGNMENT
        offsets = list(accumulate([start, *aligned.tolist()]))
        planned = list(map(_Planned, arrays, offsets, sizes))
        self.extents += planned
        self._by_id.update(zip(ids, planned, strict=True))
        self.size = offsets[-1] + sizes[-1]
        return planned

    def compiled_run(self, keys: list[Any], arrays: list[np.ndarray], marker: Any, out: dict[Any, Any]) -> bool:
        """Plan a dict's run of NumPy arrays in one C call (:func:`~.ctree.plan_run`), storing each array's node
        as ``out[keys[i]]``: what :func:`~.plan_runs.plain_run` and :meth:`new_extents` give, the same extents
        and nodes. False, with ``out`` unchanged, when the extension is not used or an array needs another path
        (an alias of an earlier extent included)."""
        if not self._may_run(arrays):
            return False
        start = -(-self.size // ALIGNMENT) * ALIGNMENT
        return self._add_run(compiled_plan_run(keys, arrays, start, marker, _Planned, name_of, out))

    def compiled_dict(self, mapping: dict[Any, Any], marker: Any, out: dict[Any, Any]) -> bool:
        """:meth:`compiled_run` over a whole dict whose keys are all ``str`` and values all ``np.ndarray``
        (:func:`~.ctree.plan_dict`); False, with ``out`` unchanged, for any other dict or when it cannot."""
        if not self._may_run(mapping.values()):
            return False
        start = -(-self.size // ALIGNMENT) * ALIGNMENT
        return self._add_run(compiled_plan_dict(mapping, start, marker, _Planned, name_of, out))

    def _may_run(self, arrays: Iterable[Any]) -> bool:
        """Whether a run of new extents may hold ``arrays``: none of them planned before (it would alias that
        extent) and no view planned before (extents are then keyed by address)."""
        if self._by_address_mode:
            return False
        if self.extents:
            if self._unindexed:
                self._index()
            return self._by_id.keys().isdisjoint(map(id, arrays))
        return True

    def _add_run(self, made: tuple[list[_Planned], int] | None) -> bool:
        if made is None:
            return False
        planned, self.size = made
        self.extents += planned
        self._unindexed.append(planned)
        return True

    def _index(self) -> None:
        """Key the extents of the runs planned in C by their array's id (planning is still going on, so each
        extent still holds the array it was planned for)."""
        for run in self._unindexed:
            self._by_id.update(zip(map(id, map(_ARRAY, run)), run, strict=True))
        self._unindexed.clear()

    @property
    def aligned_size(self) -> int:
        """The sum of every extent's ``nbytes`` rounded up to 64 (a save's progress total, a snapshot's buffer),
        without a step per extent: each extent starts at the aligned end of the one before it, the first at 0,
        so the sum is the aligned end of the last one.

        >>> plan = DataFilePlan()
        >>> _ = plan.extent_for(np.ones(3, np.float32), 12), plan.extent_for(np.ones(20, np.uint8), 20)
        >>> plan.aligned_size == sum(-(-extent.nbytes // 64) * 64 for extent in plan.extents) == 128
        True
        """
        return -(-self.size // ALIGNMENT) * ALIGNMENT

    def source_extent(self, array: FileArray, nbytes: int) -> _Planned:
        """A new extent for an array read from a file while the data file is written (never an alias)."""
        return self._new_extent(array, nbytes)

    def _new_extent(self, array: np.ndarray | FileArray, nbytes: int) -> _Planned:
        offset = -(-self.size // ALIGNMENT) * ALIGNMENT
        planned = _Planned(array, offset, nbytes)
        self.extents.append(planned)
        self.size = offset + nbytes
        return planned

    def nodes(self) -> list[list[Any]]:
        """Every node that refers to an extent (their index 5 receives the extent's CRC-32C)."""
        return [node for extent in self.extents for node in extent.nodes]

    def write(self, path: Path, *, durable: bool, sha256: bool) -> dict[str, Any]:
        """Stream every extent to ``path``; fill in each node's crc32c; return the file entry."""
        with open(path, "wb", buffering=0) as out:
            start = start_writeback() if durable else None
            entry = self.stream(out if start is None else WritebackFile(out, start), sha256=sha256, reuse=True)
            if durable:
                os.fsync(out.fileno())
        return entry

    def stream(self, out: Writable, *, sha256: bool, reuse: bool = False) -> dict[str, Any]:
        """Write every extent to ``out`` in order; fill in each node's crc32c; return the file entry.

        ``reuse``: ``out.write`` is done with a buffer when it returns (a raw file), so the gathered small
        extents go through one buffer for the whole file; else (an archive member, whose ZIP CRC-32 may still
        be reading a buffer in a helper thread) each buffer written is left alone and a new one taken.
        """
        digest = new_sha256() if sha256 else None
        pending = _Pending(reuse)
        position = 0
        with ThreadPoolExecutor(1, "oc-crc32c") as pool:

            def emit(chunk: Any) -> None:
                view = memoryview(chunk)
                for start in range(0, len(view), _WRITE_CHUNK):
                    piece = view[start : start + _WRITE_CHUNK]
                    while piece:
                        written = out.write(piece)
                        assert written is not None
                        piece = piece[written:]
                if digest is not None:
                    digest.update(chunk)
                advance(len(view))

            extents = self.extents
            sizes: np.ndarray | None = None  # the Python path's run bounds, made when it is first needed
            index = 0
            while index < len(extents):
                extent = extents[index]
                if extent.nbytes >= _COALESCE_BYTES:  # written from its own buffer, the pending bytes first
                    index += 1
                    pending.add(_ZEROS[: extent.offset - position])
                    pending.flush(emit)
                    crc = _write_extent(extent, emit, pool)
                    pending.crc = _combine(pending.crc, crc, extent.nbytes)
                    for node in extent.nodes:
                        node[5] = crc
                    position = extent.offset + extent.nbytes
                    continue
                gathered = pending.gather(extents, index, position)  # a run of small extents in one C call
                if gathered is not None and gathered[0] > index:
                    index, position = gathered
                else:
                    # The run in Python (no extension, or an extent it leaves): gathered into the same buffer,
                    # checked in bulk (_gather); its file CRC is folded in before the buffer is written.
                    if sizes is None:
                        sizes = np.fromiter(map(_NBYTES, extents), dtype=np.int64, count=len(extents))
                    stop = _small_run_end(sizes, index)
                    position = _gather(extents[index:stop], position, pending)
                    index = stop
                if pending.fill >= _PENDING_BYTES:
                    pending.flush(emit)
            pending.flush(emit)
        return file_entry(position, pending.crc, digest)


#: Room for a run of small extents once less than _PENDING_BYTES are pending (the C gather never grows it).
_PENDING_ROOM: Final = _PENDING_BYTES + _COALESCE_BYTES + ALIGNMENT


class _Pending:
    """The gathered bytes of small extents (and padding) waiting to be written, and the file's CRC-32C so far.

    ``crc`` covers the file up to the first ``folded`` bytes of ``buffer[:fill]``: the C gather folds what it
    copies in the same pass; bytes added from Python are folded by one crc32c call before they are written.
    """

    __slots__ = ("buffer", "fill", "folded", "crc", "_reuse")

    def __init__(self, reuse: bool) -> None:
        self._reuse = reuse
        self.buffer = bytearray()  # made at the first run: a file of big arrays never needs it
        self.fill = self.folded = self.crc = 0

    def add(self, data: Any) -> None:
        """Append ``data`` (the buffer grows if it must)."""
        end = self.fill + len(data)
        self.buffer[self.fill : end] = data
        self.fill = end

    def gather(self, extents: list[_Planned], index: int, position: int) -> tuple[int, int] | None:
        """The run of small extents from ``extents[index]`` gathered by :func:`~.ctree.gather_run`: the next
        index and the file position after it; None when the extension is not used."""
        if not ctree.AVAILABLE:
            return None
        if len(self.buffer) < _PENDING_ROOM:  # room for a run (zeroed once: the C gather writes, never grows)
            if self.fill:
                self.buffer += bytes(_PENDING_ROOM - len(self.buffer))
            else:
                self.buffer = bytearray(_PENDING_ROOM)
        self._fold()
        done = compiled_gather_run(extents, index, position, _Planned, self.buffer, self.fill, self.crc)
        if done is None:
            return None
        index, position, self.fill, self.crc = done
        self.folded = self.fill
        return index, position

    def _fold(self) -> None:
        if self.folded < self.fill:
            self.crc = _crc32c(memoryview(self.buffer)[self.folded : self.fill], self.crc)
            self.folded = self.fill

    def flush(self, emit: Any) -> None:
        """Write the pending bytes through ``emit`` (their CRC folded in first)."""
        if not self.fill:
            return
        self._fold()
        emit(memoryview(self.buffer)[: self.fill])
        self.fill = self.folded = 0
        if not self._reuse:
            self.buffer = bytearray()


def _write_extent(extent: _Planned, emit: Any, pool: ThreadPoolExecutor) -> int:
    """Write one extent that is not gathered through ``emit``; return its CRC-32C. A big array's checksum is
    computed in ``pool`` while it is written; a file array is streamed through one reused buffer."""
    if type(extent.array) is FileArray:
        crc = 0
        for chunk in extent.array.chunks():
            crc = _crc32c(chunk, crc)
            emit(chunk)
        return crc
    buffer = extent.buffer
    future = _crc_in(pool, buffer) if extent.nbytes >= _THREADED_CRC_BYTES else None
    if future is not None:
        emit(buffer)
        return future.result()
    crc = _crc32c(buffer)
    emit(buffer)
    return crc


_NBYTES = attrgetter("nbytes")
_OFFSET = attrgetter("offset")
_ARRAY = attrgetter("array")
_BUFFER = attrgetter("buffer")


def _small_run_end(sizes: np.ndarray, start: int) -> int:
    """The end of the run of small extents from ``start``: about :data:`_PENDING_BYTES` of them at most
    (the extent that reaches it included)."""
    # A bounded window (at most 1 MiB of 64-byte slots): where a run is cut changes no byte written.
    window = sizes[start : start + _PENDING_BYTES // ALIGNMENT + 1]
    big = np.flatnonzero(window >= _COALESCE_BYTES)
    stop = int(big[0]) if len(big) else len(window)
    reach = int(np.searchsorted(np.cumsum(window[:stop]), _PENDING_BYTES))
    return start + min(stop, reach + 1)


def _gather(run: list[_Planned], position: int, pending: _Pending) -> int:
    """Append a run of small extents (each after its zero padding) to ``pending``; store each extent's
    CRC-32C in its nodes; return the file position after the run.

    One ``map`` of the CRC call and one ``join`` over the run's arrays (any C-contiguous array is a
    buffer of its bytes), instead of a dozen Python steps per array (the path without the extension,
    and runs it leaves: arrays without a plain buffer, such as ml_dtypes').
    """
    arrays: list[Any] = list(map(_ARRAY, run))
    try:
        crcs = list(map(_crc32c, arrays))
    except (TypeError, ValueError, BufferError):  # an array without a plain buffer: through a uint8 view
        arrays = list(map(_BUFFER, run))
        crcs = list(map(_crc32c, arrays))
    offsets = list(map(_OFFSET, run))
    ends = list(map(add, offsets, map(_NBYTES, run)))
    pads = list(map(sub, offsets, [position, *ends[:-1]]))
    if any(pads):  # each array after its zero padding
        pending.add(b"".join(chain.from_iterable(zip(map(_ZEROS.__getitem__, map(slice, pads)), arrays, strict=True))))
    else:
        pending.add(b"".join(arrays))
    for extent, crc in zip(run, crcs, strict=True):
        for node in extent.nodes:
            node[5] = crc
    end: int = ends[-1]
    return end
