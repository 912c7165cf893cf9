"""Parsing and validating a ``tree.msgpack`` document (spec §8, step 14 of §15).

The document is parsed by the exact parser (:mod:`.exact`, every rule byte by
byte), after a fast path (:mod:`.fast`, the C msgpack codec for canonical
documents) that defers to it on any doubt.

:func:`decode_tree` turns bytes into Python values with :class:`ArrayRef`
placeholders for arrays; the layout of ``data.bin`` is checked afterwards by
:func:`opencheckpoint.tree.layout.check_layout` (step 15), and
:func:`materialize` replaces placeholders (and PRNG keys, dtypes) with a
framework's objects.

>>> import msgpack
>>> doc = msgpack.packb([msgpack.ExtType(1, b""), 1, "a"])
>>> decode_tree(doc).root
(1, 'a')
>>> decode_tree(doc + b"\\xc0")
Traceback (most recent call last):
...
opencheckpoint.format.errors.TreeError: TreeError: $: 1 bytes after the end of the root object [R-TREE-2]
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

import numpy as np

from .ctree import compiled_decode
from .exact import DecodedTree as DecodedTree
from .exact import exact_decode as exact_decode
from .fast import _Doubt as _Doubt
from .fast import fast_decode as fast_decode
from .gc_pause import paused_gc
from .nodes import ArrayRef, DtypeValue, NamedTupleValue, PRNGKeyValue, ShardedArrayRef
from .treepath import PATH_KEY_CHARS as PATH_KEY_CHARS


def decode_tree(data: bytes, *, understood_tags: Collection[int] = (), format_version: int = 1,
                kind_version: int = 1) -> DecodedTree:
    """Parse a tree document (step 14); arrays become :class:`ArrayRef` placeholders.

    ``understood_tags`` are extension tags (64..127) of understood extensions;
    this reader implements none, so any extension tag is rejected (R-TREE-19).
    ``format_version`` (the checkpoint's, as written) and ``kind_version`` (the
    component's) decide whether tag 10 is a sharded array (format version 2).

    A document is first tried on the fast paths (:func:`compiled_decode`, the C
    extension when built, then :func:`fast_decode`); when they have any doubt,
    :func:`exact_decode` decides, so results and errors are those of the exact parser.
    """
    data = bytes(data)
    with paused_gc():  # one object per byte or so, none of them garbage (gc_pause)
        if not understood_tags:
            for fast in (compiled_decode, fast_decode):
                try:
                    return fast(data)
                except _Doubt as doubt:
                    # The instance may be shared: its traceback would keep this call's frames, and through
                    # them the caller's decoded trees, alive until the next doubt.
                    doubt.__traceback__ = None
        # The fast path knows tags 1..8 only: a sharded array (tag 10) is always a doubt it leaves here.
        return exact_decode(data, understood_tags=understood_tags, format_version=format_version,
                            kind_version=kind_version)


def empty_array(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A zero-element array of exactly ``shape`` and ``dtype``, also where NumPy refuses ``np.empty``.

    NumPy rejects ``np.empty((2**61, 3, 0), float64)`` ("array is too big":
    it multiplies the non-zero dimensions by the itemsize), although the
    array holds no byte and the spec allows its shape (R-ARR-4). A 1-byte
    array of the shape is allowed whenever the product of its non-zero
    dimensions stays below 2**63; viewed as ``dtype`` it keeps the shape.
    Beyond that, NumPy cannot represent the shape at all, and the read fails
    with :class:`~opencheckpoint.format.errors.IncompatibleComponent` (a limit of
    this runtime, not a defect of the file).

    >>> a = empty_array((2**61, 3, 0), np.dtype(np.float64))
    >>> a.shape == (2**61, 3, 0), a.size, a.dtype.name
    (True, 0, 'float64')
    """
    try:
        return np.empty(shape, dtype=dtype)
    except ValueError:
        pass
    try:
        return np.empty(shape, dtype=np.uint8).view(dtype)
    except ValueError:
        from ..format.errors import IncompatibleComponent
        from ..rules import required
        from ..rules.tree import TREE

        raise required(TREE.check("R-ARR-4", None, shape, dtype.name, dtype.itemsize, 0, False,
                                  reported_as=IncompatibleComponent)) from None


def materialize(value: Any, leaf: Callable[[Any], Any], arrays: Mapping[int, Any] | None = None) -> Any:
    """Replace every placeholder (ArrayRef, ShardedArrayRef, PRNGKeyValue with a ref, DtypeValue) through ``leaf``.

    ``arrays``, when given, is what ``leaf`` returns for an :class:`ArrayRef` (``arrays[id(ref)]``): a dict
    whose values are all array nodes (a state dict) is then built by C-level ``map``s, no call per value.

    >>> ref = ArrayRef("float32", (2,), 0, 8, 1, "$.w")
    >>> materialize({"w": ref, "n": [ref, 3]}, lambda node: "A", {id(ref): "A"})
    {'w': 'A', 'n': ['A', 3]}
    """
    kind = type(value)
    if kind is dict:
        if arrays is not None and value and _ONLY_ARRAY_REF.issuperset(map(type, value.values())):
            return dict(zip(value, map(arrays.__getitem__, map(id, value.values())), strict=True))
        # Placeholders and plain leaves inline: a dict of 20,000 arrays costs no call per value but leaf's.
        return {k: leaf(v) if type(v) in _PLACEHOLDERS else materialize(v, leaf, arrays) if type(v) in _NESTED
                else v for k, v in value.items()}
    if kind is list:
        return [materialize(v, leaf, arrays) for v in value]
    if kind is tuple:
        return tuple(materialize(v, leaf, arrays) for v in value)
    if isinstance(value, NamedTupleValue):
        return NamedTupleValue(value.type_name, {k: materialize(v, leaf, arrays) for k, v in value._asdict().items()})
    if kind in _PLACEHOLDERS:
        return leaf(value)
    return value


_PLACEHOLDERS = frozenset({ArrayRef, ShardedArrayRef, PRNGKeyValue, DtypeValue})
#: Types whose values :func:`materialize` walks (a decoded tree holds these exact types, no subclasses).
_NESTED = frozenset({dict, list, tuple, NamedTupleValue})
_ONLY_ARRAY_REF = frozenset({ArrayRef})
