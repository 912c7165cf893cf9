"""Stored arrays read chunk by chunk, each chunk part of its array's verified CRC-32C: what ``diff`` compares.

A :class:`StreamedTree` is a tree component with its array nodes left as nodes
(:class:`~opencheckpoint.tree.nodes.ArrayRef`): :func:`paired_chunks` reads two
arrays (of two checkpoints) side by side through two reusable buffers, so a
comparison needs a constant amount of memory whatever the arrays' size, and
raises the array's :class:`~opencheckpoint.errors.IntegrityError` (R-ARR-14)
or bool error (R-ARR-13) once its last chunk is read. :class:`ChunkStats`
gathers, chunk by chunk, what ``diff`` reports of two arrays of one dtype and
shape: whether they differ, how many elements (exact dtypes), the largest
absolute and relative difference (floating point).

>>> import numpy as np
>>> stats = ChunkStats(np.dtype(np.float32))
>>> stats.add(np.zeros(2, np.float32), np.array([0, 0.5], np.float32))
>>> stats.detail("float32[2]")
('float32[2]: values differ', 0.5, 1.0)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import numpy as np

from ..container.base import FileRegion
from ..format.dtypes import numpy_dtype
from ..format.integrity import crc32c as _crc32c
from ..tree.decode import materialize
from ..tree.nodes import ArrayRef, DtypeValue, PRNGKeyValue, ShardedArrayRef
from .array_runs import bool_error, check_crc
from .arrays import read_verified_into
from .reader import CheckpointReader
from .sharded import LazyShardedArray

#: Bytes of each array read per step (two buffers of this size: the memory a comparison needs).
CHUNK_BYTES: Final = 1 << 20
#: The leaves that are arrays: stored nodes, sharded handles, arrays in memory (a migrated payload).
ARRAYS: Final = (ArrayRef, LazyShardedArray, np.ndarray)



class StreamedTree:
    """One tree component opened for chunked reads: :attr:`root` has its array nodes as :class:`ArrayRef`."""

    def __init__(self, reader: CheckpointReader, name: str) -> None:
        decoded, self.file, size = reader.decoded_layout(name)
        self.region: FileRegion = reader.open_region(self.file, size)
        files = reader.component_files(name) if decoded.sharded else None

        def leaf(node: Any) -> Any:
            if isinstance(node, ArrayRef):
                return node
            if isinstance(node, ShardedArrayRef):
                return LazyShardedArray(node, files)  # type: ignore[arg-type]  # set when decoded.sharded
            if isinstance(node, PRNGKeyValue):  # key data is small: read whole
                return PRNGKeyValue(node.impl, self.read(node.data))  # type: ignore[arg-type]  # a node here
            assert isinstance(node, DtypeValue)
            return numpy_dtype(node.name).newbyteorder("=")

        self.root = materialize(decoded.root, leaf) if decoded.has_placeholders else decoded.root

    def read(self, ref: ArrayRef) -> np.ndarray:
        """The whole array, verified."""
        array = np.empty(ref.shape, numpy_dtype(ref.dtype))
        read_verified_into(self.region, ref, array, self.file, verify=True)
        return array

    def __enter__(self) -> StreamedTree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.region.close()


def whole(value: Any, sides: tuple[StreamedTree, StreamedTree] | None, index: int) -> np.ndarray:
    """An array leaf in memory: a node read (verified) from ``sides[index]``, a sharded handle assembled."""
    if isinstance(value, ArrayRef):
        assert sides is not None  # nodes come from a StreamedTree
        return sides[index].read(value)
    if isinstance(value, LazyShardedArray):
        return value.read()
    return np.asarray(value)


def _chunks(side: StreamedTree, ref: ArrayRef, buffer: memoryview) -> Iterator[memoryview]:
    """The bytes of ``ref`` in pieces of ``buffer`` (reused); its CRC-32C and bool bytes checked at the end."""
    crc = 0
    bad_bool = False
    for start in range(0, ref.nbytes, len(buffer)):
        piece = buffer[: min(len(buffer), ref.nbytes - start)]
        side.region.readinto(piece, ref.offset + start)
        crc = _crc32c(piece, crc)
        if ref.dtype == "bool" and not bad_bool:
            bad_bool = bool(np.frombuffer(piece, np.uint8).max() > 1)
        yield piece
    check_crc(crc, ref, side.file)
    if bad_bool:
        raise bool_error(ref, side.file)


def paired_chunks(a_side: StreamedTree, a: ArrayRef, b_side: StreamedTree, b: ArrayRef) -> Iterator[
        tuple[np.ndarray, np.ndarray]]:
    """Matching flat pieces of two arrays of one dtype and size (views of two reused buffers), both verified."""
    dtype = numpy_dtype(a.dtype)
    size = max(dtype.itemsize, CHUNK_BYTES // dtype.itemsize * dtype.itemsize)
    left, right = memoryview(bytearray(size)), memoryview(bytearray(size))
    for x, y in zip(_chunks(a_side, a, left), _chunks(b_side, b, right), strict=True):
        yield np.frombuffer(x, dtype), np.frombuffer(y, dtype)


def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind in "fc" or dtype.name == "bfloat16" or dtype.name.startswith("float8")


class ChunkStats:
    """What differs between two arrays of one dtype, gathered chunk by chunk (flat pieces at the same offsets)."""

    def __init__(self, dtype: np.dtype) -> None:
        self.dtype = dtype
        self.differ = False
        self.count = 0  # differing elements (exact dtypes)
        self.size = 0
        self.max_abs: float | None = None  # the largest finite absolute difference (floating point)
        self.max_rel = 0.0

    def add(self, x: np.ndarray, y: np.ndarray) -> None:
        self.size += x.size
        if np.array_equal(x.view(np.uint8), y.view(np.uint8)):  # -0.0 vs 0.0 differ; a NaN equals the same NaN
            return
        self.differ = True
        if not _is_float(self.dtype):
            self.count += int(np.count_nonzero(x != y))
            return
        wide = np.complex128 if self.dtype.kind == "c" else np.float64
        with np.errstate(all="ignore"):
            xs, ys = x.astype(wide), y.astype(wide)
            delta = np.abs(xs - ys)
            rel = delta / np.maximum(np.abs(xs), np.abs(ys))
        finite = delta[np.isfinite(delta)]
        if finite.size:
            self.max_abs = max(self.max_abs or 0.0, float(finite.max()))
        rel = rel[np.isfinite(rel)]
        if rel.size:
            self.max_rel = max(self.max_rel, float(rel.max()))

    def detail(self, described: str) -> tuple[str, float | None, float | None] | None:
        """``(detail, max_abs_diff, max_rel_diff)`` of the report's line for the two arrays; None if equal."""
        if not self.differ:
            return None
        if not _is_float(self.dtype):
            return f"{self.count} of {self.size} elements differ", None, None
        return f"{described}: values differ", self.max_abs, self.max_rel
