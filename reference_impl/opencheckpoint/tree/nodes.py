"""Node tags and the Python values of the tree vocabulary (spec "Tree payload").

A tagged node is a msgpack array whose first element is a *tag marker*: an
ext object with type ``T`` and an empty payload (bytes ``c7 00 T``).

>>> p = NamedTupleValue("optax.ScaleByAdamState", {"count": 1, "mu": None})
>>> p.count, p[1], p._fields
(1, None, ('count', 'mu'))
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import numpy as np

from ..format.dtypes import DTYPES
from ..rules.tree import PRNG_IMPL_KEY_SHAPES as PRNG_IMPL_KEY_SHAPES  # key data shapes: the rules' table
from .treepath import TreePath


class Tag(IntEnum):
    """Ext type codes of tag markers. 10..63 reserved for the spec, 64..127 for extensions."""

    TUPLE = 1
    NAMED_TUPLE = 2
    BIG_INT = 3
    COMPLEX = 4
    SCALAR = 5
    ARRAY = 6
    PRNG_KEY = 7
    DTYPE = 8
    #: Format version 2 (spec opencheckpoint-v2.md): a sharded array.
    SHARDED_ARRAY = 10


#: Number of elements (marker included) of each fixed-size tagged node.
FIXED_LENGTH: dict[int, int] = {
    Tag.NAMED_TUPLE: 3,
    Tag.BIG_INT: 2,
    Tag.COMPLEX: 3,
    Tag.SCALAR: 3,
    Tag.ARRAY: 6,
    Tag.PRNG_KEY: 3,
    Tag.DTYPE: 2,
}


INT_MIN = -(2**63)
INT_MAX = 2**64 - 1


class NamedTupleValue(tuple[Any, ...]):
    """A decoded named tuple: a tuple with field names and the writer's type name as a hint.

    The reader never imports ``type_name``; adapters rebuild the live type from
    the object being restored. Field access by attribute works even for names
    that shadow tuple methods (optax states have a ``count`` field): public
    field names are looked up before the class's attributes. One class serves
    every field set: a class per field set would cost kilobytes per node of a
    hostile document whose named tuples each have their own fields, and could
    never be freed (R-LIM-19).
    """

    _type_name: str  # set in __new__; read through the ``type_name`` property
    _fields: tuple[str, ...]

    def __new__(cls, type_name: str, fields: dict[str, Any]) -> NamedTupleValue:
        self = tuple.__new__(cls, tuple(fields.values()))
        object.__setattr__(self, "_type_name", type_name)
        object.__setattr__(self, "_fields", tuple(fields))
        return self

    def __getattribute__(self, name: str) -> Any:
        if name[:1] != "_":
            fields = object.__getattribute__(self, "_fields")
            if name in fields:
                return tuple.__getitem__(self, fields.index(name))
        return object.__getattribute__(self, name)

    @property
    def type_name(self) -> str:
        return self._type_name

    def _asdict(self) -> dict[str, Any]:
        return dict(zip(self._fields, self, strict=True))

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in zip(self._fields, self, strict=True))
        return f"NamedTupleValue({self.type_name!r}, {inner})"

    def __reduce__(self) -> Any:
        return (NamedTupleValue, (self.type_name, self._asdict()))


@dataclass(frozen=True)
class PRNGKeyValue:
    """A typed PRNG key (or key array): implementation name plus uint32 key data."""

    impl: str
    data: np.ndarray

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, PRNGKeyValue)
            and other.impl == self.impl
            and other.data.shape == self.data.shape
            and bool(np.array_equal(other.data, self.data))
        )

    __hash__ = None  # type: ignore[assignment]  # unhashable (equality compares the key data)


@dataclass(frozen=True)
class DtypeValue:
    """A dtype stored as a value (e.g. ``torch.float32`` inside a state dict)."""

    name: str


@dataclass(slots=True)
class ArrayRef:
    """A validated array node: where the bytes are and what they mean. Read-only by convention.

    Not a frozen dataclass: a reader builds one per array node, and a frozen dataclass's
    ``__init__`` (one ``object.__setattr__`` per field) costs four times a plain one, which a
    document of 20,000 tiny arrays feels. Hashable by value, like the frozen record it was.
    """

    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int
    crc32c: int
    #: Where the node sits: a :class:`~opencheckpoint.tree.treepath.TreePath` (or a plain str).
    where: TreePath | str

    @property
    def path(self) -> str:
        """The node's tree path, clipped for display (see :mod:`opencheckpoint.tree.treepath`)."""
        return str(self.where)

    def __hash__(self) -> int:
        return hash((self.dtype, self.shape, self.offset, self.nbytes, self.crc32c, self.where))


@dataclass(frozen=True, slots=True)
class ShardRef:
    """One shard record of a sharded array (tag 10): an index region and where its bytes are.

    ``start`` and ``size`` give the region (``start[d] .. start[d] + size[d]`` in
    dimension ``d``); ``offset``, ``nbytes`` and ``crc32c`` describe its bytes in
    ``file`` (an inventory key of the component) exactly as for an array node.
    """

    file: str
    start: tuple[int, ...]
    size: tuple[int, ...]
    offset: int
    nbytes: int
    crc32c: int
    #: Where the record sits (``$.w[3][0]``).
    where: TreePath | str

    @property
    def path(self) -> str:
        return str(self.where)

    def extent(self, dtype: str) -> ArrayRef:
        """The shard's bytes as an array node of shape ``size``: the data file rules (§9) apply to it."""
        return ArrayRef(dtype, self.size, self.offset, self.nbytes, self.crc32c, self.where)


@dataclass(frozen=True, slots=True)
class ShardedArrayRef:
    """A validated sharded array node (tag 10): global dtype and shape, and its shard records."""

    dtype: str
    shape: tuple[int, ...]
    shards: tuple[ShardRef, ...]
    where: TreePath | str

    @property
    def path(self) -> str:
        return str(self.where)

    @property
    def nbytes(self) -> int:
        """Bytes of the assembled array."""
        total = DTYPES[self.dtype][0]
        for dim in self.shape:
            total *= dim
        return total
