"""The compiled fast paths of the tree codec: ``_ctree``, a small C extension, when it was built (decision 0025).

:func:`compiled_decode` accepts exactly what the pure-Python fast path
(:func:`opencheckpoint.tree.fast.fast_decode`) accepts, gives the same tree,
and raises :class:`~opencheckpoint.tree.fast._Doubt` on everything else; the
Python paths then decide, so every error still comes from the exact parser.
It also returns the array nodes' extents as columns, so step 15
(:func:`opencheckpoint.tree.layout.check_layout`) takes no Python step per array.

On the save side, :func:`plan_run` plans a dict's run of plain arrays, :func:`gather_run` copies a run of small
extents into the data file's pending buffer with their checksums, and :func:`compiled_pack` gives the
document's msgpack bytes; each gives exactly what the Python code gives, or None and the Python code runs.

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

import msgpack
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


def gather_run(extents: list[Any], index: int, position: int, planned_type: type, buffer: bytearray, fill: int,
               file_crc: int) -> tuple[int, int, int, int] | None:
    """Copy the run of small extents from ``extents[index]`` into ``buffer`` at ``fill`` (each after its zero
    padding from the file position ``position``), set index 5 of each of their nodes to their CRC-32C and continue
    ``file_crc`` over the bytes copied, in one pass; stop before an extent of 64 KiB or more, one whose array has
    no plain buffer or that does not fit, and after the one that brings ``fill`` to 1 MiB. Returns
    ``(next index, position, fill, file_crc)`` (next index == index: nothing gathered, the Python code takes
    that extent); None when the extension is not used or this CPU has no CRC-32C instruction.

    >>> import numpy as np
    >>> from opencheckpoint.format.integrity import crc32c
    >>> from opencheckpoint.tree.datafile import _Planned
    >>> extent, node = _Planned(np.ones(2, np.float32), 64, 8), [None] * 6
    >>> extent.nodes.append(node)
    >>> buffer = bytearray(200)
    >>> done = gather_run([extent], 0, 8, _Planned, buffer, 0, 0)
    >>> done is None or done == (1, 72, 64, crc32c(bytes(buffer[:64]))) and node[5] == crc32c(np.ones(2, np.float32))
    True
    """
    if not AVAILABLE:
        return None
    done: tuple[int, int, int, int] | None = _ctree.gather_run(extents, index, position, planned_type, buffer, fill,
                                                               file_crc)
    return done


def plan_run(keys: list[Any], arrays: list[Any], start: int, marker: Any, planned_type: type,
             name_of: Callable[[Any], tuple[str, bool]], out: dict[Any, Any]) -> tuple[list[Any], int] | None:
    """The plan of a dict's run of distinct NumPy arrays when every one is stored as it is (the conditions of
    :func:`opencheckpoint.tree.plan_runs.plain_run`): ``(extents, end)``, extent ``i`` a new
    ``planned_type(array, offset, nbytes)`` at the 64-byte aligned end of extent ``i - 1`` (the first at
    ``start``) holding its node ``[marker, name, shape, offset, nbytes, 0]``, stored as ``out[keys[i]]``. None,
    with ``out`` unchanged, when the extension is not used, an array appears twice or any array needs the
    per-array path (see :meth:`DataFilePlan.compiled_run`).
    """
    if not AVAILABLE:
        return None
    made: tuple[list[Any], int] | None = _ctree.plan_run(keys, arrays, start, marker, planned_type, name_of, out)
    return made


def plan_dict(mapping: dict[Any, Any], start: int, marker: Any, planned_type: type,
              name_of: Callable[[Any], tuple[str, bool]], out: dict[Any, Any]) -> tuple[list[Any], int] | None:
    """:func:`plan_run` over the items of ``mapping`` when every key is a ``str`` and every value an
    ``np.ndarray`` (exact types; a state dict of arrays), without a Python pass over them; else None.
    """
    if not AVAILABLE:
        return None
    made: tuple[list[Any], int] | None = _ctree.plan_dict(mapping, np.ndarray, start, marker, planned_type, name_of,
                                                          out)
    return made


def compiled_pack(root: Any) -> bytes | None:
    """``msgpack.packb(root, use_bin_type=True, strict_types=False)``, byte for byte, for a document of the types
    the tree writer builds (dict, list, tuple, str, bytes, int within 64 bits, float, bool, None,
    ``msgpack.ExtType``); None when the extension is not used or the document holds anything else, a str that
    is not valid UTF-8 or a size msgpack refuses: the caller then runs ``msgpack.packb``, which decides.

    >>> doc = {"w": [msgpack.ExtType(6, b""), "float32", (2,), 0, 8, 0xFFFFFFFF], 7: [-1, 1.5, None, True, b"x"]}
    >>> compiled_pack(doc) in (None, msgpack.packb(doc, use_bin_type=True))
    True
    """
    if not AVAILABLE:
        return None
    packed: bytes | None = _ctree.pack(root, msgpack.ExtType)
    return packed


__all__ = ["AVAILABLE", "compiled_decode", "compiled_pack", "crc_mismatch", "gather_run", "plan_dict", "plan_run"]
