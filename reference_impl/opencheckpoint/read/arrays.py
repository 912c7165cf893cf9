"""The array read engine: verified reads of array bytes from a data file (spec step 16, R-ARR-13, R-ARR-14).

Given the array nodes of a decoded, layout-checked tree and the data file's
:class:`~opencheckpoint.container.base.FileRegion` or memory map, this module
delivers NumPy arrays: fresh ones (small arrays batched into one read),
existing targets filled in place (verify first, all or nothing), lazy views.
It knows nothing about frameworks or about opening a checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..container.base import FileRegion
from ..format.dtypes import numpy_dtype
from ..format.errors import CheckpointError, ConcurrentModification, IntegrityError
from ..format.integrity import CHUNK_BYTES
from ..format.integrity import crc32c as _crc32c
from ..rules import restated
from ..tree.decode import empty_array
from ..tree.gc_pause import paused_gc
from ..tree.nodes import ArrayRef
from .array_runs import BATCH_BYTES as _BATCH_BYTES
from .array_runs import SMALL_BYTES as _SMALL_BYTES
from .array_runs import bool_error as _bool_error
from .array_runs import cached_dtype as _numpy_dtype
from .array_runs import check_crc as _check_crc
from .array_runs import read_runs
from .parallel_crc import crc32c_many


def read_verified_into(region: FileRegion, ref: ArrayRef, target: np.ndarray, file: str, *, verify: bool) -> None:
    """Read one array's bytes straight into ``target`` (C-contiguous, writeable, ``ref.nbytes`` bytes).

    One pass: each chunk is read into its place in ``target`` and checksummed
    right after, while it is still in cache (a remote region is read with
    one call instead: it fetches the range in bounded pieces, several at a
    time). Nothing is mapped, so the process's memory grows by ``target`` only. On a checksum error ``target``
    holds the unverified bytes; the error is raised after the last chunk.
    """
    if not ref.nbytes:
        return
    # Bytes of the target through a uint8 view: a buffer of an ml_dtypes array (bfloat16, float8) cannot be cast
    # (its format has no struct code). ndarray.data is memoryview(array), typed as one on Python 3.11.
    flat = target.reshape(-1).view(np.uint8).data
    crc = 0
    if region.ranged:  # remote: one call, fetched in bounded concurrent pieces; checked before it is handed out
        region.readinto(flat, ref.offset)
        if verify:
            _check_crc(_crc32c(flat), ref, file)
            _check_bool(target, ref, file)
        return
    for start in range(0, ref.nbytes, CHUNK_BYTES):
        piece = flat[start : start + CHUNK_BYTES]
        region.readinto(piece, ref.offset + start)
        if verify:
            crc = _crc32c(piece, crc)
    if verify:
        _check_crc(crc, ref, file)
        _check_bool(target, ref, file)


def read_arrays(
    region: FileRegion,
    refs: list[ArrayRef],
    file: str,
    *,
    verify: bool,
    targets: Mapping[int, np.ndarray] | None = None,
    deferred: list[tuple[ArrayRef, np.ndarray]] | None = None,
    columns: bytes | None = None,
) -> dict[int, np.ndarray]:
    """Fresh arrays for the array nodes ``refs``, keyed by ``id(ref)``; identical extents share one array.

    Work and errors follow document order. Runs of small arrays that follow
    each other in the file are read with one ``preadv`` into one buffer and
    each becomes a writeable view of its own bytes in it (a CRC-32C call per
    array, no copy; without targets or aliases the whole run is checked and
    built in bulk, :mod:`opencheckpoint.read.array_runs`); bigger arrays are read chunk by chunk into their own
    memory (:func:`read_verified_into`). Empty arrays get their own array
    per node.

    ``targets`` (``id(ref)`` -> an existing array that fits the node, see
    :func:`fits`) are filled in place instead, all or nothing: with
    ``verify`` (the default everywhere), every array of ``refs`` is verified
    first — the targets' bytes through one small reusable scratch buffer
    (:class:`ScratchVerifier`: nothing mapped, memory does not grow) — and
    only when all pass are the targets' bytes read into them, so a corrupt
    checkpoint raises with every target untouched. That reads the targets'
    bytes twice (the second time usually from the page cache). With
    ``verify=False`` (an explicit opt-out) targets are filled in one pass.

    ``deferred``, if given, receives the (node, target) pairs instead of the
    targets being filled (verified or not): the caller fills them later with
    :func:`fill_targets` (phase 2 of a restore across components). ``columns``: the compiled decoder's
    extents of ``refs`` (:attr:`~opencheckpoint.tree.exact.DecodedTree.columns`), when it gave them.
    """
    if not targets:
        # Fresh arrays only, extents in file order (what writers produce): runs of small arrays in bulk.
        with paused_gc():
            fresh = read_runs(region, refs, file, verify=verify,
                              single=lambda ref: _single(region, ref, file, verify), columns=columns)
        if fresh is not None:
            return fresh
    reads = _ArrayReads(region, file, verify=verify, scratch=bool(verify and targets), deferred=deferred)
    for ref in refs:
        if not ref.nbytes:
            reads.by_id[id(ref)] = _empty(ref, file)
            continue
        target = targets.get(id(ref)) if targets else None
        if target is not None:
            reads.into_target(ref, target)
        else:
            reads.fresh(ref)
    reads.flush()
    # Every array passed its checks: only now is any target written.
    if deferred is None:
        fill_targets(region, reads.deferred, file, verify=verify)
    return reads.by_id


def _single(region: FileRegion, ref: ArrayRef, file: str, verify: bool) -> np.ndarray:
    """A fresh array read alone: an empty one, or one too big for a batch (chunk by chunk)."""
    if not ref.nbytes:
        return _empty(ref, file)
    array = np.empty(ref.shape, dtype=_numpy_dtype(ref.dtype))
    read_verified_into(region, ref, array, file, verify=verify)
    return array


class _ArrayReads:
    """The state of one :func:`read_arrays` call: arrays read so far, the pending batch, deferred targets."""

    def __init__(self, region: FileRegion, file: str, *, verify: bool, scratch: bool,
                 deferred: list[tuple[ArrayRef, np.ndarray]] | None) -> None:
        self.region = region
        self.file = file
        self.verify = verify
        self.by_id: dict[int, np.ndarray] = {}
        self.by_extent: dict[tuple[Any, ...], list[int]] = {}
        self.batch: list[tuple[list[int], ArrayRef]] = []
        self.start = self.end = 0  # the file extent the batch covers
        self.verifier = ScratchVerifier(region, file) if scratch else None
        #: The caller fills the targets later (phase 2 of a restore) instead of this call.
        self.defer = deferred is not None
        self.deferred: list[tuple[ArrayRef, np.ndarray]] = deferred if deferred is not None else []

    def flush(self) -> None:
        """Read the pending run of small arrays with one call; each becomes a view of its bytes."""
        if not self.batch:
            return
        raw = bytearray(self.end - self.start)
        self.region.readinto(raw, self.start)
        view = memoryview(raw)
        for ids, ref in self.batch:
            first = ref.offset - self.start
            if self.verify:
                _check_crc(_crc32c(view[first : first + ref.nbytes]), ref, self.file)
            dtype = _numpy_dtype(ref.dtype)
            array = np.frombuffer(raw, dtype=dtype, count=ref.nbytes // dtype.itemsize, offset=first)
            if len(ref.shape) != 1:
                array = array.reshape(ref.shape)
            if self.verify and ref.dtype == "bool":
                _check_bool(array, ref, self.file)
            for ident in ids:
                self.by_id[ident] = array
        self.batch.clear()

    def into_target(self, ref: ArrayRef, target: np.ndarray) -> None:
        """A node with an existing array to fill: verified now (scratch buffer), filled now or later."""
        self.flush()
        if self.verifier is not None or self.defer:
            if self.verifier is not None:
                self.verifier.verify(ref)
            self.deferred.append((ref, target))
        else:
            read_verified_into(self.region, ref, target, self.file, verify=self.verify)
        self.by_id[id(ref)] = target

    def fresh(self, ref: ArrayRef) -> None:
        """A node that gets a fresh array: an alias of one read already, part of a batch, or read alone."""
        nbytes = ref.nbytes
        key = (ref.offset, nbytes, ref.dtype, ref.shape)
        ids = self.by_extent.get(key)
        if ids is not None:  # an alias of an array read (or being read) already
            ids.append(id(ref))
            if ids[0] in self.by_id:
                self.by_id[id(ref)] = self.by_id[ids[0]]
            return
        ids = self.by_extent[key] = [id(ref)]
        if nbytes <= _SMALL_BYTES:
            if self.batch and (ref.offset < self.end or ref.offset + nbytes - self.start > _BATCH_BYTES):
                self.flush()
            if not self.batch:
                self.start = ref.offset
            self.batch.append((ids, ref))
            self.end = ref.offset + nbytes
            return
        self.flush()
        self.by_id[id(ref)] = _single(self.region, ref, self.file, self.verify)


def fill_targets(region: FileRegion, deferred: list[tuple[ArrayRef, np.ndarray]], file: str, *,
                 verify: bool = True) -> None:
    """Read each verified node's bytes into its target, checking them again on the way in.

    The bytes were verified in phase 1 but are read from the file a second time
    here, so the CRC-32C is recomputed while copying (in cache, at no extra read):
    a file changed in place between the phases raises
    :class:`~opencheckpoint.format.errors.ConcurrentModification` (the targets filled so far,
    and this one, then hold the new bytes: documented in docs/guarantees.md).
    ``verify=False`` (the caller's explicit opt-out) copies without checking.
    """
    for ref, target in deferred:
        try:
            read_verified_into(region, ref, target, file, verify=verify)
        except IntegrityError as exc:
            raise restated(
                exc, ConcurrentModification,
                f"{ref.path}: the bytes verified before the restore changed while they were copied in ({exc.message}); "
                "another process modified the checkpoint in place: live arrays filled from it are partly "
                "updated, load again", file=file) from None


#: Size of the buffer :class:`ScratchVerifier` reads through.
_SCRATCH_BYTES = 1 << 20


class ScratchVerifier:
    """Checks arrays' bytes (R-ARR-14, then R-ARR-13) by reading them through one small reusable buffer.

    Each ``preadv`` fills the whole buffer from where the next unchecked
    byte lies, so a run of small arrays costs one system call and a big
    array one call per buffer; the buffer is all the memory it uses.

    >>> import tempfile
    >>> from opencheckpoint.container.base import FileRegion
    >>> from opencheckpoint.tree.nodes import ArrayRef
    >>> with tempfile.TemporaryFile() as f:
    ...     _ = f.write(bytes(range(8))); f.flush()
    ...     checker = ScratchVerifier(FileRegion(f.fileno(), 0, 8, "data.bin", owns_fd=False), "data.bin", 4)
    ...     checker.verify(ArrayRef("uint8", (8,), 0, 8, _crc32c(bytes(range(8))), "$.a"))
    ...     checker.verify(ArrayRef("uint8", (2,), 2, 2, 0, "$.b"))
    Traceback (most recent call last):
    ...
    opencheckpoint.format.errors.IntegrityError: IntegrityError: data.bin: $.b: array crc32c mismatch: stored 00000000, computed c574b4c8 [R-ARR-14]
    """  # noqa: E501  (doctest: an error message is shown whole, as users see it)

    __slots__ = ("region", "file", "_view", "_start", "_end", "_done")

    def __init__(self, region: FileRegion, file: str, size: int = _SCRATCH_BYTES) -> None:
        self.region = region
        self.file = file
        self._view = memoryview(bytearray(max(1, min(size, region.size))))
        self._start = self._end = 0  # the bytes of the region the buffer holds
        self._done: set[tuple[int, int, int, str]] = set()

    def verify(self, ref: ArrayRef) -> None:
        """Raise the node's first error (CRC-32C, then bool bytes), reading its bytes in buffer-sized pieces."""
        key = (ref.offset, ref.nbytes, ref.crc32c, ref.dtype)
        if key in self._done:
            return
        crc = 0
        bad_bool = False
        is_bool = ref.dtype == "bool"
        position, stop = ref.offset, ref.offset + ref.nbytes
        while position < stop:
            if not self._start <= position < self._end:
                length = min(len(self._view), self.region.size - position)
                self.region.readinto(self._view[:length], position)
                self._start, self._end = position, position + length
            take = min(stop, self._end) - position
            piece = self._view[position - self._start : position - self._start + take]
            crc = _crc32c(piece, crc)
            if is_bool and not bad_bool:
                bad_bool = bool(np.frombuffer(piece, dtype=np.uint8).max() > 1)
            position += take
        _check_crc(crc, ref, self.file)
        if bad_bool:
            raise _bool_error(ref, self.file)
        self._done.add(key)


def fits(live: Any, ref: ArrayRef) -> bool:
    """Whether ``live`` can take the node's bytes in place: a writeable, C-contiguous,
    non-empty NumPy array of the node's exact shape and dtype."""
    if type(live) is not np.ndarray or not ref.nbytes:
        return False
    flags = live.flags
    return (flags.writeable and flags.c_contiguous and live.shape == ref.shape
            and live.dtype == _numpy_dtype(ref.dtype))


def match_targets(node: Any, live: Any, out: dict[int, np.ndarray]) -> None:
    """Pair array nodes of a decoded tree with the arrays at the same place in ``live`` that fit them."""
    kind = type(node)
    if kind is ArrayRef:
        if fits(live, node):
            out[id(node)] = live
    elif kind is dict:
        if isinstance(live, dict):
            for key, child in node.items():
                if key in live:
                    match_targets(child, live[key], out)
    elif (kind is list or kind is tuple) and isinstance(live, (list, tuple)) and len(live) == len(node):
        for child, live_child in zip(node, live, strict=True):
            match_targets(child, live_child, out)


def verified_copy(view: np.ndarray, ref: ArrayRef, file: str) -> np.ndarray:
    """A private, read-only copy of an array's bytes, checked after copying (R-ARR-14, R-ARR-13).

    The bytes checked are the bytes returned: a file changed in place after
    the copy (or between a check and a later use) cannot reach the result, as
    it would through a view of the memory map.
    """
    if not ref.nbytes:
        return view  # no byte to check; NumPy may refuse to copy a huge zero-element shape
    copy = np.array(view)
    verify_view(copy, ref, file)
    copy.flags.writeable = False
    return copy


def verify_view(view: np.ndarray, ref: ArrayRef, file: str) -> None:
    """Check an array's CRC-32C (and bool bytes) without copying it (a big one on several cores)."""
    verify_views([(view, ref)], file)


def verify_views(views: Sequence[tuple[np.ndarray, ArrayRef]], file: str) -> None:
    """Check every array of ``views`` (CRC-32C, then bool bytes), raising the first error in their order.

    All the checksums are computed together on the caller and a small thread pool
    (:func:`~opencheckpoint.read.parallel_crc.crc32c_many`) before anything is raised.
    """
    for error in check_views(views, file):
        if error is not None:
            raise error


def check_views(views: Sequence[tuple[np.ndarray, ArrayRef]], file: str) -> list[CheckpointError | None]:
    """Each array's first error (R-ARR-14, then R-ARR-13), or None: one checksum pass over all of them."""
    crcs = crc32c_many([view.reshape(-1).view(np.uint8) if ref.nbytes else _NO_BYTES for view, ref in views])
    errors: list[CheckpointError | None] = []
    for (view, ref), crc in zip(views, crcs, strict=True):
        try:
            _check_crc(crc, ref, file)
            _check_bool(view, ref, file)
        except CheckpointError as exc:
            errors.append(exc)
        else:
            errors.append(None)
    return errors


_NO_BYTES = np.empty(0, dtype=np.uint8)


def _check_bool(array: np.ndarray, ref: ArrayRef, file: str) -> None:
    if ref.dtype == "bool" and ref.nbytes and array.reshape(-1).view(np.uint8).max() > 1:
        raise _bool_error(ref, file)


class ArrayHandle:
    """What every lazy array handle shares: shape, dtype and byte count from its node, NumPy basic indexing
    (``handle[key]``) through :meth:`read_region`, and ``np.asarray(handle)`` through :meth:`read`."""

    __slots__ = ()
    ref: Any  # the array node (tag 6 or tag 10) the handle reads

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.ref.shape)

    @property
    def dtype(self) -> str:
        return str(self.ref.dtype)

    @property
    def nbytes(self) -> int:
        return int(self.ref.nbytes)

    def read(self, *, verify: bool = True) -> np.ndarray:
        raise NotImplementedError

    def read_region(self, start: Sequence[int], size: Sequence[int], *, verify: bool = True) -> np.ndarray:
        raise NotImplementedError

    def __getitem__(self, key: Any) -> np.ndarray:
        """NumPy basic indexing (ints, slices with any step, Ellipsis, None) through :meth:`read_region`."""
        from ..sharding.regions import index_plan, select

        region, inner = index_plan(self.shape, key)
        return select(self.read_region(*region), inner)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        array = self.read()
        return array if dtype is None else array.astype(dtype)


