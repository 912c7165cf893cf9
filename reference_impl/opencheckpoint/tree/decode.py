"""Parsing and validating a ``tree.msgpack`` document (spec "Tree payload").

:func:`decode_tree` turns bytes into Python values with :class:`ArrayRef`
placeholders for arrays; :func:`materialize` replaces placeholders (and
PRNG keys, dtypes) with a framework's objects once the data file layout
has been checked. Every rule raises :class:`TreeError` (or
:class:`LimitExceeded`) with the tree path of the offending node.

>>> import msgpack
>>> doc = msgpack.packb([msgpack.ExtType(1, b""), 1, "a"])
>>> decode_tree(doc).root
(1, 'a')
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

from ..dtypes import DTYPES, itemsize, numpy_dtype
from ..errors import CheckpointError, LimitExceeded, TreeError, UnknownDtype
from ..limits import ARRAY_MAX_NBYTES, ARRAY_MAX_NDIM, TREE_MAX_DEPTH, TREE_MAX_NODES, TREE_MAX_STR_BYTES
from .encode import big_int_bytes
from .nodes import INT_MAX, INT_MIN, PRNG_IMPL_KEY_SHAPES, ArrayRef, DtypeValue, NamedTupleValue, PRNGKeyValue, Tag


class _Marker:
    __slots__ = ("tag",)

    def __init__(self, tag: int) -> None:
        self.tag = tag


_MARKERS = {code: _Marker(code) for code in range(128)}


class _BadExt(Exception):
    pass


def _ext_hook(code: int, data: bytes) -> _Marker:
    if data or code < 0:
        raise _BadExt(f"ext type {code} with a {len(data)}-byte payload is not a tag marker")
    return _MARKERS[code]


def _pairs_hook(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[Any] = set()
        for key, _ in pairs:
            if key in seen:
                raise _BadExt(f"duplicate map key {key!r}")
            seen.add(key)
    return result


@dataclass
class DecodedTree:
    """A decoded document: the value with placeholders and every array node in document order."""

    root: Any
    arrays: list[ArrayRef]
    has_placeholders: bool


_HAS_PLACEHOLDER_TYPES = (ArrayRef, PRNGKeyValue, DtypeValue)


class _Decoder:
    def __init__(self) -> None:
        self.arrays: list[ArrayRef] = []
        self.nodes = 0
        self.placeholders = False

    def node(self, value: Any, depth: int, path: str) -> Any:
        self.nodes += 1
        if self.nodes > TREE_MAX_NODES:
            raise LimitExceeded(f"more than {TREE_MAX_NODES} nodes", field=path, section="R-LIM-9")
        kind = type(value)
        if kind is list:
            if depth >= TREE_MAX_DEPTH:
                raise LimitExceeded(f"tree nested deeper than {TREE_MAX_DEPTH}", field=path, section="R-LIM-8")
            if value and type(value[0]) is _Marker:
                return self.tagged(value, depth, path)
            return [self.node(item, depth + 1, f"{path}[{i}]") for i, item in enumerate(value)]
        if kind is dict:
            if depth >= TREE_MAX_DEPTH:
                raise LimitExceeded(f"tree nested deeper than {TREE_MAX_DEPTH}", field=path, section="R-LIM-8")
            out = {}
            for key, item in value.items():
                key_kind = type(key)
                if key_kind is str:
                    out[key] = self.node(item, depth + 1, f"{path}.{key}")
                elif key_kind is int:
                    out[key] = self.node(item, depth + 1, f"{path}[{key}]")
                else:
                    raise TreeError(f"map key {key!r} is a {key_kind.__name__}; keys are str or int",
                                    field=path, section="R-TREE-7")
            return out
        if value is None or kind is bool or kind is int or kind is float or kind is str or kind is bytes:
            return value
        if kind is _Marker:
            raise TreeError("a tag marker may only be the first element of an array", field=path,
                            section="R-TREE-3")
        raise TreeError(f"unexpected msgpack value of type {kind.__name__}", field=path, section="R-TREE-1")

    def tagged(self, value: list[Any], depth: int, path: str) -> Any:
        tag = value[0].tag
        if tag == Tag.TUPLE:
            return tuple(self.node(item, depth + 1, f"{path}[{i}]") for i, item in enumerate(value[1:]))
        expected = {
            Tag.NAMED_TUPLE: 3, Tag.BIG_INT: 2, Tag.COMPLEX: 3, Tag.SCALAR: 3,
            Tag.ARRAY: 6, Tag.PRNG_KEY: 3, Tag.DTYPE: 2,
        }.get(tag)
        if expected is None:
            raise TreeError(f"unknown node tag {tag}", field=path, section="R-TREE-4")
        if len(value) != expected:
            raise TreeError(f"node with tag {Tag(tag).name} has {len(value)} elements, expected {expected}",
                            field=path, section="R-TREE-4")
        if tag == Tag.ARRAY:
            return self.array(value, path)
        if tag == Tag.NAMED_TUPLE:
            _, type_name, fields = value
            if type(type_name) is not str or type(fields) is not dict or any(type(k) is not str for k in fields):
                raise TreeError("named tuple is [marker, str, map of str -> node]", field=path, section="R-TREE-9")
            body = {name: self.node(item, depth + 1, f"{path}.{name}") for name, item in fields.items()}
            return NamedTupleValue(type_name, body)
        if tag == Tag.BIG_INT:
            raw = value[1]
            if type(raw) is not bytes or not raw:
                raise TreeError("big int is [marker, non-empty bin]", field=path, section="R-TREE-10")
            number = int.from_bytes(raw, "little", signed=True)
            if big_int_bytes(number) != raw:
                raise TreeError("big int encoding is not minimal", field=path, section="R-TREE-10")
            if INT_MIN <= number <= INT_MAX:
                raise TreeError("big int value fits a msgpack int and must be written as one", field=path,
                                section="R-TREE-10")
            return number
        if tag == Tag.COMPLEX:
            if type(value[1]) is not float or type(value[2]) is not float:
                raise TreeError("complex is [marker, float, float]", field=path, section="R-TREE-11")
            return complex(value[1], value[2])
        if tag == Tag.SCALAR:
            name, raw = value[1], value[2]
            if type(name) is not str or type(raw) is not bytes:
                raise TreeError("scalar is [marker, dtype str, bin]", field=path, section="R-TREE-13")
            try:
                size = itemsize(name)
            except CheckpointError as exc:
                raise exc.at(field=path) from None
            if len(raw) != size:
                raise TreeError(f"{name} scalar needs {size} bytes, got {len(raw)}", field=path,
                                section="R-TREE-13")
            return np.frombuffer(raw, dtype=numpy_dtype(name))[0]
        if tag == Tag.PRNG_KEY:
            impl, data = value[1], value[2]
            if type(impl) is not str or type(data) is not list or not data or type(data[0]) is not _Marker \
                    or data[0].tag != Tag.ARRAY:
                raise TreeError("PRNG key is [marker, impl str, array node]", field=path, section="R-TREE-12")
            ref = self.array(data, path + ".data")
            key_shape = PRNG_IMPL_KEY_SHAPES.get(impl)
            if ref.dtype != "uint32" or (key_shape is not None and ref.shape[len(ref.shape) - len(key_shape):] != key_shape):
                raise TreeError(f"{impl} key data must be uint32 ending in shape {key_shape}, got "
                                f"{ref.dtype}{list(ref.shape)}", field=path, section="R-TREE-12")
            self.placeholders = True
            return PRNGKeyValue(impl, ref)  # type: ignore[arg-type]
        # Tag.DTYPE
        name = value[1]
        if type(name) is not str:
            raise TreeError("dtype is [marker, str]", field=path, section="R-TREE-14")
        if name not in DTYPES:
            raise UnknownDtype(f"dtype {name!r} is not in the dtype table", field=path, section="R-DT-1")
        self.placeholders = True
        return DtypeValue(name)

    def array(self, value: list[Any], path: str) -> ArrayRef:
        _, name, shape, offset, nbytes, crc = value
        if type(name) is not str:
            raise TreeError("array dtype must be a str", field=path, section="R-ARR-1")
        if name not in DTYPES:
            raise UnknownDtype(f"dtype {name!r} is not in the dtype table", field=path, section="R-DT-1")
        if type(shape) is not list or any(type(d) is not int or d < 0 for d in shape):
            raise TreeError("array shape must be an array of non-negative ints", field=path, section="R-ARR-1")
        if len(shape) > ARRAY_MAX_NDIM:
            raise LimitExceeded(f"array has {len(shape)} dimensions, limit {ARRAY_MAX_NDIM}", field=path,
                                section="R-LIM-10")
        for field_name, number in (("offset", offset), ("nbytes", nbytes), ("crc32c", crc)):
            if type(number) is not int or number < 0:
                raise TreeError(f"array {field_name} must be a non-negative int", field=path, section="R-ARR-1")
        if crc > 0xFFFFFFFF:
            raise TreeError("array crc32c does not fit 32 bits", field=path, section="R-ARR-1")
        if offset > ARRAY_MAX_NBYTES or nbytes > ARRAY_MAX_NBYTES:
            raise LimitExceeded("array offset or nbytes is 2**63 or more", field=path, section="R-LIM-11")
        total = DTYPES[name][0]
        for dim in shape:
            total *= dim
            if total > ARRAY_MAX_NBYTES:
                raise LimitExceeded("shape product times item size overflows 2**63", field=path,
                                    section="R-LIM-11")
        if total != nbytes:
            raise TreeError(f"shape {shape} of {name} is {total} bytes but nbytes is {nbytes}", field=path,
                            section="R-ARR-2")
        ref = ArrayRef(name, tuple(shape), offset, nbytes, crc, path)
        self.arrays.append(ref)
        self.placeholders = True
        return ref


def decode_tree(data: bytes) -> DecodedTree:
    """Parse a tree document; arrays become :class:`ArrayRef` placeholders."""
    limit = min(len(data), TREE_MAX_STR_BYTES)
    try:
        raw = msgpack.unpackb(
            data,
            raw=False,
            use_list=True,
            strict_map_key=False,
            ext_hook=_ext_hook,
            object_pairs_hook=_pairs_hook,
            max_str_len=limit,
            max_bin_len=limit,
            max_array_len=min(len(data), TREE_MAX_NODES),
            max_map_len=min(len(data) // 2, TREE_MAX_NODES),
            max_ext_len=limit,
        )
    except msgpack.ExtraData:
        raise TreeError("bytes after the root node", field="$", section="R-TREE-2") from None
    except _BadExt as exc:
        raise TreeError(str(exc), field="$", section="R-TREE-3") from None
    except UnicodeDecodeError:
        raise TreeError("a str is not valid UTF-8", field="$", section="R-TREE-5") from None
    except TypeError as exc:  # unhashable map key (array or map used as a key)
        raise TreeError(f"invalid map key: {exc}", field="$", section="R-TREE-7") from None
    except ValueError as exc:
        text = str(exc)
        if "recursion" in text or "exceeds max" in text:
            raise LimitExceeded(f"tree document exceeds a limit: {text}", field="$", section="R-LIM-8") from None
        raise TreeError(f"not a msgpack document: {text}", field="$", section="R-TREE-2") from None
    except (struct.error, OverflowError) as exc:
        raise TreeError(f"not a msgpack document: {exc}", field="$", section="R-TREE-2") from None
    decoder = _Decoder()
    root = decoder.node(raw, 0, "$")
    return DecodedTree(root, decoder.arrays, decoder.placeholders)


def materialize(value: Any, leaf: Callable[[Any], Any]) -> Any:
    """Replace every placeholder (ArrayRef, PRNGKeyValue with a ref, DtypeValue) through ``leaf``."""
    kind = type(value)
    if kind is dict:
        return {k: materialize(v, leaf) for k, v in value.items()}
    if kind is list:
        return [materialize(v, leaf) for v in value]
    if kind is tuple:
        return tuple(materialize(v, leaf) for v in value)
    if isinstance(value, NamedTupleValue):
        return NamedTupleValue(value.type_name, {k: materialize(v, leaf) for k, v in value._asdict().items()})
    if kind in (ArrayRef, PRNGKeyValue, DtypeValue):
        return leaf(value)
    return value
