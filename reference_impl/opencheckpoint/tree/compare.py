"""Exact comparison of trees: what a writer was given against what a reader returned.

Needs nothing beyond NumPy (no hypothesis), so adapter tests can use it anywhere.

>>> import numpy as np
>>> assert_tree_equal({"w": np.float32([1, 2]), "nan": float("nan")},
...                   {"w": np.float32([1, 2]), "nan": float("nan")})
>>> assert_tree_equal(0.0, -0.0)
Traceback (most recent call last):
...
AssertionError: $: float bits differ: 0000000000000000 != 8000000000000000
>>> assert_tree_equal({"a": 1, "b": 2}, {"b": 2, "a": 1})
Traceback (most recent call last):
...
AssertionError: $: keys or key order differ: ['a', 'b'] != ['b', 'a']
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from .nodes import DtypeValue, NamedTupleValue, PRNGKeyValue

__all__ = ["assert_tree_equal", "float_bits"]


def float_bits(value: float) -> str:
    """The 16 hex digits of a float's binary64 pattern (how floats are compared).

    >>> float_bits(-0.0)
    '8000000000000000'
    """
    return struct.pack(">d", value).hex()


def assert_tree_equal(expected: Any, actual: Any, path: str = "$") -> None:
    """Raise :class:`AssertionError` (naming the path) unless two trees are exactly equal.

    Exactly means: the same container types (a named tuple equals a named
    tuple with the same type name and fields), the same dict key order and
    key types, floats and complex parts with the same bit pattern, arrays
    with the same dtype, shape and bytes (layout aside: a strided view
    equals its C-order copy), typed scalars of the same dtype and bytes,
    PRNG keys with the same implementation and data.
    """
    if isinstance(expected, NamedTupleValue) or isinstance(actual, NamedTupleValue):
        _check(isinstance(expected, NamedTupleValue) and isinstance(actual, NamedTupleValue), path,
               f"named tuple vs {type(actual).__name__}: {expected!r} != {actual!r}")
        _check(expected.type_name == actual.type_name, path,
               f"type_name differs: {expected.type_name!r} != {actual.type_name!r}")
        _check(expected._fields == actual._fields, path, f"fields differ: {expected._fields} != {actual._fields}")
        for name, a, b in zip(expected._fields, expected, actual, strict=True):
            assert_tree_equal(a, b, f"{path}.{name}")
        return
    _check(type(expected) is type(actual), path,
           f"type differs: {type(expected).__qualname__} != {type(actual).__qualname__}")
    if isinstance(expected, np.ndarray):
        _check(expected.dtype == actual.dtype, path, f"dtype differs: {expected.dtype} != {actual.dtype}")
        _check(expected.shape == actual.shape, path, f"shape differs: {expected.shape} != {actual.shape}")
        a, b = _bytes_of(expected), _bytes_of(actual)
        _check(a == b, path, f"array bytes differ (first at byte {_first_difference(a, b)})")
    elif isinstance(expected, np.generic):
        _check(expected.dtype == actual.dtype, path, f"dtype differs: {expected.dtype} != {actual.dtype}")
        _check(expected.tobytes() == actual.tobytes(), path,
               f"scalar bytes differ: {expected.tobytes().hex()} != {actual.tobytes().hex()}")
    elif isinstance(expected, float):
        _check(float_bits(expected) == float_bits(actual), path,
               f"float bits differ: {float_bits(expected)} != {float_bits(actual)}")
    elif isinstance(expected, complex):
        assert_tree_equal(expected.real, actual.real, f"{path}.real")
        assert_tree_equal(expected.imag, actual.imag, f"{path}.imag")
    elif isinstance(expected, Mapping):
        keys_a = [(type(k), k) for k in expected]
        keys_b = [(type(k), k) for k in actual]
        _check(keys_a == keys_b, path, f"keys or key order differ: {list(expected)} != {list(actual)}")
        for key in expected:
            assert_tree_equal(expected[key], actual[key], f"{path}.{key}" if isinstance(key, str) else f"{path}[{key}]")
    elif isinstance(expected, (list, tuple)):
        _check(len(expected) == len(actual), path, f"length differs: {len(expected)} != {len(actual)}")
        for index, (a, b) in enumerate(zip(expected, actual, strict=True)):
            assert_tree_equal(a, b, f"{path}[{index}]")
    elif isinstance(expected, PRNGKeyValue):
        _check(expected.impl == actual.impl, path, f"PRNG impl differs: {expected.impl!r} != {actual.impl!r}")
        assert_tree_equal(np.asarray(expected.data), np.asarray(actual.data), f"{path}.data")
    elif isinstance(expected, np.dtype):
        _check(expected == actual and expected.byteorder == actual.byteorder, path,
               f"dtype differs: {expected!r} != {actual!r}")
    elif isinstance(expected, DtypeValue):
        _check(expected.name == actual.name, path, f"dtype differs: {expected.name} != {actual.name}")
    else:
        _check(bool(expected == actual), path, f"{expected!r} != {actual!r}")


def _check(condition: bool, path: str, message: str) -> None:
    if not condition:
        raise AssertionError(f"{path}: {message}")


def _bytes_of(array: np.ndarray) -> bytes:
    # Through uint8: dtypes without a buffer format (ml_dtypes) and 0-d arrays included.
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8).tobytes()


def _first_difference(a: bytes, b: bytes) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
