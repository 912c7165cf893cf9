"""The tree codec's write hook, loaded lazily by module name.

:func:`convert_leaf` hands objects the core does not know (torch tensors, JAX
arrays, typed keys, framework containers) to the adapter module of their
framework, chosen by the object's top-level module name; NumPy and Python
random generators nested in a tree become their state trees here (their
adapters, in :mod:`.numpy_rng`, restore them). Reading finds a framework by
name in :mod:`opencheckpoint.read.to_framework`.
"""

from __future__ import annotations

import importlib
import random
from typing import Any

import numpy as np

from ..format import frameworks as registry
from ..tree.encode import NOT_HANDLED

#: Mersenne-Twister words plus the position, as ``random.Random.getstate()`` gives them.
PY_STATE_WORDS = 625


def is_random_state(value: Any) -> bool:
    """NumPy Generator / RandomState / BitGenerator or a Python ``random.Random``."""
    return isinstance(value, (np.random.Generator, np.random.RandomState, np.random.BitGenerator,
                              random.Random))


def generator_state(value: np.random.Generator | np.random.BitGenerator) -> dict[str, Any]:
    """The bit generator state of a ``Generator`` or ``BitGenerator`` (a plain tree)."""
    bit_generator = value.bit_generator if isinstance(value, np.random.Generator) else value
    return dict(bit_generator.state)  # a fresh dict each access already; typed as a Mapping by NumPy


def random_state_state(value: np.random.RandomState) -> dict[str, Any]:
    """The state of a legacy ``RandomState`` (MT19937 key array, position, cached Gaussian)."""
    state: dict[str, Any] = value.get_state(legacy=False)
    return state


def python_random_state(value: random.Random) -> dict[str, Any]:
    """The state of a ``random.Random`` as a tree: version, uint32[625] words, cached Gaussian.

    >>> r = random.Random(1)
    >>> s = python_random_state(r)
    >>> s["version"], s["internal"].shape, s["internal"].dtype.name
    (3, (625,), 'uint32')
    """
    version, internal, gauss_next = value.getstate()
    return {"version": version, "internal": np.array(internal, dtype=np.uint32), "gauss_next": gauss_next}


def to_tree_value(value: Any) -> Any:
    """The state tree of a NumPy or Python random generator (for generators nested in a tree)."""
    if isinstance(value, (np.random.Generator, np.random.BitGenerator)):
        return generator_state(value)
    if isinstance(value, np.random.RandomState):
        return random_state_state(value)
    if isinstance(value, random.Random):
        return python_random_state(value)
    return NOT_HANDLED



def convert_leaf(value: Any) -> Any:
    """Replacement value for a framework object (or an RNG object), or ``NOT_HANDLED``.

    The framework is found through the MRO, so user subclasses of framework
    classes (an ``nnx.Module`` defined in user code) reach their adapter.
    """
    entry = registry.for_type(type(value))
    if entry is not None:
        return importlib.import_module(entry.module).to_tree_value(value)
    if is_random_state(value):
        return to_tree_value(value)
    return NOT_HANDLED
