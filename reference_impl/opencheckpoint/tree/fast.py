"""The fast path of tree decoding: canonical documents through the C msgpack codec (spec §8).

:func:`fast_decode` accepts only what the exact parser (:mod:`.exact`) would
accept with the same result, and raises :class:`_Doubt` on anything else;
:func:`opencheckpoint.tree.decode.decode_tree` then asks the exact parser.
"""

from __future__ import annotations

from itertools import chain
from typing import Any

import msgpack
import numpy as np

from ..format.dtypes import DTYPES, numpy_dtype
from ..format.limits import TREE_MAX_BIG_INT_BYTES, TREE_MAX_DEPTH, TREE_MAX_NODES, TREE_MAX_STR_BYTES
from ..rules.tree import prng_impl, prng_key_dtype, rbg_key_shape, threefry_key_shape
from .exact import _FIELDS, DecodedTree
from .nodes import INT_MAX, INT_MIN, ArrayRef, DtypeValue, NamedTupleValue, PRNGKeyValue, Tag
from .treepath import ROOT, TreePath
from .wire import big_int_bytes


class _Doubt(Exception):
    """The fast path cannot vouch for a document; the exact parser decides."""


_DOUBT = _Doubt()
_ExtType = msgpack.ExtType
#: One shared object per empty ext object (tag markers): building an ExtType per marker costs more.
_EMPTY_EXT = {code: _ExtType(code, b"") for code in range(128)}


_ARRAY_MARKER = _EMPTY_EXT[int(Tag.ARRAY)]


#: The C decoder's ext hook: ``code -> its shared marker``, a C call instead of a Python one per node. An
#: ext object with a payload (or an unknown code) comes back as the marker (or as the payload bytes),
#: so the document no longer re-packs to the same bytes: the canonical check makes it a doubt.
_ext_hook = _EMPTY_EXT.get


def fast_decode(data: bytes) -> DecodedTree:
    """Decode a canonical document with the C msgpack codec; raise :class:`_Doubt` on anything else.

    Accepting is sound because of three facts. (1) The bytes are exactly
    ``msgpack.packb`` of what ``msgpack.unpackb`` parsed (canonical, what our
    writer produces): so there are no float 32s, no non-minimal ints or
    lengths, no duplicate map keys, no trailing bytes, and tag markers are
    ``c7 00 T``. (2) Every object takes at least one byte, so a document of
    at most ``TREE_MAX_NODES`` bytes cannot exceed the node limit, and the
    string limit is passed to the C decoder. (3) The walk below accepts a
    node only under the exact parser's rules for it (it may be stricter,
    never looser); any other case is a doubt.

    >>> import msgpack
    >>> fast_decode(msgpack.packb([msgpack.ExtType(1, b""), 1, "a"])).root
    (1, 'a')
    >>> fast_decode(bytes([0xCC, 1]))  # 1 as a uint 8: valid, not canonical: the exact parser decides
    Traceback (most recent call last):
    ...
    opencheckpoint.tree.fast._Doubt
    """
    if not data or len(data) > TREE_MAX_NODES:
        raise _DOUBT
    try:
        parsed = msgpack.unpackb(data, raw=False, strict_map_key=False, use_list=True, timestamp=0,
                                 ext_hook=_ext_hook, max_str_len=TREE_MAX_STR_BYTES,
                                 max_bin_len=TREE_MAX_STR_BYTES)
        canonical = msgpack.packb(parsed, use_bin_type=True) == data
    except Exception:  # any decoder complaint: the exact parser names it
        raise _DOUBT from None
    if not canonical:
        raise _DOUBT
    walk = _FastWalk()
    root = walk.value(parsed, 0, ROOT)
    walk.resolve()
    return DecodedTree(root, walk.arrays, walk.placeholders)


