"""Planning runs of plain arrays in one step (the write side of 20,000 tiny arrays).

:meth:`~opencheckpoint.tree.encode.TreePlan._array` plans one array with a
dozen Python steps. For a run of dict values that are all plain arrays —
known little-endian dtype other than bool, C-contiguous, owning their
memory, non-empty, at most ``ARRAY_MAX_NDIM`` dimensions — :func:`plain_run`
checks the same conditions with one C-level ``map`` per attribute and one
dtype lookup per distinct dtype object; the planner then lays the run out
with :meth:`~opencheckpoint.tree.datafile.DataFilePlan.new_extents`. Any
other array sends the run back to the per-array path, which stores it (or
refuses it naming the array) exactly as before.
"""

from __future__ import annotations

from operator import attrgetter

import numpy as np

from ..format.dtypes import dtype_name
from ..format.errors import CheckpointError
from ..format.limits import ARRAY_MAX_NDIM

#: dtype object -> (spec name, stored byte-swapped); equal dtypes are usually one object.
DTYPE_NAMES: dict[np.dtype, tuple[str, bool]] = {}


def name_of(dtype: np.dtype) -> tuple[str, bool]:
    """The spec name of a NumPy dtype and whether it is byte-swapped (cached, at most 1024 dtypes)."""
    cached = DTYPE_NAMES.get(dtype)
    if cached is None:
        cached = (dtype_name(dtype), dtype.byteorder == ">")
        if len(DTYPE_NAMES) < 1024:
            DTYPE_NAMES[dtype] = cached
    return cached


def plain_run(arrays: list[np.ndarray]) -> tuple[list[str], list[int]] | None:
    """The spec dtype names and byte counts of ``arrays`` when every one is stored as it is (see the
    module docstring), checked together; None if any one needs the per-array path."""
    if not arrays:
        return None
    column = list(map(_DTYPE, arrays))
    dtypes = dict(zip(map(id, column), column, strict=True))  # a handful of distinct dtype objects
    by_id: dict[int, str] = {}
    for ident, dtype in dtypes.items():
        try:
            name, swapped = name_of(dtype)
        except CheckpointError:  # not a spec dtype: the per-array path names the array
            return None
        if swapped or name == "bool":  # refused, or stored canonicalised (R-ARR-13): one at a time
            return None
        by_id[ident] = name
    flags = list(map(_FLAGS, arrays))
    sizes = list(map(_NBYTES, arrays))
    if (not all(map(_C_CONTIGUOUS, flags)) or not all(map(_OWNDATA, flags)) or not min(sizes)
            or max(map(_NDIM, arrays)) > ARRAY_MAX_NDIM):
        return None
    return list(map(by_id.__getitem__, map(id, column))), sizes


SHAPE = attrgetter("shape")
OFFSET = attrgetter("offset")
NODES = attrgetter("nodes")
_FLAGS = attrgetter("flags")
_NBYTES = attrgetter("nbytes")
_DTYPE = attrgetter("dtype")
_NDIM = attrgetter("ndim")
_C_CONTIGUOUS = attrgetter("c_contiguous")
_OWNDATA = attrgetter("owndata")