def region_copy(array: np.ndarray, start: Sequence[int], size: Sequence[int]) -> np.ndarray:
    """Elements ``start[d] .. start[d] + size[d]`` of a whole array, checked against its shape, as a fresh array."""
    from ..sharding.regions import checked_region, region_slices, select

    start, size = checked_region(array.shape, start, size)
    part = select(array, region_slices((start, size), (0,) * len(start)))
    return part.copy() if part.size else part


class LazyArray(ArrayHandle):
    """An array in a checkpoint, not yet read: shape and dtype now, bytes on :meth:`read`."""

    __slots__ = ("ref", "_map", "_file", "_verified")

    def __init__(self, ref: ArrayRef, data_map: memoryview | FileRegion, file: str) -> None:
        self.ref = ref
        self._map = data_map
        self._file = file
        #: The verified copy, kept for later verified calls; never filled by ``verify=False`` (R-CHK-11).
        self._verified: np.ndarray | None = None

    def read(self, *, verify: bool = True) -> np.ndarray:
        """The array, read-only: a verified copy (made once, then kept), or with ``verify=False`` a view of the map.

        Verification is per call (R-CHK-11): an unverified read is never kept,
        so a later verified call checks the bytes itself. The kept copy holds
        the bytes that were checked, whatever happens to the file afterwards.
        From a remote checkpoint (a region, not a map) only the array's own byte range is fetched.
        """
        if self._verified is not None:
            return self._verified
        if isinstance(self._map, FileRegion):
            if not self.ref.nbytes:
                return _empty(self.ref, self._file)
            array = np.empty(self.ref.shape, numpy_dtype(self.ref.dtype))
            read_verified_into(self._map, self.ref, array, self._file, verify=verify)
            array.flags.writeable = False
            if verify:
                self._verified = array
            return array
        if not verify:
            return array_view(self._map, self.ref)
        self._verified = verified_copy(array_view(self._map, self.ref), self.ref, self._file)
        return self._verified

    def read_region(self, start: Sequence[int], size: Sequence[int], *, verify: bool = True) -> np.ndarray:
        """Elements ``start[d] .. start[d] + size[d]`` of every dimension, as a fresh array of shape ``size``.

        A checksum covers the whole array, so a verified read copies and verifies
        the whole extent once per handle (:meth:`read`) and then slices that copy;
        ``verify=False`` (an explicit opt-out) touches only the region's pages.
        """
        from ..sharding.regions import checked_region

        checked_region(self.ref.shape, start, size)  # a bad region is refused before any byte is read
        return region_copy(self.read(verify=verify), start, size)

    def __repr__(self) -> str:
        return f"LazyArray({self.ref.dtype}{list(self.ref.shape)}, {self.ref.path})"