class _FastWalk:
    """Node rules over already-parsed msgpack values (see :func:`fast_decode`)."""

    __slots__ = ("arrays", "placeholders", "pending")

    def __init__(self) -> None:
        self.arrays: list[ArrayRef] = []
        self.placeholders = False
        #: Array nodes met as a dict value or a list item, not checked yet: (container, key, parent
        #: path, node). :meth:`resolve` checks them column by column and puts an :class:`ArrayRef` in
        #: their place; it runs before any other array node is added, so ``arrays`` keeps document order.
        self.pending: list[tuple[Any, Any, TreePath, list[Any]]] = []

    def value(self, obj: Any, depth: int, path: TreePath) -> Any:
        """The node for ``obj``. Lists and dicts are the decoder's own objects, their children
        replaced in place: no second copy of the tree is ever held (a document of empty lists
        costs some 72 bytes of memory per byte)."""
        kind = type(obj)
        if kind is dict:
            depth += 1
            if depth > TREE_MAX_DEPTH:
                raise _DOUBT
            out = obj  # values are replaced in place; the keys (and their order) stay
            for key, item in obj.items():
                key_kind = type(key)
                if key_kind is not str and key_kind is not int:
                    raise _DOUBT
                item_kind = type(item)
                # A path node only for what can hold an array or fail: plain leaves need none.
                if item_kind is list and len(item) == 6 and item[0] is _ARRAY_MARKER:
                    if depth + 2 > TREE_MAX_DEPTH:  # the common leaf: checked later, in bulk (resolve)
                        raise _DOUBT
                    self.pending.append((out, key, path, item))
                elif item_kind is list or item_kind is dict:
                    out[key] = self.value(item, depth, path.child(key))
                elif item_kind not in _PLAIN:
                    raise _DOUBT
            return out
        if kind is list:
            depth += 1
            if depth > TREE_MAX_DEPTH:
                raise _DOUBT
            if obj and type(obj[0]) is _ExtType:
                return self.tagged(obj, depth, path)
            for i, item in enumerate(obj):
                item_kind = type(item)
                if item_kind is list and len(item) == 6 and item[0] is _ARRAY_MARKER and depth + 2 <= TREE_MAX_DEPTH:
                    self.pending.append((obj, i, path, item))
                elif item_kind not in _PLAIN:  # plain leaves are nodes as they are
                    obj[i] = self.value(item, depth, path.child(i))
            return obj
        if kind in _PLAIN:
            return obj
        raise _DOUBT  # an ext object outside element 0 of an array, a timestamp

    def tagged(self, obj: list[Any], depth: int, path: TreePath) -> Any:
        marker = obj[0]
        tag = marker.code
        if marker.data or not 1 <= tag <= 8:
            raise _DOUBT
        if tag == 1:  # Tag.TUPLE
            return tuple(self.value(obj[i], depth, path.child(i)) for i in range(1, len(obj)))
        if len(obj) - 1 != _FIELDS[tag]:
            raise _DOUBT
        if tag == 6:  # Tag.ARRAY
            return self.array_node(obj, depth, path)
        first = obj[1]
        if tag == 2:  # Tag.NAMED_TUPLE
            body = obj[2]
            if type(first) is not str or type(body) is not dict or depth + 1 > TREE_MAX_DEPTH:
                raise _DOUBT
            fields: dict[str, Any] = {}
            body_path = path.child(2)
            for key, item in body.items():
                if type(key) is not str:
                    raise _DOUBT
                fields[key] = self.value(item, depth + 1, body_path.child(key))
            return NamedTupleValue(first, fields)
        if tag == 3:  # Tag.BIG_INT
            if type(first) is not bytes or not first or len(first) > TREE_MAX_BIG_INT_BYTES:
                raise _DOUBT
            number = int.from_bytes(first, "little", signed=True)
            if big_int_bytes(number) != first or INT_MIN <= number <= INT_MAX:
                raise _DOUBT
            return number
        if tag == 4:  # Tag.COMPLEX
            if type(first) is not float or type(obj[2]) is not float:
                raise _DOUBT
            return complex(first, obj[2])
        if tag == 5:  # Tag.SCALAR
            raw = obj[2]
            entry = DTYPES.get(first) if type(first) is str else None
            if entry is None or type(raw) is not bytes or len(raw) != entry[0]:
                raise _DOUBT
            if first == "bool" and raw not in (b"\x00", b"\x01"):
                raise _DOUBT
            return np.frombuffer(raw, dtype=numpy_dtype(first))[0]
        if tag == 7:  # Tag.PRNG_KEY
            data = obj[2]
            if (type(first) is not str or type(data) is not list or not data or type(data[0]) is not _ExtType
                    or data[0].code != 6 or data[0].data or len(data) != 6 or depth + 1 > TREE_MAX_DEPTH):
                raise _DOUBT
            if prng_impl(first) is not None:  # the rules' own checks: the exact parser reports which one
                raise _DOUBT
            ref = self.array_node(data, depth + 1, path.child(2))
            if prng_key_dtype(ref.dtype) or threefry_key_shape(first, ref.shape) or rbg_key_shape(first, ref.shape):
                raise _DOUBT
            return PRNGKeyValue(first, ref)  # type: ignore[arg-type]  # an ArrayRef until the array is read
        # Tag.DTYPE
        if type(first) is not str or first not in DTYPES:
            raise _DOUBT
        self.placeholders = True
        return DtypeValue(first)

    def resolve(self) -> None:
        """Check every pending array node under :meth:`array_node`'s rules, column by column, and put
        its :class:`ArrayRef` in its place.

        One pass of C-level ``map``/``min``/set operations per field instead of a dozen Python
        checks per node: the checks are the same (any failure is a doubt), only batched.
        """
        pending = self.pending
        if not pending:
            return
        containers, keys, parents, nodes = zip(*pending, strict=True)
        _, names, shapes, offsets, nbytes, crcs = zip(*nodes, strict=True)
        try:
            if not _DTYPE_NAMES.issuperset(names):  # an unhashable name raises TypeError: a doubt too
                raise _DOUBT
        except TypeError:
            raise _DOUBT from None
        if not _ONLY_LIST.issuperset(map(type, shapes)):
            raise _DOUBT
        dims = list(chain.from_iterable(shapes))
        for column in (offsets, nbytes, crcs, dims):
            # Exact ints only (a bool is an int to isinstance, never a field of an array node).
            if not _ONLY_INT.issuperset(map(type, column)) or (column and min(column) < 0):
                raise _DOUBT
        if max(crcs) > 0xFFFFFFFF:
            raise _DOUBT
        refs = list(map(ArrayRef, names, map(tuple, shapes), offsets, nbytes, crcs, map(TreePath, parents, keys)))
        for container, key, ref in zip(containers, keys, refs, strict=True):
            container[key] = ref
        self.arrays += refs
        self.placeholders = True
        pending.clear()

    def array_node(self, obj: list[Any], depth: int, path: TreePath) -> ArrayRef:
        self.resolve()  # the nodes met before this one come first in ``arrays``
        _, name, shape, offset, nbytes, crc = obj
        if (type(name) is not str or type(shape) is not list or type(offset) is not int or type(nbytes) is not int
                or type(crc) is not int or offset < 0 or nbytes < 0 or not 0 <= crc <= 0xFFFFFFFF
                or name not in DTYPES or depth + 1 > TREE_MAX_DEPTH):
            raise _DOUBT
        for dim in shape:
            if type(dim) is not int or dim < 0:  # not bool: True == 1, but a bool is no shape entry
                raise _DOUBT
        ref = ArrayRef(name, tuple(shape), offset, nbytes, crc, path)
        self.arrays.append(ref)
        self.placeholders = True
        return ref


#: Leaf types the C decoder yields that are nodes as they are.
_PLAIN = frozenset({int, str, float, bytes, bool, type(None)})
_DTYPE_NAMES = frozenset(DTYPES)
_ONLY_INT = frozenset({int})
_ONLY_LIST = frozenset({list})
