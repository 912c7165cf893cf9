"""Framework hooks of the tree codec, loaded lazily by module name.

Writing: :func:`convert_leaf` hands objects the core does not know (torch
tensors, JAX arrays, typed keys, framework containers) to the adapter
module of their framework, chosen by the object's top-level module name.

Reading: :func:`get_framework` returns the object that turns validated
NumPy views into that framework's arrays. A missing framework raises with
the install hint.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

import numpy as np

from ..format import frameworks as registry
from ..format.dtypes import numpy_dtype
from ..format.errors import CheckpointError
from ..tree.encode import NOT_HANDLED
from ..tree.nodes import PRNGKeyValue


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


def convert_leaf(value: Any) -> Any:
    """Replacement value for a framework object (or an RNG object), or ``NOT_HANDLED``.

    The framework is found through the MRO, so user subclasses of framework
    classes (an ``nnx.Module`` defined in user code) reach their adapter.
    """
    entry = registry.for_type(type(value))
    if entry is not None:
        return importlib.import_module(entry.module).to_tree_value(value)
    from . import numpy_rng

    if numpy_rng.is_random_state(value):
        return numpy_rng.to_tree_value(value)
    return NOT_HANDLED


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
