"""The rule table of the tree payload (spec §8, §10, §14): rules both the reader and the writer check.

Each function is the only place its rule is checked and returns why a value
breaks it, or None. The exact parser (:mod:`opencheckpoint.tree.exact`)
reports a violation with the rule's own class; the writer
(:mod:`opencheckpoint.tree.encode`, the adapters) refuses the same value
before writing it, with ``reported_as=`` its refusal class. The table names
no file: a tree component's reader adds ``tree.msgpack``
(:meth:`CheckpointError.at <opencheckpoint.format.errors.CheckpointError.at>`).
On the hot paths of the parser the caller tests the bound inline and
dispatches only when it is crossed, so a valid node costs no call.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from ..format.errors import ArrayLayoutError, IntegrityError, LimitExceeded, TreeError, UnknownDtype, UnsupportedValue
from ..format.limits import ARRAY_MAX_NDIM, TREE_MAX_BIG_INT_BYTES, TREE_MAX_DEPTH, TREE_MAX_NODES
from . import RuleTable

TREE = RuleTable(version=1, file=None)
rule = TREE.rule

# Rules whose facts only their raise site has (the exact parser's current byte, an array node's extent,
# the bytes just read): declared with their class; the site reports them with TREE.error.
# R-WTR-3 is a writer's refusal (tree/refusals.py): the implementation's own class, not one of Table 16-1.
TREE.declare("R-TREE-1", TreeError)
TREE.declare("R-TREE-2", TreeError)
TREE.declare("R-TREE-3", TreeError)
TREE.declare("R-TREE-11", TreeError)
TREE.declare("R-TREE-13", TreeError)
TREE.declare("R-TREE-14", TreeError)
TREE.declare("R-TREE-15", TreeError)
TREE.declare("R-TREE-16", TreeError)
TREE.declare("R-TREE-17", TreeError)
TREE.declare("R-TREE-18", TreeError)
TREE.declare("R-TREE-19", TreeError)
TREE.declare("R-TREE-20", TreeError)
TREE.declare("R-TREE-21", TreeError)
TREE.declare("R-TREE-22", TreeError)
TREE.declare("R-TREE-23", TreeError)
TREE.declare("R-TREE-24", TreeError)
TREE.declare("R-ARR-1", TreeError)
TREE.declare("R-ARR-2", TreeError)
TREE.declare("R-ARR-3", TreeError)
TREE.declare("R-LIM-12", LimitExceeded)
TREE.declare("R-LIM-14", LimitExceeded)
TREE.declare("R-LIM-15", LimitExceeded)
TREE.declare("R-LIM-16", LimitExceeded)
TREE.declare("R-ARR-5", ArrayLayoutError)
TREE.declare("R-ARR-6", ArrayLayoutError)
TREE.declare("R-ARR-7", ArrayLayoutError)
TREE.declare("R-ARR-8", ArrayLayoutError)
TREE.declare("R-ARR-9", ArrayLayoutError)
TREE.declare("R-ARR-10", ArrayLayoutError)
TREE.declare("R-ARR-11", ArrayLayoutError)
TREE.declare("R-ARR-12", ArrayLayoutError)
TREE.declare("R-ARR-13", ArrayLayoutError)
TREE.declare("R-ARR-14", IntegrityError)
TREE.declare("R-WTR-3", UnsupportedValue)

#: Key data shape of each built-in PRNG implementation (JAX names; R-TREE-25, R-TREE-27, R-TREE-28).
PRNG_IMPL_KEY_SHAPES: Final[dict[str, tuple[int, ...]]] = {
    "threefry2x32": (2,),
    "rbg": (4,),
    "unsafe_rbg": (4,),
}
_PRNG_IMPL = re.compile(r"[a-z][a-z0-9-]*(\.[a-z0-9-]+)+/[a-z0-9_.-]+", re.ASCII)


@rule("R-DT-1", UnknownDtype)
def dtype_in_table(found: object, given: object, *, framework: str | None = None,
                   to_name: bool = True) -> str | None:
    """Every dtype is a name of Table 10-1: ``found`` is what looking ``given`` up in a mapping table gave
    (None: it is not there). A dtype string read (no ``framework``) must be a name; a framework's dtype must
    have one (``to_name``), and a name must have the framework's dtype (not ``to_name``)."""
    if found is not None:
        return None
    if framework is None:
        return f"dtype {given!r} is not in the dtype table"
    if to_name:
        return f"{framework} dtype {given} has no OpenCheckpoint name"
    return f"this {framework} has no {given} dtype"


@rule("R-LIM-10", LimitExceeded)
def tree_depth(depth: int) -> str | None:
    """The tree nests at most 128 arrays and maps (``depth``: that of the container being entered)."""
    return None if depth <= TREE_MAX_DEPTH else f"nested deeper than {TREE_MAX_DEPTH} arrays and maps"