def unique_views(data_map: memoryview, refs: Sequence[ArrayRef]) -> list[tuple[np.ndarray, ArrayRef]]:
    """A view of each distinct array of ``refs`` (aliases of one extent once, R-ARR-10), in their order."""
    seen: set[tuple[int, int, str, int]] = set()
    out = []
    for ref in refs:
        key = (ref.offset, ref.nbytes, ref.dtype, ref.crc32c)
        if key not in seen:
            seen.add(key)
            out.append((array_view(data_map, ref), ref))
    return out


def array_view(data_map: memoryview, ref: ArrayRef) -> np.ndarray:
    """A read-only NumPy view of one array's bytes in the map (no byte is read)."""
    dtype = numpy_dtype(ref.dtype)
    if ref.nbytes == 0:
        return _empty(ref, None)
    count = ref.nbytes // dtype.itemsize
    view = np.frombuffer(data_map, dtype=dtype, count=count, offset=ref.offset).reshape(ref.shape)
    return view


def _empty(ref: ArrayRef, file: str | None) -> np.ndarray:
    """The zero-element array of a node, with its exact shape (:func:`empty_array`)."""
    try:
        return empty_array(ref.shape, _numpy_dtype(ref.dtype))
    except CheckpointError as exc:
        raise exc.at(file=file, field=ref.path) from None
