"""Runs of small arrays read in bulk: one read per run, the CRC-32Cs in one C-level pass, one view per array.

A checkpoint of 20,000 tiny arrays spends its time in per-array Python
steps, not in bytes. For the arrays of a document whose extents follow each
other in the data file (no aliases, what writers produce), this module
reads each run of small arrays (up to :data:`SMALL_BYTES` each, about
:data:`BATCH_BYTES` a run) with one ``preadv`` into one buffer, computes
every array's CRC-32C with ``map`` over slices of that buffer, compares them
with the stored ones as one list, and makes every array with one ``map`` of
the ``ndarray`` constructor over the buffer. The checks are those of
:func:`opencheckpoint.read.arrays.read_arrays`, in the same order (per array:
CRC-32C, R-ARR-14, then bool bytes, R-ARR-13; the first failing array in
document order is the one named).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import repeat
from operator import add, attrgetter

import numpy as np

from ..container.base import FileRegion
from ..format.dtypes import numpy_dtype
from ..format.errors import CheckpointError
from ..format.integrity import crc32c as _crc32c
from ..format.integrity import format_crc32c
from ..rules.tree import TREE
from ..tree.ctree import crc_mismatch
from ..tree.nodes import ArrayRef

#: Arrays up to this size are read together, many per system call.
SMALL_BYTES = 64 << 10
#: About the most bytes one batched read of small arrays covers (a run is cut before the array
#: that would take it past this).
BATCH_BYTES = 4 << 20

_SHAPE = attrgetter("shape")
_DTYPE = attrgetter("dtype")
_CRC = attrgetter("crc32c")
_NDARRAY: Callable[..., np.ndarray] = np.ndarray

_DTYPE_CACHE: dict[str, np.dtype] = {}


def cached_dtype(name: str) -> np.dtype:
    """The NumPy dtype of a spec dtype name, built once per name."""
    dtype = _DTYPE_CACHE.get(name)
    if dtype is None:
        dtype = _DTYPE_CACHE[name] = numpy_dtype(name)
    return dtype


def check_crc(crc: int, ref: ArrayRef, file: str) -> None:
    """R-ARR-14: the CRC-32C of an array's bytes equals its node's."""
    if crc != ref.crc32c:
        raise TREE.error("R-ARR-14",
            f"array crc32c mismatch: stored {format_crc32c(ref.crc32c)}, computed {format_crc32c(crc)}",
            file=file, field=ref.path)


def bool_error(ref: ArrayRef, file: str) -> CheckpointError:
    """R-ARR-13: a bool array holds only the bytes 00 and 01."""
    return TREE.error("R-ARR-13", "a bool array holds a byte other than 00 or 01", file=file, field=ref.path)


def read_runs(region: FileRegion, refs: Sequence[ArrayRef], file: str, *, verify: bool,
              single: Callable[[ArrayRef], np.ndarray], columns: bytes | None = None) -> dict[int, np.ndarray] | None:
    """Fresh arrays for ``refs`` (keyed by ``id(ref)``), or None when two non-empty nodes do not follow each
    other in the file (aliases, extents out of file order): :func:`~opencheckpoint.read.arrays.read_arrays` then
    reads node by node.

    ``single`` gives the array of each
    node that is not small or is empty, in document order between the runs. ``columns``: the compiled
    decoder's (offset, nbytes, crc32c) rows of ``refs`` (:attr:`DecodedTree.columns`), when it gave them:
    the extents are taken from them and each run's checksums compared in one C call.
    """
    if columns is not None:
        table = np.frombuffer(columns, dtype=np.uint64).reshape(-1, 3)
        offsets, sizes = table[:, 0].astype(np.int64), table[:, 1].astype(np.int64)  # step 15: all < 2**63
    else:
        offsets = np.fromiter(map(attrgetter("offset"), refs), dtype=np.int64, count=len(refs))
        sizes = np.fromiter(map(attrgetter("nbytes"), refs), dtype=np.int64, count=len(refs))
    nonempty = offsets[sizes > 0]
    if len(nonempty) > 1 and not (nonempty[1:] > nonempty[:-1]).all():
        return None
    out: dict[int, np.ndarray] = {}
    ends = offsets + sizes
    position = 0
    for index in [*np.flatnonzero((sizes == 0) | (sizes > SMALL_BYTES)).tolist(), len(refs)]:
        while position < index:  # the run of small arrays before ``index``, in batches
            # A batch ends before the first array that would take it past BATCH_BYTES (one array at least).
            limit = int(offsets[position]) + BATCH_BYTES
            last = max(position + 1, position + int(np.searchsorted(ends[position:index], limit, "right")))
            _read_batch(region, refs[position:last], offsets[position:last], sizes[position:last], file, verify,
                        out, (columns, position) if columns is not None else None)
            position = last
        if index < len(refs):
            out[id(refs[index])] = single(refs[index])
        position = index + 1
    return out


def _read_batch(region: FileRegion, batch: Sequence[ArrayRef], offsets: np.ndarray, sizes: np.ndarray, file: str,
                verify: bool, out: dict[int, np.ndarray], rows: tuple[bytes, int] | None) -> None:
    start = int(offsets[0])
    # Not zero-filled first (a bytearray is): every byte is read into it before any view is made.
    raw = np.empty(int(offsets[-1] + sizes[-1]) - start, dtype=np.uint8)
    region.readinto(raw, start)
    relative = (offsets - start).tolist()
    names = list(map(_DTYPE, batch))
    if verify:
        bad = crc_mismatch(raw.data, rows[0], rows[1], len(batch), start) if rows is not None else None
        if bad is None:  # no compiled checksums here: one crc32c call per array
            bad = _first_mismatch(raw, batch, relative, sizes)
        elif bad < 0:
            bad = len(batch)
        if "bool" in names:  # the bool bytes of every array before the first CRC-32C mismatch
            for i, ref in enumerate(batch[:bad]):
                if names[i] == "bool" and np.frombuffer(raw, np.uint8, ref.nbytes, relative[i]).max() > 1:
                    raise bool_error(ref, file)
        if bad < len(batch):
            check_crc(_crc32c(raw.data[relative[bad] : relative[bad] + batch[bad].nbytes]), batch[bad], file)
    for name in set(names).difference(_DTYPE_CACHE):
        cached_dtype(name)
    # ndarray(shape, dtype, buffer, offset): a writeable view of the array's bytes in ``raw``.
    arrays: map[np.ndarray] = map(_NDARRAY, map(_SHAPE, batch), map(_DTYPE_CACHE.__getitem__, names), repeat(raw),
                                  relative)
    out.update(zip(map(id, batch), arrays, strict=True))


def _first_mismatch(raw: np.ndarray, batch: Sequence[ArrayRef], relative: list[int], sizes: np.ndarray) -> int:
    """The index of the first array of ``batch`` whose CRC-32C differs from its node's (``len(batch)``: none)."""
    view = raw.data
    computed = list(map(_crc32c, map(view.__getitem__, map(slice, relative, map(add, relative, sizes.tolist())))))
    expected = list(map(_CRC, batch))
    if computed == expected:
        return len(batch)
    return next(i for i, (c, e) in enumerate(zip(computed, expected, strict=True)) if c != e)
