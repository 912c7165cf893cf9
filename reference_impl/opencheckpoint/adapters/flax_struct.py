"""Static fields of registered pytree dataclasses (``flax.struct.dataclass``): stored, and checked on load.

A field declared ``struct.field(pytree_node=False)`` (or a ``meta_field`` of
``jax.tree_util.register_dataclass``) is part of the pytree's structure, not a
leaf: JAX never flattens it, so a save that stored only the leaves would let a
load hand back the live object's value silently. Here the writer stores every
field of such a dataclass in its named-tuple node (:func:`record`): leaves as
usual, static values by :func:`static_form`. On load, :func:`split_static`
compares each static value of the live target with the stored one before the
leaves are matched; a difference is a problem of the load like a wrong shape
(``strict="error"`` raises :class:`~opencheckpoint.format.errors.IncompatibleComponent`
naming the field). The live value is the one the restored object keeps: it is
equal to the stored one whenever the load succeeds under ``strict="error"``.

What a static value is stored as:

* ``None``, bools, ints, floats, complex numbers, strings, bytes, NumPy scalars
  and arrays: themselves; dtypes (``jnp.float32``, ``np.dtype``): a dtype node;
  tuples, lists, named tuples and mappings with str or int keys: the same
  containers of stored values.
* anything else (functions such as ``apply_fn``, optax transformations' ``init``
  and ``update``, modules, enum members, other objects) cannot be stored as a
  value and is not code the reader may run: it is stored as a *description*, a
  named tuple of type :data:`DESCRIBED` whose one field names the function or
  class (``flax.linen.module.Module.apply``), and compared by that name.

>>> import jax.numpy as jnp
>>> static_form((2, jnp.float32, "relu", print))
(2, dtype('float32'), 'relu', NamedTupleValue('opencheckpoint.described', description='function builtins.print'))
"""

from __future__ import annotations

import dataclasses
import enum
import sys
from collections.abc import Callable, Mapping
from typing import Any, Final

import jax
import numpy as np

from ..format.dtypes import dtype_name, numpy_dtype
from ..format.errors import CheckpointError
from ..testing.compare import assert_tree_equal
from ..tree.nodes import NamedTupleValue
from ..tree.treepath import segment

#: Type name of the node that describes a static value the tree cannot hold (informational, never imported).
DESCRIBED: Final = "opencheckpoint.described"

#: Containers in a static value deeper than this are described, not stored (the tree allows 128 levels in all).
_MAX_DEPTH: Final = 32
#: dataclass type -> (field names in declaration order, the static ones); None: not a record-like pytree.
_FIELDS: dict[type, tuple[tuple[str, ...], frozenset[str]] | None] = {}


def _fields(value: Any) -> tuple[tuple[str, ...], frozenset[str]] | None:
    """A registered dataclass's field names and static field names (per type, found once)."""
    kind = type(value)
    if kind in _FIELDS:
        return _FIELDS[kind]
    found = None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = tuple(f.name for f in dataclasses.fields(value))
        children, _ = jax.tree_util.tree_flatten_with_path(value, is_leaf=lambda x: x is not value)
        keys = [path[0].name for path, _ in children
                if len(path) == 1 and isinstance(path[0], jax.tree_util.GetAttrKey)]
        if len(keys) == len(children) and set(keys) <= set(names):
            found = (names, frozenset(names) - set(keys))
    _FIELDS[kind] = found
    return found


def static_names(value: Any) -> frozenset[str]:
    """The static fields of a registered dataclass (empty for anything else)."""
    fields = _fields(value)
    return fields[1] if fields is not None else frozenset()


def record(value: Any, children: dict[str, Any]) -> NamedTupleValue:
    """The named-tuple node of a registered dataclass: its leaf ``children`` and its static fields, in field order."""
    kind = type(value)
    fields = _fields(value)
    names = fields[0] if fields is not None else tuple(children)
    body = {name: children[name] if name in children else static_form(getattr(value, name)) for name in names}
    return NamedTupleValue(f"{kind.__module__}.{kind.__qualname__}", body)


def _dtype(value: Any) -> np.dtype | None:
    """The spec dtype a dtype-like value names (``np.dtype``, ``np.float32``, ``jnp.bfloat16``), else None."""
    if isinstance(value, np.dtype):
        dtype = value
    elif isinstance(value, type) and (issubclass(value, np.generic) or isinstance(getattr(value, "dtype", None),
                                                                                  np.dtype)):
        dtype = np.dtype(getattr(value, "dtype", value))
    else:
        return None
    try:
        return numpy_dtype(dtype_name(dtype)).newbyteorder("=")  # native order, as a NumPy reader returns it
    except CheckpointError:
        return None


def static_form(value: Any, depth: int = 0) -> Any:
    """What a static field's value is stored as: the value where the tree holds it exactly, else a description."""
    kind = type(value)
    if value is None or kind in (bool, int, float, complex, str, bytes):
        return value
    if depth >= _MAX_DEPTH:  # a container holding itself, or nested past any real configuration
        return NamedTupleValue(DESCRIBED, {"description": f"{kind.__module__}.{kind.__qualname__} nested deeper "
                                                          f"than {_MAX_DEPTH} levels"})
    dtype = _dtype(value)
    if dtype is not None:
        return dtype
    if kind is np.ndarray or (isinstance(value, np.generic) and _dtype(value.dtype) is not None):
        return value
    if kind is tuple or kind is list:
        return kind(static_form(item, depth + 1) for item in value)
    fields = getattr(kind, "_fields", None)
    if isinstance(value, tuple) and isinstance(fields, tuple):
        items = zip(fields, value, strict=True)
        return NamedTupleValue(f"{kind.__module__}.{kind.__qualname__}",
                               {str(name): static_form(item, depth + 1) for name, item in items})
    if isinstance(value, Mapping) and all(type(key) in (str, int) for key in value):
        return {key: static_form(item, depth + 1) for key, item in value.items()}
    return NamedTupleValue(DESCRIBED, {"description": _description(value)})


