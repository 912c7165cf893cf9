"""The msgpack header bytes each kind of tree object starts with, the dtype lookup of array-like nodes, and
the bytes of a big int (tag 3).

Shared by the exact parser (:mod:`.exact`), its reading of sharded array
nodes (:mod:`.sharded`), the fast parser (:mod:`.fast`) and the encoder
(:mod:`.encode`), so that the read path does not import the writer.
"""

from __future__ import annotations

from ..format.dtypes import DTYPES
from ..rules import required
from ..rules.tree import TREE
from .treepath import TreePath

EXT_BYTES = frozenset({0xC7, 0xC8, 0xC9, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8})
ARRAY_BYTES = frozenset({0xDC, 0xDD, *range(0x90, 0xA0)})
MAP_BYTES = frozenset({0xDE, 0xDF, *range(0x80, 0x90)})
STR_BYTES = frozenset({0xD9, 0xDA, 0xDB, *range(0xA0, 0xC0)})
INT_BYTES = frozenset({*range(0x00, 0x80), *range(0xE0, 0x100), *range(0xCC, 0xD4)})
FLOAT_BYTES = frozenset({0xCA, 0xCB})
BIN_BYTES = frozenset({0xC4, 0xC5, 0xC6})


def big_int_bytes(value: int) -> bytes:
    """Minimal two's complement little-endian encoding of an int (the bytes of a big int, tag 3, spec §8.6).

    >>> big_int_bytes(2**64).hex(), big_int_bytes(-1).hex()
    ('000000000000000001', 'ff')
    """
    length = ((value if value >= 0 else ~value).bit_length() + 8) // 8
    return value.to_bytes(length, "little", signed=True)


def itemsize(name: str, path: TreePath) -> int:
    """The byte size of dtype ``name``; an unknown name is :class:`UnknownDtype` (R-DT-1)."""
    entry = DTYPES.get(name)
    if entry is None:  # tested inline: a known dtype (every array node) costs no call
        raise required(TREE.check("R-DT-1", str(path), None, name))
    return entry[0]
