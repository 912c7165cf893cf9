"""The dtype vocabulary (spec "Data types"): names, byte sizes and the NumPy mapping.

The torch and JAX mappings live in their adapters; this table is the single
source for names and sizes. Every stored array is little-endian, C order.

>>> itemsize("bfloat16")
2
>>> numpy_dtype("float8_e4m3fn").name
'float8_e4m3fn'
>>> dtype_name(numpy_dtype("complex64"))
'complex64'
"""

from __future__ import annotations

import sys
from functools import cache
from typing import Final

import numpy as np

from ..rules import required
from ..rules.tree import TREE
from .errors import CheckpointError

#: name -> (bytes per element, NumPy type, or the name of the ml_dtypes type). Order is the spec table's order.
#: ml_dtypes is imported when one of its types is first needed (its import costs more CPU than NumPy's;
#: ``inspect``, ``validate`` and ``ls`` never need it).
DTYPES: Final[dict[str, tuple[int, type | str]]] = {
    "bool": (1, np.bool_),
    "int8": (1, np.int8),
    "int16": (2, np.int16),
    "int32": (4, np.int32),
    "int64": (8, np.int64),
    "uint8": (1, np.uint8),
    "uint16": (2, np.uint16),
    "uint32": (4, np.uint32),
    "uint64": (8, np.uint64),
    "float16": (2, np.float16),
    "bfloat16": (2, "bfloat16"),
    "float32": (4, np.float32),
    "float64": (8, np.float64),
    "complex64": (8, np.complex64),
    "complex128": (16, np.complex128),
    "float8_e4m3fn": (1, "float8_e4m3fn"),
    "float8_e5m2": (1, "float8_e5m2"),
    "float8_e4m3fnuz": (1, "float8_e4m3fnuz"),
    "float8_e5m2fnuz": (1, "float8_e5m2fnuz"),
    "float8_e8m0fnu": (1, "float8_e8m0fnu"),
}


def _unknown(name: object) -> CheckpointError:
    return required(TREE.check("R-DT-1", None, None, name))


def itemsize(name: str) -> int:
    """Bytes per element of a dtype name; :class:`UnknownDtype` for names outside the table."""
    try:
        return DTYPES[name][0]
    except (KeyError, TypeError):
        raise _unknown(name) from None


@cache
def numpy_dtype(name: str) -> np.dtype:
    """The little-endian NumPy dtype for a dtype name."""
    try:
        kind = DTYPES[name][1]
    except (KeyError, TypeError):
        raise _unknown(name) from None
    if isinstance(kind, str):
        import ml_dtypes

        kind = getattr(ml_dtypes, kind)
    return np.dtype(kind).newbyteorder("<")


_BY_NUMPY: Final = {np.dtype(t).newbyteorder("="): name for name, (_, t) in DTYPES.items() if not isinstance(t, str)}


@cache
def _by_ml_dtypes() -> dict[np.dtype, str]:
    return {numpy_dtype(name).newbyteorder("="): name for name, (_, t) in DTYPES.items() if isinstance(t, str)}


def dtype_name(dtype: np.dtype) -> str:
    """The spec name of a NumPy dtype (either byte order); :class:`UnknownDtype` otherwise."""
    try:
        native = dtype.newbyteorder("=")
    except TypeError:  # a new-style dtype (np.dtypes.StringDType) has no byte order, and no spec name
        native = None
    name = _BY_NUMPY.get(native) if native is not None else None
    if name is None and native is not None and "ml_dtypes" in sys.modules:  # ml_dtypes' exist once it is imported
        name = _by_ml_dtypes().get(native)
    if name is None:
        raise required(TREE.check("R-DT-1", None, None, dtype, framework="NumPy"))
    return name


def canonical_bools(array: np.ndarray) -> np.ndarray:
    """``array`` (dtype bool, C-contiguous) with every element byte ``00`` or ``01`` (R-ARR-13).

    NumPy and PyTorch bool memory can hold other bytes (``np.frombuffer(b"\\x02", bool)``, a
    tensor read from a file): both frameworks read any nonzero byte as True, so such an
    element is stored as ``01``, the value unchanged. The usual array (every byte 00/01) is
    returned as it is, after one read of its bytes; only one with another byte is copied.

    >>> canonical_bools(np.frombuffer(b"\\x00\\x02\\xff", bool)).view(np.uint8).tolist()
    [0, 1, 1]
    """
    raw = array.reshape(-1).view(np.uint8)
    if raw.size == 0 or int(raw.max()) <= 1:
        return array
    normalised: np.ndarray = (raw != 0).reshape(array.shape)
    return normalised