def _description(value: Any) -> str:
    """What a static value the tree cannot hold is, by name only (no repr: it may hold addresses)."""
    kind = type(value)
    if isinstance(value, enum.Enum):
        return f"enum member {kind.__module__}.{kind.__qualname__}.{value.name}"
    name = getattr(value, "__qualname__", None)
    if isinstance(name, str) and callable(value):
        what = "class" if isinstance(value, type) else "function"
        return f"{what} {getattr(value, '__module__', None) or '?'}.{name}"
    return f"instance of {kind.__module__}.{kind.__qualname__}"


# -- loading -------------------------------------------------------------------------------------
def split_static(target: Any, stored: Any, key_str: Callable[[Any], str], wrong: list[str],
                 missing: list[str]) -> Any:
    """``stored`` without the static fields of the target's registered dataclasses, which are compared.

    Appends to ``wrong`` a ``path: ...`` problem for each static value that differs from the live one
    and to ``missing`` the path of each static field the checkpoint does not hold (the tree matcher's
    lists: they are settled with its other problems). ``key_str`` renders one JAX key path entry the
    way the matcher does, so the paths agree with its messages.
    """
    statics: dict[str, Any] = {}
    _collect(target, "$", key_str, statics)
    if not statics:
        return stored
    stripped = _strip(stored, "$", statics, wrong, missing)
    for path, live in statics.items():  # a dataclass the stored tree has no node for: its statics are missing too
        if live is not None:
            missing += [f"{path}.{name}" for name in sorted(static_names(live))]
    return stripped


def _collect(node: Any, path: str, key_str: Callable[[Any], str], out: dict[str, Any]) -> None:
    """Every registered dataclass of ``node`` with static fields, by the path the matcher gives it."""
    nnx = sys.modules.get("flax.nnx")
    graph = (nnx.Pytree, nnx.Variable) if nnx is not None else ()

    def stop(x: Any) -> bool:  # NNX objects are leaves of the matcher too: their state is matched apart
        return x is not node and (isinstance(x, graph) or bool(static_names(x)))

    if static_names(node):
        out[path] = node
    flat, _ = jax.tree_util.tree_flatten_with_path(node, is_leaf=stop)
    for key_path, leaf in flat:
        if leaf is not node and static_names(leaf):
            _collect(leaf, path + "".join(key_str(entry) for entry in key_path), key_str, out)


def _strip(stored: Any, path: str, statics: dict[str, Any], wrong: list[str], missing: list[str]) -> Any:
    """A copy of the stored tree whose nodes at the paths of ``statics`` lost their checked static fields."""
    live = statics.get(path)
    if live is not None:
        statics[path] = None  # checked
        stored = _check(live, stored, path, wrong, missing)
    if isinstance(stored, NamedTupleValue):
        return NamedTupleValue(stored.type_name, {name: _strip(item, f"{path}.{name}", statics, wrong, missing)
                                                  for name, item in stored._asdict().items()})
    if isinstance(stored, dict):
        return {key: _strip(item, path + (segment(key) if isinstance(key, (str, int)) else f"[{key!r}]"), statics,
                            wrong, missing) for key, item in stored.items()}
    if isinstance(stored, (list, tuple)):
        return type(stored)(_strip(item, f"{path}[{index}]", statics, wrong, missing)
                            for index, item in enumerate(stored))
    return stored


def _check(live: Any, stored: Any, path: str, wrong: list[str], missing: list[str]) -> Any:
    """Compare the static fields of ``live`` with the ``stored`` node; return the node without them."""
    names = static_names(live)
    held = stored._asdict() if isinstance(stored, NamedTupleValue) else {}
    if not names & held.keys():
        # Checkpoints written before static fields were stored hold none of them: nothing to compare, so
        # the live values stay (as they always did) instead of failing every old checkpoint.
        return stored
    for name in sorted(names):
        where = f"{path}.{name}"
        if name not in held:
            missing.append(where)
            continue
        expected = static_form(getattr(live, name))
        try:
            assert_tree_equal(held[name], expected, where)  # messages read "stored != target"
        except AssertionError as exc:
            inner = f" (first difference at {exc})" if isinstance(expected, (tuple, list, dict)) else ""
            wrong.append(f"{where}: static field (pytree_node=False) differs: the checkpoint holds "
                         f"{_show(held[name])}, the target {_show(expected)}{inner}")
    if not isinstance(stored, NamedTupleValue):
        return stored
    return NamedTupleValue(stored.type_name, {name: item for name, item in held.items() if name not in names})


def _show(value: Any) -> str:
    """A static value for a message: a description as its text, anything else by repr; long ones elided
    in the middle (the end of a qualified name tells two functions apart)."""
    if isinstance(value, NamedTupleValue) and value.type_name == DESCRIBED:
        text = str(value.description)
    else:
        text = repr(value)
    return text if len(text) <= 120 else f"{text[:40]}...{text[-77:]}"


__all__ = ["DESCRIBED", "record", "split_static", "static_form", "static_names"]
