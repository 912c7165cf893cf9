"""Framework conversion: verified NumPy arrays of a decoded tree -> one framework's objects.

The last stage of a read and the only one that knows frameworks exist. The
format core (opening, validation steps, the array read engine) hands over
NumPy arrays; this module gives them to the framework named by the caller,
found by :func:`get_framework` through the table of frameworks (``format.frameworks``),
which names each framework's adapter module: it is imported by that name, when first asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from ..format import frameworks as registry
from ..format.dtypes import numpy_dtype
from ..format.errors import CheckpointError
from ..tree.decode import DecodedTree, materialize
from ..tree.nodes import ArrayRef, DtypeValue, NamedTupleValue, PRNGKeyValue, ShardedArrayRef


class Framework(Protocol):
    """Turns stored leaves into one framework's objects."""

    name: str

    def array(self, data: np.ndarray, *, map_location: Any = None) -> Any: ...

    def prng_key(self, impl: str, data: np.ndarray, *, map_location: Any = None) -> Any: ...

    def dtype(self, name: str) -> Any: ...


class NumpyFramework:
    """NumPy arrays (ml_dtypes for bfloat16/float8), :class:`PRNGKeyValue` for keys."""

    name = "numpy"

    def array(self, data: np.ndarray, *, map_location: Any = None) -> Any:
        return data

    def prng_key(self, impl: str, data: np.ndarray, *, map_location: Any = None) -> Any:
        return PRNGKeyValue(impl, data)

    def dtype(self, name: str) -> Any:
        return numpy_dtype(name).newbyteorder("=")


NUMPY = NumpyFramework()


def get_framework(name: str) -> Framework:
    """The framework named ``name`` (``numpy`` or a row of :data:`.registry.FRAMEWORKS`)."""
    if name == registry.DEFAULT:
        return NUMPY
    entry = registry.by_name(name)
    if entry is None:
        choices = ", ".join(repr(choice) for choice in registry.names())
        raise ValueError(f"framework must be one of {choices}, got {name!r}")
    try:
        module = importlib.import_module(entry.module)
    except ImportError as exc:
        raise CheckpointError(f"framework {name!r} is not installed ({exc}); {entry.install_hint}") from None
    framework: Framework = module.FRAMEWORK
    return framework


def resolve(framework: str | Framework) -> Framework:
    """The framework object for a name (``numpy``, ``torch``, ``jax``) or the object itself."""
    return get_framework(framework) if isinstance(framework, str) else framework


def numpy_framework() -> Framework:
    """The NumPy framework (arrays stay as they are read)."""
    return get_framework("numpy")


def materialize_read(decoded: DecodedTree, fresh: dict[int, np.ndarray], fw: Framework, map_location: Any) -> Any:
    """The tree with the arrays of :func:`~opencheckpoint.read.arrays.read_arrays` handed to ``fw``.

    Identical extents (one NumPy array in ``fresh``) become one framework object. A sharded
    array node (tag 10) takes its assembled array from ``fresh`` like an array node.
    """
    if getattr(fw, "name", None) == "numpy":
        arrays: dict[int, Any] = fresh
    else:
        converted: dict[int, Any] = {}  # id(numpy array) -> framework array
        arrays = {}
        for ident, array in fresh.items():
            value = converted.get(id(array))
            if value is None or not array.nbytes:
                value = converted[id(array)] = fw.array(array, map_location=map_location)
            arrays[ident] = value

    def leaf(node: Any) -> Any:
        kind = type(node)
        if kind is ArrayRef or kind is ShardedArrayRef:
            return arrays[id(node)]
        if kind is PRNGKeyValue:
            # Key data is never shared with an array object: a copy (keys are a few bytes).
            return fw.prng_key(node.impl, fresh[id(node.data)].copy(), map_location=map_location)
        if kind is DtypeValue:
            return fw.dtype(node.name)
        return node

    return materialize(decoded.root, leaf, arrays) if decoded.has_placeholders else decoded.root


def materialize_views(decoded: DecodedTree, view: Callable[[ArrayRef], np.ndarray], fw: Framework,
                      map_location: Any, sharded: Callable[[ShardedArrayRef], np.ndarray] | None = None) -> Any:
    """The tree with each array node's (verified) view handed to ``fw``; identical extents: one object.

    A sharded array node (tag 10) is no view: ``sharded`` assembles it.
    """
    arrays: dict[tuple[int, int, str, tuple[int, ...]], Any] = {}

    def leaf(node: Any) -> Any:
        if isinstance(node, ArrayRef):
            key = (node.offset, node.nbytes, node.dtype, node.shape)
            if key not in arrays or node.nbytes == 0:
                arrays[key] = fw.array(view(node), map_location=map_location)
            return arrays[key]
        if isinstance(node, PRNGKeyValue):
            return fw.prng_key(node.impl, view(node.data), map_location=map_location)  # type: ignore[arg-type]  # data: an ArrayRef
        if isinstance(node, DtypeValue):
            return fw.dtype(node.name)
        if isinstance(node, ShardedArrayRef) and sharded is not None:
            return fw.array(sharded(node), map_location=map_location)
        return node

    return materialize(decoded.root, leaf) if decoded.has_placeholders else decoded.root


def to_framework(value: Any, fw: Framework, map_location: Any) -> Any:
    """A tree read with NumPy leaves (and possibly migrated, R-VER-5) handed to ``fw``, container by container.

    The read path converts while it materializes (:func:`materialize_read`); this walk serves a tree that
    had to be decoded to NumPy first, because a format migration step works on NumPy leaves.
    """
    from ..format.dtypes import dtype_name

    kind = type(value)
    if kind is dict:
        return {key: to_framework(item, fw, map_location) for key, item in value.items()}
    if kind is list:
        return [to_framework(item, fw, map_location) for item in value]
    if kind is tuple:
        return tuple(to_framework(item, fw, map_location) for item in value)
    if kind is NamedTupleValue:
        return NamedTupleValue(value.type_name, {k: to_framework(v, fw, map_location)
                                                 for k, v in value._asdict().items()})
    if isinstance(value, np.ndarray):
        return fw.array(value, map_location=map_location)
    if kind is PRNGKeyValue:
        return fw.prng_key(value.impl, value.data, map_location=map_location)
    if isinstance(value, np.dtype):
        return fw.dtype(dtype_name(value))
    return value
