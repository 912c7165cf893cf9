"""Data file layout rules (spec §9, step 15 of §15), checked before any array byte is read.

Order (each over every array before the next): the limits R-LIM-13 .. R-LIM-16
with checked arithmetic, then R-ARR-4 (``nbytes`` = shape product x itemsize),
then R-ARR-5 .. R-ARR-8 (alignment, empty arrays, bounds), then R-ARR-9 and
R-ARR-10 (overlaps; identical extents are aliases and must agree on the
checksum), then R-ARR-11 (the extents end exactly at the end of the file).
Zero padding (R-ARR-12) is checked by :func:`check_padding` (``validate``).

>>> from .nodes import ArrayRef
>>> check_layout([ArrayRef("float32", (2,), 0, 8, 1, "$.a"), ArrayRef("float32", (2,), 32, 8, 2, "$.b")], 40)
Traceback (most recent call last):
...
opencheckpoint.format.errors.ArrayLayoutError: ArrayLayoutError: $.b: offset 32 is not a multiple of 64 [R-ARR-5]
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from operator import attrgetter, mul

import numpy as np

from ..format.dtypes import DTYPES
from ..format.errors import CheckpointError
from ..format.limits import ALIGNMENT, ARRAY_MAX_DIM, ARRAY_MAX_NDIM
from ..rules import required
from ..rules.tree import TREE
from .nodes import ArrayRef

_LIMIT = 2**63


def limit_error(ref: ArrayRef) -> CheckpointError | None:
    """R-LIM-13 .. R-LIM-16 for one array node (also a sharded array's global shape), or None."""
    if len(ref.shape) > ARRAY_MAX_NDIM:  # tested inline: an array within the limit costs no call
        return TREE.check("R-LIM-13", ref.path, len(ref.shape))
    for dim in ref.shape:
        if dim > ARRAY_MAX_DIM:
            return TREE.error("R-LIM-14", f"dimension {dim} exceeds 2**63-1", field=ref.path)
    product = 1
    for dim in ref.shape:
        product *= dim
        if product >= _LIMIT:
            return TREE.error("R-LIM-15", f"running shape product of {list(ref.shape)} reaches 2**63", field=ref.path)
    if product * DTYPES[ref.dtype][0] >= _LIMIT:
        return TREE.error("R-LIM-15", f"shape {list(ref.shape)} of {ref.dtype} is 2**63 bytes or more", field=ref.path)
    if ref.nbytes >= _LIMIT:
        return TREE.error("R-LIM-16", f"nbytes {ref.nbytes} is 2**63 or more", field=ref.path)
    return None


def layout_errors(arrays: Sequence[ArrayRef], file_size: int, name: str = "data.bin") -> list[CheckpointError]:
    """Every violation of the first failing phase of step 15 (empty when the layout is valid).

    ``name`` is the data file as messages call it (a shard data file in format version 2).
    """
    errors = [e for e in map(limit_error, arrays) if e is not None]
    if errors:
        return errors
    for ref in arrays:
        expected = DTYPES[ref.dtype][0]
        for dim in ref.shape:
            expected *= dim
        if ref.nbytes != expected:  # tested inline: a matching array costs no call
            errors.append(required(TREE.check("R-ARR-4", ref.path, ref.shape, ref.dtype, DTYPES[ref.dtype][0],
                                              ref.nbytes)))
    if errors:
        return errors
    for ref in arrays:
        if ref.offset % ALIGNMENT:
            errors.append(TREE.error("R-ARR-5", f"offset {ref.offset} is not a multiple of {ALIGNMENT}",
                                     field=ref.path))
        elif ref.nbytes == 0 and ref.offset != 0:
            errors.append(TREE.error("R-ARR-6", f"an empty array has offset 0, not {ref.offset}", field=ref.path))
        elif ref.nbytes == 0 and ref.crc32c != 0:
            errors.append(TREE.error("R-ARR-7", f"an empty array has crc32c 0, not {ref.crc32c}", field=ref.path))
        elif ref.offset + ref.nbytes > file_size:
            errors.append(TREE.error("R-ARR-8", f"bytes [{ref.offset}, {ref.offset + ref.nbytes}) run past the end "
                                     f"of {name} ({file_size} bytes)", field=ref.path))
    if errors:
        return errors
    extents: dict[tuple[int, int], ArrayRef] = {}
    for ref in arrays:
        if ref.nbytes == 0:
            continue
        first = extents.setdefault((ref.offset, ref.nbytes), ref)
        if first is not ref and first.crc32c != ref.crc32c:
            errors.append(TREE.error("R-ARR-10", f"same extent as {first.path} (an alias) but a different crc32c",
                                     field=ref.path))
    end = 0
    previous: ArrayRef | None = None
    for (offset, nbytes), ref in sorted(extents.items()):
        if previous is not None and offset < end:
            errors.append(TREE.error("R-ARR-9", f"overlaps {previous.path} without being the same extent",
                                     field=ref.path))
        if offset + nbytes >= end:
            end, previous = offset + nbytes, ref
    if errors:
        return errors
    if end != file_size:
        errors.append(TREE.error("R-ARR-11", f"{name} is {file_size} bytes but its arrays end at {end}", field="$"))
    return errors


def layout_is_valid(arrays: Sequence[ArrayRef], file_size: int) -> bool:
    """True only for a valid layout whose new extents come in file order (what writers do), checked
    column by column with NumPy (a document of 20,000 tiny arrays takes no Python step per array).

    False means "not shown valid here": :func:`layout_errors` then decides.
    Sound because for ``nbytes == shape product x itemsize > 0`` every
    dimension and every running product is at most ``nbytes`` (all dims
    are >= 1), so ``nbytes < 2**63`` implies R-LIM-14 .. R-LIM-16; empty
    arrays take the full per-array limit check. Identical extents (aliases)
    must agree on the checksum (R-ARR-10); every other extent starts at or
    after the end of the extent before it in document order (R-ARR-9), and
    the last ends the file (R-ARR-11).
    """
    if not arrays:
        return file_size == 0
    shapes = list(map(_SHAPE, arrays))
    if max(map(len, shapes)) > ARRAY_MAX_NDIM:
        return False
    nbytes = list(map(_NBYTES, arrays))
    # Exact Python ints: a product reaching 2**63 cannot wrap around.
    if list(map(mul, map(_ITEMSIZES.__getitem__, map(_DTYPE, arrays)), map(prod, shapes))) != nbytes:
        return False
    offsets = list(map(_OFFSET, arrays))
    if max(nbytes) >= _LIMIT or max(offsets) >= _LIMIT or min(offsets) < 0:
        return False
    offset = np.array(offsets, dtype=np.uint64)  # < 2**63 each: offset + nbytes fits
    size = np.array(nbytes, dtype=np.uint64)
    crc = np.array(list(map(_CRC, arrays)), dtype=np.uint64)
    empty = size == 0
    if empty.any() and any(limit_error(ref) is not None for ref, is_empty in zip(arrays, empty.tolist(), strict=True)
                           if is_empty):
        return False
    return _extents_valid(offset, size, crc, file_size)


def columns_valid(columns: bytes, file_size: int) -> bool:
    """:func:`layout_is_valid` over the compiled decoder's columns (:attr:`DecodedTree.columns`).

    The decoder gives columns only when every node is within R-LIM-13 .. R-LIM-16
    and its nbytes is its shape product x itemsize (R-ARR-4); what is left is
    checked here with NumPy, the same way.

    >>> import numpy as np
    >>> columns_valid(np.array([0, 8, 1, 64, 8, 2], dtype=np.uint64).tobytes(), 72)
    True
    >>> columns_valid(np.array([0, 8, 1, 32, 8, 2], dtype=np.uint64).tobytes(), 40)  # offset 32: R-ARR-5
    False
    """
    table = np.frombuffer(columns, dtype=np.uint64).reshape(-1, 3)
    if not len(table):
        return file_size == 0
    offset, size, crc = table[:, 0], table[:, 1], table[:, 2]
    if int(offset.max()) >= _LIMIT:  # nbytes < 2**63 already: offset + nbytes fits
        return False
    return _extents_valid(offset, size, crc, file_size)


def _extents_valid(offset: np.ndarray, size: np.ndarray, crc: np.ndarray, file_size: int) -> bool:
    """Alignment, empty arrays, order, aliases and the file end over uint64 columns (offsets, nbytes < 2**63)."""
    if (offset % ALIGNMENT).any():
        return False
    empty = size == 0
    if empty.any():
        if (offset[empty] | crc[empty]).any():
            return False
        keep = ~empty
        offset, size, crc = offset[keep], size[keep], crc[keep]
    if not len(offset):
        return file_size == 0
    end = offset + size
    if not (offset[1:] >= end[:-1]).all():
        # Aliases, or extents out of file order: keep each extent's first node and check the rest
        # agree with it; the first nodes must then come in file order.
        _, first, group = np.unique(np.stack([offset, size], axis=1), axis=0, return_index=True,
                                    return_inverse=True)
        if (crc != crc[first][group.reshape(-1)]).any():
            return False
        firsts = np.sort(first)
        offset, end = offset[firsts], end[firsts]
        if not (offset[1:] >= end[:-1]).all():
            return False
    return int(end[-1]) == file_size


_SHAPE = attrgetter("shape")
_NBYTES = attrgetter("nbytes")
_OFFSET = attrgetter("offset")
_CRC = attrgetter("crc32c")
_DTYPE = attrgetter("dtype")
#: Bytes per element of each dtype name.
_ITEMSIZES = {name: entry[0] for name, entry in DTYPES.items()}


def check_layout(arrays: Sequence[ArrayRef], file_size: int, name: str = "data.bin", *,
                 columns: bytes | None = None) -> None:
    """Raise the first violation of step 15 (see the module docstring for the order) in the data file ``name``.

    ``columns``: the compiled decoder's extents of ``arrays`` (:func:`columns_valid`), when it gave them.
    """
    if columns_valid(columns, file_size) if columns is not None else layout_is_valid(arrays, file_size):
        return
    errors = layout_errors(arrays, file_size, name)
    if errors:
        raise errors[0]


def padding_gaps(arrays: Sequence[ArrayRef], size: int) -> list[tuple[int, int]]:
    """The byte ranges ``[start, end)`` of a data file of ``size`` bytes outside every array extent."""
    gaps: list[tuple[int, int]] = []
    position = 0
    for offset, nbytes in sorted({(r.offset, r.nbytes) for r in arrays if r.nbytes}):
        if offset > position:
            gaps.append((position, offset))
        position = max(position, offset + nbytes)
    if position < size:
        gaps.append((position, size))
    return gaps


def padding_error(start: int, end: int, size: int) -> CheckpointError:
    """R-ARR-12 for the gap ``[start, end)`` of a data file of ``size`` bytes that holds a non-zero byte."""
    if end == size:  # the gap after the last extent (or the whole file, when it holds no array bytes)
        return TREE.error("R-ARR-12", f"bytes after the last extent [{start}, {end}) are not zero", field="$")
    return TREE.error("R-ARR-12", f"padding bytes [{start}, {end}) are not all zero", field="$")


def check_padding(arrays: Sequence[ArrayRef], data: memoryview) -> None:
    """R-ARR-12: every byte of data.bin outside an array extent is zero."""
    for start, end in padding_gaps(arrays, len(data)):
        if np.frombuffer(data[start:end], dtype=np.uint8).any():
            raise padding_error(start, end, len(data))