@rule("R-LIM-11", LimitExceeded)
def node_count(objects: int, declared: str = "") -> str | None:
    """At most 10,000,000 msgpack objects, counting those the open headers declare (``declared``: what the
    header being read declares, when that is what crosses the limit)."""
    if objects <= TREE_MAX_NODES:
        return None
    if declared:
        return f"declares {declared}: the document would hold {objects} msgpack objects, limit {TREE_MAX_NODES}"
    return f"more than {TREE_MAX_NODES} msgpack objects"


@rule("R-LIM-13", LimitExceeded)
def array_ndim(ndim: int) -> str | None:
    """An array has at most 64 dimensions."""
    return None if ndim <= ARRAY_MAX_NDIM else f"array has {ndim} dimensions, limit {ARRAY_MAX_NDIM}"


@rule("R-LIM-18", LimitExceeded)
def big_int_magnitude(length: int, fix: str = "") -> str | None:
    """A big int's magnitude is at most 1,024 bytes (as its header declares; ``fix``: what a writer stores
    instead)."""
    if length <= TREE_MAX_BIG_INT_BYTES:
        return None
    return (f"a big int magnitude of {length} bytes: a tree int takes at most {TREE_MAX_BIG_INT_BYTES} bytes "
            f"(two's complement), limit {TREE_MAX_BIG_INT_BYTES}{fix}")


@rule("R-TREE-9", TreeError)
def valid_utf8(failure: UnicodeDecodeError | UnicodeEncodeError | None) -> str | None:
    """Every str is valid UTF-8: ``failure`` is the error decoding (reader) or encoding (writer) it gave."""
    if failure is None:
        return None
    if isinstance(failure, UnicodeDecodeError):
        return "a str is not valid UTF-8"
    return f"string is not valid Unicode: {failure.reason}"


@rule("R-TREE-10", TreeError)
def str_or_int_key(is_str_or_int: bool, key: str, fix: str = "") -> str | None:
    """Every map key is a str or an int (``key`` describes the one found, ``fix`` what a writer can store)."""
    return None if is_str_or_int else f"{key} is not a str or an int{fix}"


@rule("R-TREE-25", TreeError)
def prng_impl(impl: str, namespaced: bool = True) -> str | None:
    """A PRNG key's ``impl`` is a built-in implementation or a namespaced name (``namespaced=False``: a
    framework that knows only the built-in ones)."""
    if impl in PRNG_IMPL_KEY_SHAPES or (namespaced and _PRNG_IMPL.fullmatch(impl)):
        return None
    return f"PRNG impl {impl!r} is not threefry2x32, rbg, unsafe_rbg{' or a namespaced name' if namespaced else ''}"


@rule("R-TREE-26", TreeError)
def prng_key_dtype(dtype: str) -> str | None:
    """A PRNG key's data array has dtype uint32."""
    return None if dtype == "uint32" else f"PRNG key data has dtype {dtype}, not uint32"


def _key_shape(impl: str, shape: Sequence[int]) -> str | None:
    expected = PRNG_IMPL_KEY_SHAPES[impl][0]
    if shape and shape[-1] == expected:
        return None
    return f"{impl} key data shape {list(shape)} must end in {expected}"


@rule("R-TREE-27", TreeError)
def threefry_key_shape(impl: str, shape: Sequence[int]) -> str | None:
    """``threefry2x32`` key data has a non-empty shape ending in 2."""
    return _key_shape(impl, shape) if impl == "threefry2x32" else None


@rule("R-TREE-28", TreeError)
def rbg_key_shape(impl: str, shape: Sequence[int]) -> str | None:
    """``rbg`` and ``unsafe_rbg`` key data has a non-empty shape ending in 4."""
    return _key_shape(impl, shape) if impl in ("rbg", "unsafe_rbg") else None


@rule("R-ARR-4", ArrayLayoutError)
def array_nbytes(shape: Sequence[int], dtype: str, itemsize: int, nbytes: int,
                 representable: bool = True) -> str | None:
    """An array node's ``nbytes`` is the product of its shape times its dtype's itemsize.

    ``representable=False``: a reader's NumPy cannot hold the shape of an empty array whose other dimensions'
    product reaches 2**63 (the node is valid; the reader reports it with ``reported_as=IncompatibleComponent``).
    """
    if not representable:
        return (f"NumPy cannot represent an empty {dtype} array of shape {list(shape)} (the product of its "
                "non-zero dimensions reaches 2**63)")
    expected = itemsize
    for dim in shape:
        expected *= dim
    if nbytes == expected:
        return None
    return f"shape {list(shape)} of {dtype} is {expected} bytes but nbytes is {nbytes}"
