"""Hypothesis strategies for the tree vocabulary, and an exact tree comparison.

Every node type of the spec's tree payload has a strategy: ``None``, bools,
ints (including big ints outside -2**63 .. 2**64-1), floats (any bit
pattern: NaN payloads, ``-0.0``, infinities), complex numbers, Unicode
strings, bytes, lists, tuples, named tuples (:class:`NamedTupleValue`),
dicts with str and int keys, NumPy arrays of every spec dtype (0-d, empty
and non-contiguous ones too), typed scalars, PRNG keys of every
implementation and dtype values. :func:`trees` combines them with bounded
depth and size; :func:`checkpoint_values` draws a set of named components
for :class:`~opencheckpoint.Checkpoint`.

:func:`assert_tree_equal` (from :mod:`opencheckpoint.testing.compare`,
re-exported here) compares what a writer was given with what a reader
returned, exactly: floats by bit pattern, arrays by dtype, shape and bytes,
containers by type, length and key order.

This is a test-only module: it imports ``hypothesis``, which
``import opencheckpoint`` never does.

>>> from hypothesis import find
>>> find(arrays("bfloat16"), lambda a: not a.flags.c_contiguous).dtype.name
'bfloat16'
>>> find(floats(), lambda x: x != x and float_bits(x) != float_bits(float("nan"))) != 0  # a NaN with a payload
True
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
from hypothesis import strategies as st

from ..format.dtypes import DTYPES, itemsize, numpy_dtype
from ..format.paths import check_segment
from ..tree.nodes import INT_MAX, INT_MIN, PRNG_IMPL_KEY_SHAPES, NamedTupleValue, PRNGKeyValue
from .compare import assert_tree_equal, float_bits

__all__ = [
    "DTYPE_NAMES",
    "PRNG_IMPLS",
    "arrays",
    "assert_tree_equal",
    "big_ints",
    "checkpoint_values",
    "complexes",
    "component_names",
    "dict_keys",
    "dtype_names",
    "dtype_values",
    "float_bits",
    "floats",
    "ints",
    "leaves",
    "named_tuples",
    "prng_keys",
    "scalars",
    "texts",
    "trees",
]

#: Every dtype name of the spec's dtype table, in table order.
DTYPE_NAMES: tuple[str, ...] = tuple(DTYPES)
#: A custom implementation name matching the spec's pattern (R-TREE-25), next to the three built-ins.
CUSTOM_PRNG_IMPL = "org.example.prng/philox4x32"
PRNG_IMPLS: tuple[str, ...] = (*PRNG_IMPL_KEY_SHAPES, CUSTOM_PRNG_IMPL)


# -- scalars ---------------------------------------------------------------------------------------
def _float_from_bits(bits: int) -> float:
    value: float = struct.unpack(">d", bits.to_bytes(8, "big"))[0]
    return value


def big_ints(max_bits: int = 256) -> st.SearchStrategy[int]:
    """Ints outside -2**63 .. 2**64-1 (stored as big-int nodes), up to ``max_bits`` bits."""
    limit = 2**max_bits
    return st.one_of(st.integers(min_value=INT_MAX + 1, max_value=limit),
                     st.integers(min_value=-limit, max_value=INT_MIN - 1),
                     st.sampled_from([INT_MAX + 1, INT_MIN - 1]))


def ints() -> st.SearchStrategy[int]:
    """Any Python int: the msgpack range (with its edges) and big ints."""
    return st.one_of(st.integers(min_value=INT_MIN, max_value=INT_MAX),
                     st.sampled_from([0, -1, INT_MIN, INT_MAX, 2**63 - 1, 2**63]), big_ints())


def floats() -> st.SearchStrategy[float]:
    """Any binary64 value: ordinary floats, ``±0.0``, ``±inf`` and NaNs with any sign and payload."""
    special = st.sampled_from([0.0, -0.0, math.inf, -math.inf, math.nan, -math.nan])
    any_bits = st.integers(min_value=0, max_value=2**64 - 1).map(_float_from_bits)
    nan_payloads = st.integers(min_value=1, max_value=2**52 - 1).flatmap(
        lambda payload: st.sampled_from([0x7FF0 << 48, 0xFFF0 << 48]).map(
            lambda top: _float_from_bits(top | payload)))
    return st.one_of(st.floats(allow_nan=True, allow_infinity=True), special, any_bits, nan_payloads)


def complexes() -> st.SearchStrategy[complex]:
    """Complex numbers whose parts are any floats (bitwise, NaN payloads included)."""
    return st.builds(complex, floats(), floats())


def texts(max_size: int = 16) -> st.SearchStrategy[str]:
    """Unicode strings (valid UTF-8: no lone surrogates, R-TREE-9), including the empty string."""
    return st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=max_size)


def dtype_names() -> st.SearchStrategy[str]:
    return st.sampled_from(DTYPE_NAMES)


def dtype_values() -> st.SearchStrategy[np.dtype]:
    """Dtypes stored as values; NumPy readers return native-order NumPy dtypes."""
    return dtype_names().map(lambda name: numpy_dtype(name).newbyteorder("="))


def _raw_elements(draw: st.DrawFn, name: str, count: int) -> bytes:
    """``count`` elements of raw bytes; bool elements are 00 or 01 (R-ARR-13, R-TREE-24)."""
    if name == "bool":
        return bytes(draw(st.lists(st.integers(0, 1), min_size=count, max_size=count)))
    size = itemsize(name) * count
    return draw(st.binary(min_size=size, max_size=size))


@st.composite
def scalars(draw: st.DrawFn, dtype: str | None = None) -> np.generic:
    """Typed scalars (``np.float16(1)``, ``ml_dtypes.bfloat16`` ...) of every spec dtype, any bytes."""
    name = dtype or draw(dtype_names())
    value: np.generic = np.frombuffer(_raw_elements(draw, name, 1), dtype=numpy_dtype(name))[0]
    return value


@st.composite
def arrays(
    draw: st.DrawFn,
    dtype: str | None = None,
    *,
    max_dims: int = 3,
    max_side: int = 4,
    layouts: tuple[str, ...] = ("contiguous", "0-d", "empty", "strided", "transposed"),
) -> np.ndarray:
    """NumPy arrays of every spec dtype with arbitrary bytes.

    ``layouts`` picks among C-contiguous arrays, 0-d arrays, empty arrays (a
    zero dimension), and non-contiguous views (every other element of a
    bigger array, or a transpose), which writers must store in C order.
    """
    name = dtype or draw(dtype_names())
    layout = draw(st.sampled_from(layouts))
    if layout == "0-d":
        shape: tuple[int, ...] = ()
    elif layout == "empty":
        shape = tuple(draw(st.lists(st.integers(0, max_side), min_size=1, max_size=max_dims)))
        position = draw(st.integers(0, len(shape) - 1))
        shape = (*shape[:position], 0, *shape[position + 1:])
    else:
        shape = tuple(draw(st.lists(st.integers(1, max_side), min_size=1, max_size=max_dims)))
    if layout == "strided":
        base_shape = (*shape[:-1], shape[-1] * 2)
        base = _filled(draw, name, base_shape)
        return base[..., ::2]
    array = _filled(draw, name, shape)
    if layout == "transposed":
        return array.T
    return array


def _filled(draw: st.DrawFn, name: str, shape: tuple[int, ...]) -> np.ndarray:
    count = math.prod(shape)
    dtype = numpy_dtype(name)
    return np.frombuffer(bytearray(_raw_elements(draw, name, count)), dtype=dtype).reshape(shape)


@st.composite
def prng_keys(draw: st.DrawFn, impl: str | None = None) -> PRNGKeyValue:
    """PRNG keys of every implementation: a single key or a batch, uint32 data of the right shape."""
    chosen = impl or draw(st.sampled_from(PRNG_IMPLS))
    key_shape = PRNG_IMPL_KEY_SHAPES.get(chosen) or (draw(st.integers(1, 4)),)
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    shape = batch + key_shape
    words = draw(st.lists(st.integers(0, 2**32 - 1), min_size=math.prod(shape), max_size=math.prod(shape)))
    return PRNGKeyValue(chosen, np.array(words, dtype=np.uint32).reshape(shape))


def dict_keys() -> st.SearchStrategy[str | int]:
    """Map keys: Unicode strings and ints of the msgpack range (R-TREE-10)."""
    return st.one_of(texts(max_size=8), st.integers(min_value=INT_MIN, max_value=INT_MAX))


def leaves() -> st.SearchStrategy[Any]:
    """Every non-container node type."""
    return st.one_of(
        st.none(), st.booleans(), ints(), floats(), complexes(), texts(), st.binary(max_size=32),
        arrays(), scalars(), prng_keys(), dtype_values(),
    )


def named_tuples(children: st.SearchStrategy[Any], max_size: int = 4) -> st.SearchStrategy[NamedTupleValue]:
    """Named tuples: a type name (never imported by readers) and str-keyed fields (R-TREE-20)."""
    return st.builds(
        NamedTupleValue,
        st.one_of(st.sampled_from(["optax.ScaleByAdamState", "collections.Point", "os.system"]), texts()),
        st.dictionaries(texts(max_size=8), children, max_size=max_size),
    )


def _containers(children: st.SearchStrategy[Any], max_size: int) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=max_size),
        st.lists(children, max_size=max_size).map(tuple),
        st.dictionaries(dict_keys(), children, max_size=max_size),
        named_tuples(children, max_size),
    )


def trees(*, max_leaves: int = 12, max_size: int = 4) -> st.SearchStrategy[Any]:
    """Whole trees: any leaf, or lists, tuples, dicts and named tuples of trees.

    Size and depth are bounded by ``max_leaves`` (and each container by
    ``max_size`` children), far inside the spec's limits.
    """
    return st.recursive(leaves(), lambda children: _containers(children, max_size), max_leaves=max_leaves)


def component_names() -> st.SearchStrategy[str]:
    """Valid component names (one path segment, R-CMP-1); lowercase, so no two fold to the same name."""
    return st.from_regex(r"[a-z_][a-z0-9._-]{0,15}", fullmatch=True).filter(_valid_name)


_CHECKPOINT_KEYWORDS = frozenset({"format", "strict", "save_components", "sha256", "durable"})


def _valid_name(name: str) -> bool:
    try:
        check_segment(name)
    except Exception:
        return False
    # Names that are also keyword arguments of Checkpoint() cannot be passed as ``**components``.
    return name not in _CHECKPOINT_KEYWORDS


def _json_values() -> st.SearchStrategy[Any]:
    scalars_ = st.one_of(st.none(), st.booleans(), st.integers(-(2**53) + 1, 2**53 - 1),
                         st.floats(allow_nan=False, allow_infinity=False), texts())
    return st.recursive(scalars_, lambda c: st.one_of(st.lists(c, max_size=4),
                                                      st.dictionaries(texts(max_size=8), c, max_size=4)),
                        max_leaves=8)


def checkpoint_values(*, max_components: int = 4) -> st.SearchStrategy[dict[str, Any]]:
    """Components for a :class:`~opencheckpoint.Checkpoint`: name -> tree or JSON value.

    JSON-shaped dicts and lists are saved as ``json`` components, everything
    else as ``tree`` components (automatic adapter choice); either way
    :func:`~opencheckpoint.read_component` must return an equal value.
    """
    return st.dictionaries(component_names(), st.one_of(trees(), _json_values()), max_size=max_components)
