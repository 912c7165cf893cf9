"""NumPy ``Generator`` / ``BitGenerator``, legacy ``RandomState`` and ``random.Random`` as tree values.

Each generator's state is a plain tree (dicts, ints, uint32/uint64 arrays):

* ``Generator`` / ``BitGenerator``: ``bit_generator.state`` as NumPy gives it
  (PCG64's 128-bit ``state``/``inc`` are Python ints beyond 64 bits, stored
  as big-int nodes; MT19937 ``key`` is a uint32[624] array; Philox and SFC64
  hold uint64 arrays);
* ``RandomState``: ``get_state(legacy=False)`` (MT19937 plus the cached Gaussian);
* ``random.Random``: ``{"version", "internal": uint32[625], "gauss_next"}`` from
  ``getstate()`` (624 Mersenne-Twister words and the position).

The adapters restore in place, so ``Checkpoint(rng=np.random.default_rng(0))``
continues the same stream after :meth:`~opencheckpoint.Checkpoint.load`. A
bit generator is only ever set from a state of its own algorithm; the name
in a file is compared with the live object, never used to look anything up.

>>> import numpy as np, tempfile, os
>>> from opencheckpoint import Checkpoint
>>> rng = np.random.default_rng(0)
>>> path = Checkpoint(rng=rng).save(os.path.join(tempfile.mkdtemp(), "c"))
>>> expected = rng.random(3)
>>> _ = Checkpoint(rng=rng).load(path)
>>> bool((rng.random(3) == expected).all())
True
"""

from __future__ import annotations

import copy
import functools
import random
from typing import TYPE_CHECKING, Any

import numpy as np

from ..format.errors import IncompatibleComponent
from .protocol import Adapter, PreparedRestore

if TYPE_CHECKING:  # annotations only: component_io imports the framework hooks, which import this module
    from .component_io import ComponentReader, ComponentWriter

#: Mersenne-Twister words plus the position, as ``random.Random.getstate()`` gives them.
_PY_STATE_WORDS = 625


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
    from ..tree.encode import NOT_HANDLED

    return NOT_HANDLED


def _stored_dict(reader: ComponentReader) -> dict[str, Any]:
    stored = reader.tree("numpy")
    if not isinstance(stored, dict):
        raise IncompatibleComponent(f"stored value is a {type(stored).__name__}, not a generator state")
    return stored


def set_generator_state(value: np.random.Generator | np.random.BitGenerator, state: dict[str, Any]) -> None:
    """Set a generator's state from a tree; the algorithm must match the live generator's."""
    bit_generator = value.bit_generator if isinstance(value, np.random.Generator) else value
    live = type(bit_generator).__name__
    stored = state.get("bit_generator")
    if stored != live:
        raise IncompatibleComponent(f"stored {stored!r} state does not fit a {live} bit generator")
    try:
        bit_generator.state = state
    except (TypeError, ValueError, KeyError) as exc:
        raise IncompatibleComponent(f"{live} rejected the stored state: {exc}") from None


def set_random_state_state(value: np.random.RandomState, state: dict[str, Any]) -> None:
    """Set a legacy ``RandomState`` from a tree written by :func:`random_state_state`."""
    if state.get("bit_generator") != "MT19937":
        raise IncompatibleComponent(f"stored {state.get('bit_generator')!r} state does not fit a RandomState")
    try:
        value.set_state(state)
    except (TypeError, ValueError, KeyError) as exc:
        raise IncompatibleComponent(f"RandomState rejected the stored state: {exc}") from None


def set_python_random_state(value: random.Random, state: dict[str, Any]) -> None:
    """Set a ``random.Random`` from a tree written by :func:`python_random_state`."""
    internal = state.get("internal")
    gauss_next = state.get("gauss_next")
    if (not isinstance(internal, np.ndarray) or internal.dtype != np.uint32 or internal.shape != (_PY_STATE_WORDS,)
            or type(state.get("version")) is not int or not (gauss_next is None or type(gauss_next) is float)):
        raise IncompatibleComponent("stored value is not a random.Random state "
                                    "(version int, internal uint32[625], gauss_next float or None)")
    try:
        value.setstate((state["version"], tuple(int(word) for word in internal), gauss_next))
    except (TypeError, ValueError) as exc:
        raise IncompatibleComponent(f"random.Random rejected the stored state: {exc}") from None


class GeneratorAdapter(Adapter):
    """A NumPy ``Generator`` or ``BitGenerator``, restored in place."""

    kind = "tree"

    def save(self, value: Any, writer: ComponentWriter) -> None:
        writer.hints["class"] = f"numpy.random.{type(value).__name__}"
        writer.write_tree(generator_state(value))

    def prepare(self, value: Any, reader: ComponentReader, *, strict: str) -> PreparedRestore:
        state = _stored_dict(reader)
        set_generator_state(copy.deepcopy(value), state)  # a scratch copy takes the checks; value is untouched
        return PreparedRestore(functools.partial(set_generator_state, value, state))


class RandomStateAdapter(Adapter):
    """A legacy NumPy ``RandomState``, restored in place."""

    kind = "tree"

    def save(self, value: Any, writer: ComponentWriter) -> None:
        writer.hints["class"] = "numpy.random.RandomState"
        writer.write_tree(random_state_state(value))

    def prepare(self, value: Any, reader: ComponentReader, *, strict: str) -> PreparedRestore:
        state = _stored_dict(reader)
        set_random_state_state(np.random.RandomState(), state)  # checked on a scratch generator
        return PreparedRestore(functools.partial(set_random_state_state, value, state))


class PythonRandomAdapter(Adapter):
    """A ``random.Random`` instance, restored in place."""

    kind = "tree"

    def save(self, value: Any, writer: ComponentWriter) -> None:
        writer.hints["class"] = "random.Random"
        writer.write_tree(python_random_state(value))

    def prepare(self, value: Any, reader: ComponentReader, *, strict: str) -> PreparedRestore:
        state = _stored_dict(reader)
        set_python_random_state(random.Random(), state)  # checked on a scratch generator
        return PreparedRestore(functools.partial(set_python_random_state, value, state))


def adapter_for(value: Any) -> Adapter | None:
    """The adapter for a NumPy or Python random generator, else None."""
    if isinstance(value, (np.random.Generator, np.random.BitGenerator)):
        return GeneratorAdapter()
    if isinstance(value, np.random.RandomState):
        return RandomStateAdapter()
    if isinstance(value, random.Random) and not isinstance(value, random.SystemRandom):
        return PythonRandomAdapter()  # SystemRandom has no state to save
    return None


__all__ = [
    "GeneratorAdapter",
    "PythonRandomAdapter",
    "RandomStateAdapter",
    "adapter_for",
    "generator_state",
    "python_random_state",
    "random_state_state",
    "set_generator_state",
    "set_python_random_state",
    "set_random_state_state",
    "to_tree_value",
]
