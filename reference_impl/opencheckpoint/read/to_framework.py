"""Framework conversion: verified NumPy arrays of a decoded tree -> one framework's objects.

The last stage of a read and the only one that knows frameworks exist. The
format core (opening, validation steps, the array read engine) hands over
NumPy arrays; this module gives them to the framework named by the caller,
found through :func:`opencheckpoint.adapters.frameworks.get_framework`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..adapters.frameworks import Framework, get_framework
from ..tree.decode import DecodedTree, materialize
from ..tree.nodes import ArrayRef, DtypeValue, NamedTupleValue, PRNGKeyValue, ShardedArrayRef


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

    return materialize(decoded.root, leaf) if decoded.has_placeholders else decoded.root


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
