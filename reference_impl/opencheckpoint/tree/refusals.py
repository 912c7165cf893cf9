"""Values the tree encoder refuses at save, and the message that names the fix (spec R-WTR-3).

A value that would come back changed (another type, lost attributes, another
byte order) is refused with :class:`~opencheckpoint.format.errors.UnsupportedValue`
naming what would be lost and what to store instead; nothing is dropped silently.
"""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np

from ..format.errors import UnsupportedValue
from ..rules.tree import TREE


def refuse(message: str, *, field: str | None = None, file: str | None = None) -> UnsupportedValue:
    """R-WTR-3, the one place it is reported: a writer that cannot represent a value fails (never writes a
    substitute); ``message`` says what would be lost and names the fix, ``field`` the value's tree path,
    ``file`` the file being written, where one is."""
    error = TREE.error("R-WTR-3", message, file=file, field=field)
    assert isinstance(error, UnsupportedValue)  # the class the table binds R-WTR-3 to (typed for the callers)
    return error


def lost_subclass(value: Any, path: str) -> UnsupportedValue:
    kind = type(value)
    base = next(b for b in (bool, int, float, str, bytes, tuple) if isinstance(value, b)) if not isinstance(
        value, (bytearray, memoryview)) else bytes
    return refuse(
        f"cannot store a {kind.__module__}.{kind.__qualname__} in a tree: it would come back as a plain "
        f"{base.__name__}. Store {base.__name__}(value) (or an enum's .value) and rebuild the type when loading, "
        "or register an adapter for it", field=path)


def plain_array(value: np.ndarray, path: str) -> np.ndarray:
    """An ndarray subclass's data, where nothing but the buffer would be lost; otherwise refused.

    ``np.memmap`` is only where the bytes live (it comes back as an ndarray, and a
    live memmap target is written in place); a masked array's mask, a matrix's or a
    record array's type would be lost silently (R-WTR-3).
    """
    if isinstance(value, np.memmap):
        _check_mapped(value, path)
        return np.asarray(value)
    kind = type(value)
    fix = ("store its .data and .mask (np.ma.getmaskarray(value)) as two arrays" if isinstance(value, np.ma.MaskedArray)
           else "store np.asarray(value) and rebuild the type when loading")
    raise refuse(f"cannot store a {kind.__module__}.{kind.__qualname__} in a tree: it would come back as a "
                           f"plain numpy.ndarray; {fix}", field=path)


def _check_mapped(value: np.memmap, path: str) -> None:
    """Refuse a memmap whose elements lie past the end of its file (truncated after mapping): reading them
    would kill the process (SIGBUS) or, on some systems, read zeros that were never the array's values.

    Only sizes are compared: the mapping's start (``offset`` rounded down to the allocation
    granularity, as ``np.memmap`` maps it), the array's last byte, and the file's size now.
    """
    mapping = getattr(value, "_mmap", None)
    if mapping is None or value.size == 0:
        return  # an ndarray in memory (np.memmap's result of a computation), or nothing to read
    try:
        file_size = mapping.size()  # fstat of the mapped file, now
    except (OSError, ValueError) as exc:
        raise refuse(f"cannot store this np.memmap: its file cannot be checked ({exc}); store a copy "
                     "(np.array(value)) made while the file is whole", field=path) from None
    base = np.frombuffer(mapping, dtype=np.uint8).ctypes.data
    low, high = np.lib.array_utils.byte_bounds(value)
    start = int(value.offset) - int(value.offset) % mmap.ALLOCATIONGRANULARITY
    if start + (high - base) > file_size or low < base:
        raise refuse(f"cannot store this np.memmap of {value.filename!r}: its elements reach byte "
                     f"{start + high - base} of a file of {file_size} bytes (the file was truncated after it was "
                     "mapped); its values are gone", field=path)


def big_endian(dtype: np.dtype, path: str) -> UnsupportedValue:
    return refuse(
        f"cannot store the big-endian dtype {dtype.str!r}: spec dtypes are little-endian, so it would come back as "
        f"{dtype.newbyteorder('<').str!r}; store value.astype(value.dtype.newbyteorder('<')) (or the dtype "
        "newbyteorder('<'))", field=path)


def lost_attributes(value: Any, attributes: list[str], path: str) -> UnsupportedValue:
    kind = type(value)
    return refuse(
        f"cannot store this {kind.__module__}.{kind.__qualname__}: its attribute{'s' if len(attributes) > 1 else ''} "
        f"{', '.join(attributes)} would be lost (only the fields are stored); store them as fields or beside it",
        field=path)


__all__ = ["big_endian", "lost_attributes", "lost_subclass", "plain_array"]


def unencodable_path(node: Any, path: str = "$") -> str | None:
    """The tree path of the first str (a map key or a value) of a planned document that UTF-8 cannot encode (a
    lone surrogate), for the R-TREE-9 refusal that ``msgpack`` raised without saying where; None if none is.
    Keys are shown with their unencodable characters escaped, so the message itself can be printed.

    >>> unencodable_path({"w": [1, "ok"], "bad\\udc80": 2})
    '$.bad\\\\udc80'
    >>> unencodable_path({"w": [1, "x\\ud800"]}), unencodable_path({"w": "fine"})
    ('$.w[1]', None)
    """
    if isinstance(node, str):
        return None if _encodable(node) else path
    if isinstance(node, dict):
        for key, value in node.items():
            shown = key.encode("utf-8", "backslashreplace").decode("utf-8") if isinstance(key, str) else key
            child = f"{path}.{shown}" if isinstance(key, str) else f"{path}[{key}]"
            if isinstance(key, str) and not _encodable(key):
                return child
            found = unencodable_path(value, child)
            if found is not None:
                return found
    elif isinstance(node, (list, tuple)):
        for index, item in enumerate(node):
            found = unencodable_path(item, f"{path}[{index}]")
            if found is not None:
                return found
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
