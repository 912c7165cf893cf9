"""The compiled fast path of tree decoding: ``_ctree``, a small C extension, when it was built (decision 0025).

:func:`compiled_decode` accepts exactly what the pure-Python fast path
(:func:`opencheckpoint.tree.fast.fast_decode`) accepts, gives the same tree,
and raises :class:`~opencheckpoint.tree.fast._Doubt` on everything else; the
Python paths then decide, so every error still comes from the exact parser.
It also returns the array nodes' extents as columns, so step 15
(:func:`opencheckpoint.tree.layout.check_layout`) takes no Python step per array.

The extension is built by ``pip install`` (``setup.py``, ``optional``: a
machine without a C compiler installs the package and uses the Python paths,
which give identical results). ``OPENCHECKPOINT_PURE_PYTHON=1`` turns it off
(the tests of the fallback, a comparison); ``make`` sets
``OPENCHECKPOINT_REQUIRE_COMPILED=1``, under which a missing build fails the
tests instead of silently falling back.

>>> import msgpack
>>> from opencheckpoint.tree.fast import fast_decode
>>> doc = msgpack.packb({"w": [msgpack.ExtType(6, b""), "float32", [2], 0, 8, 7]}, use_bin_type=True)
>>> tree = compiled_decode(doc) if AVAILABLE else fast_decode(doc)
>>> tree.root["w"].shape, tree.arrays[0].offset, str(tree.arrays[0].where)
((2,), 0, '$.w')
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from ..format.dtypes import DTYPES, numpy_dtype
from ..format.limits import TREE_MAX_NODES
from .exact import DecodedTree
from .fast import _Doubt
from .nodes import ArrayRef, DtypeValue, NamedTupleValue
from .treepath import ROOT, TreePath

#: Set to 1 to use the pure-Python paths even where the extension is built.
PURE_PYTHON_ENV = "OPENCHECKPOINT_PURE_PYTHON"
#: Set to 1 (``make`` does) when the extension must be built and used: the tests check it is.
REQUIRE_ENV = "OPENCHECKPOINT_REQUIRE_COMPILED"

_ctree: Any
try:
    from . import _ctree  # type: ignore[attr-defined, no-redef]  # built by setup.py; absent without a compiler
except ImportError:  # no C compiler at install time: the Python paths serve
    _ctree = None


def _scalar(name: str, raw: bytes) -> Any:
    """A tag 5 node's value, as the Python fast path makes it (the C code checked name and length)."""
    return np.frombuffer(raw, dtype=numpy_dtype(name))[0]


if _ctree is not None:
    _ctree.configure(_Doubt, ArrayRef, TreePath, NamedTupleValue, DtypeValue, _scalar,
                     {name: entry[0] for name, entry in DTYPES.items()})

#: Whether :func:`compiled_decode` runs the extension (built, and not turned off by the environment).
AVAILABLE = _ctree is not None and os.environ.get(PURE_PYTHON_ENV, "") != "1"


def compiled_decode(data: bytes) -> DecodedTree:
    """Decode a canonical document in one C pass; raise :class:`_Doubt` on anything else, or when not built.

    ``DecodedTree.columns`` holds the extents (offset, nbytes, crc32c as native uint64, one row per
    array node) when every array node is within the limits and its ``nbytes`` matches its shape.
    """
    if not AVAILABLE or not data or len(data) > TREE_MAX_NODES:
        raise _Doubt
    root, arrays, placeholders, columns = _ctree.decode(data, ROOT)
    return DecodedTree(root, arrays, placeholders, columns=columns)


def crc_mismatch(buffer: bytes | bytearray | memoryview, columns: bytes, first: int, count: int,
                 base: int) -> int | None:
    """The first of rows ``first .. first + count - 1`` of ``columns`` whose CRC-32C over its bytes in
    ``buffer`` (which holds the data file from offset ``base``) differs from the row's, as an index from
    ``first``; -1 when every one matches; None when the extension is not used or this CPU has no CRC-32C
    instruction (the caller then computes the checksums with the crc32c package).

    >>> import numpy as np
    >>> from opencheckpoint.format.integrity import crc32c
    >>> data = bytes(range(200))
    >>> rows = np.array([64, 8, crc32c(data[64:72]), 128, 16, 0], dtype=np.uint64).tobytes()
    >>> crc_mismatch(data, rows, 0, 2, 0) in (1, None)
    True
    """
    if not AVAILABLE:
        return None
    index: int = _ctree.crc_mismatch(buffer, columns, first, count, base)
    return None if index == -2 else index


def gather(arrays: list[Any], offsets: list[int], nodes: list[list[list[Any]]], position: int,
           pending: bytearray) -> int | None:
    """Append a run of small extents to ``pending`` (each ``arrays[i]`` at ``offsets[i]``, zero padding
    before it, the file being at ``position`` where ``pending`` ends) and set index 5 of every node of
    ``nodes[i]`` to the CRC-32C of ``arrays[i]``; return the position after the run. None, with nothing
    changed, when the extension is not used, this CPU has no CRC-32C instruction, or an array has no
    plain buffer: :func:`opencheckpoint.tree.datafile._gather` then does the same in Python.

    >>> import numpy as np
    >>> from opencheckpoint.format.integrity import crc32c
    >>> pending, node = bytearray(), [None] * 6
    >>> end = gather([np.ones(2, np.float32)], [64], [[node]], 8, pending)
    >>> end is None or (end, len(pending), node[5] == crc32c(np.ones(2, np.float32))) == (72, 64, True)
    True
    """
    if not AVAILABLE:
        return None
    end: int | None = _ctree.gather(arrays, offsets, nodes, position, pending)
    return end


def plan_run(arrays: list[Any], start: int, marker: Any, planned_type: type,
             name_of: Callable[[Any], tuple[str, bool]]) -> tuple[list[Any], list[list[Any]], int] | None:
    """The plan of a run of distinct NumPy arrays when every one is stored as it is (the conditions of
    :func:`opencheckpoint.tree.plan_runs.plain_run`): ``(extents, nodes, end)``, extent ``i`` a new
    ``planned_type(array, offset, nbytes)`` at the 64-byte aligned end of extent ``i - 1`` (the first at
    ``start``) holding its node ``[marker, name, shape, offset, nbytes, 0]``. None when the extension is
    not used or any array needs the per-array path (see :meth:`DataFilePlan.compiled_run`).
    """
    if not AVAILABLE:
        return None
    made: tuple[list[Any], list[list[Any]], int] | None = _ctree.plan_run(arrays, start, marker, planned_type,
                                                                          name_of)
    return made


__all__ = ["AVAILABLE", "compiled_decode", "crc_mismatch", "gather", "plan_run"]
