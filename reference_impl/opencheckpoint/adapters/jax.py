"""JAX, Flax NNX and optax values in OpenCheckpoint (loaded lazily; ``import opencheckpoint`` never imports JAX).

Writing (:func:`to_tree_value`, called by the tree encoder for objects of
the ``jax``/``jaxlib``/``flax``/``optax`` modules):

* ``jax.Array`` -> a host NumPy array with the exact dtype (bfloat16, float8,
  complex, bool, unsigned, 0-d included);
* typed PRNG keys (dtype ``key<impl>``) -> :class:`PRNGKeyValue` with the
  implementation name (``threefry2x32``, ``rbg``, ``unsafe_rbg``) and the
  ``uint32`` key data; legacy raw ``uint32`` keys stay plain arrays;
* JAX scalar types (``jnp.float32``) -> :class:`DtypeValue`;
* ``nnx.Variable`` -> its value, NNX modules/optimizers -> their state as a
  plain dict (``nnx.to_pure_dict``); ``FrozenDict``/``nnx.State`` -> dict;
  optax states are named tuples and are stored with their fields.

Reading (:data:`FRAMEWORK`, ``framework="jax"``): arrays become ``jax.Array``
with the stored dtype and bits, keys are rebuilt with
``jax.random.wrap_key_data(data, impl=impl)``. ``map_location`` is ``None``
(default device), a ``jax.Device``, a ``jax.sharding.Sharding`` or a platform
name such as ``"cpu"``.

**64-bit dtypes.** With ``jax_enable_x64`` off (JAX's default), JAX silently
truncates int64/uint64/float64/complex128 to 32 bits. Loading such an array
into JAX therefore raises :class:`~opencheckpoint.errors.IncompatibleComponent`
telling you to enable x64 (``jax.config.update("jax_enable_x64", True)``) or to
read with ``framework="numpy"``; bits are never changed silently.

Restoring live objects (:func:`adapter_for`): NNX modules and optimizers are
restored in place through ``nnx.update``; pytrees (dicts, lists, tuples, named
tuples, optax states, registered dataclasses, ``None`` leaves) are rebuilt with
the *target's* tree structure, so tuples and named tuples come back as their
live types; no name read from a file is ever imported. :func:`restore_nnx`
restores into an abstract module built with ``nnx.eval_shape``.

>>> import jax.numpy as jnp, numpy as np
>>> to_tree_value(jnp.arange(3, dtype=jnp.bfloat16)).dtype.name
'bfloat16'
>>> to_tree_value(jax.random.key(0)).impl
'threefry2x32'
>>> FRAMEWORK.array(np.ones(2, np.float32)).dtype.name
'float32'
"""

from __future__ import annotations

import ast
import contextlib
import os
import re
import sys
import warnings
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..casting import Caster, CastPolicy, CastRefused
from ..dtypes import dtype_name, numpy_dtype
from ..errors import CheckpointError, IncompatibleComponent, UnsupportedValue
from ..restore_hints import suggest
from ..restore_plan import Rename, RestorePlan
from ..tree.encode import NOT_HANDLED
from ..tree.nodes import DtypeValue, NamedTupleValue, PRNGKeyValue
from . import jax_sharding, registry
from .base import Adapter, ComponentReader, ComponentWriter, PreparedRestore

#: This module's row of the framework registry.
_ENTRY = registry.by_name("jax")

#: PRNG implementations a key may be stored with (the spec's built-in names).
KEY_IMPLS = ("threefry2x32", "rbg", "unsafe_rbg")
_X64_DTYPES = frozenset({"int64", "uint64", "float64", "complex128"})


def _nnx() -> Any:
    """``flax.nnx`` if Flax is already imported (a Flax object implies it is), else None."""
    return sys.modules.get("flax.nnx")


# -- writing -------------------------------------------------------------------------------
def is_key(value: Any) -> bool:
    """True for typed PRNG key arrays and abstract keys (``ShapeDtypeStruct`` of a key dtype)."""
    dtype = getattr(value, "dtype", None)
    return dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key)  # jax.dtypes does not export it


def key_impl_name(dtype: Any) -> str:
    """The implementation name of a key dtype (``key<fry>`` -> ``threefry2x32``)."""
    impl = getattr(dtype, "_impl", None)
    name = getattr(impl, "name", None)
    if name not in KEY_IMPLS:
        raise UnsupportedValue(f"PRNG key implementation {name or dtype!s} has no OpenCheckpoint name "
                               f"(supported: {', '.join(KEY_IMPLS)})", rule="R-TREE-25")
    return str(name)


def _host_array(value: jax.Array) -> np.ndarray:
    if isinstance(value, jax.core.Tracer):
        raise UnsupportedValue("cannot save a traced value; save outside jit/grad/vmap")
    if not value.is_fully_addressable:
        if value.sharding.is_fully_replicated:  # every process holds all of it: this process's copy
            return np.asarray(value.addressable_data(0))
        raise UnsupportedValue("array is not fully addressable from this process (multi-host); "
                               "gather it or save per process")
    return np.asarray(value)


def to_tree_value(value: Any) -> Any:
    """Tree-vocabulary replacement for a JAX/Flax/optax object, or ``NOT_HANDLED``."""
    if isinstance(value, jax.Array):
        if is_key(value):
            return PRNGKeyValue(key_impl_name(value.dtype), _host_array(jax.random.key_data(value)))
        if not isinstance(value, jax.core.Tracer) and jax_sharding.is_sharded(value):
            return jax_sharding.sharded_value(value)  # shard by shard; format version 2 (tag 10)
        return _host_array(value)
    if isinstance(value, jax.ShapeDtypeStruct):
        raise UnsupportedValue("an abstract ShapeDtypeStruct has no values to save")
    dtype = getattr(value, "dtype", None) if isinstance(value, type) else None
    if isinstance(dtype, np.dtype):
        return DtypeValue(dtype_name(dtype))  # jnp.float32 and friends
    nnx = _nnx()
    if nnx is not None:
        if isinstance(value, nnx.Variable):
            return value.get_value()
        if isinstance(value, nnx.Pytree):
            return nnx.to_pure_dict(nnx.state(value))
    if isinstance(value, Mapping):
        return dict(value.items())
    return NOT_HANDLED


# -- reading -------------------------------------------------------------------------------
def placement(map_location: Any) -> Any:
    """A ``jax.Device`` or ``Sharding`` for ``map_location`` (None: JAX's default device)."""
    if map_location is None or isinstance(map_location, (jax.Device, jax.sharding.Sharding)):
        return map_location
    if isinstance(map_location, str):
        platform, _, index = map_location.partition(":")
        try:
            return jax.devices(platform)[int(index or 0)]
        except (RuntimeError, IndexError, ValueError) as exc:
            raise CheckpointError(f"map_location {map_location!r} names no JAX device: {exc}") from None
    raise TypeError(f"map_location must be None, a jax.Device, a Sharding or a platform name, "
                    f"got {type(map_location).__name__}")


def _check_x64(name: str) -> None:
    # jax defines its options as attributes at runtime; its Config class does not declare them
    if name in _X64_DTYPES and not jax.config.jax_enable_x64:  # type: ignore[attr-defined]
        raise IncompatibleComponent(
            f"a {name} array cannot be loaded into JAX while jax_enable_x64 is off (JAX would truncate it "
            "to 32 bits); enable it with jax.config.update('jax_enable_x64', True) or read with "
            "framework='numpy'")


class JaxFramework:
    """Turns stored leaves into JAX objects with the exact stored dtype and bits."""

    name = "jax"

    def array(self, data: np.ndarray, *, map_location: Any = None) -> jax.Array:
        _check_x64(dtype_name(data.dtype))
        try:
            placed: jax.Array = jax.device_put(data, placement(map_location))  # typed Any by jax
        except ValueError as exc:
            if data.size:
                raise
            # JAX refuses empty arrays whose non-zero dimensions multiply past 2**63 (e.g. [2**61, 3, 0])
            raise IncompatibleComponent(f"JAX cannot represent an empty {data.dtype.name} array of shape "
                                        f"{list(data.shape)} ({exc}); read it with framework='numpy'") from None
        return placed

    def prng_key(self, impl: str, data: np.ndarray, *, map_location: Any = None) -> jax.Array:
        if impl not in KEY_IMPLS:
            raise IncompatibleComponent(f"PRNG key implementation {impl!r} is not one JAX provides")
        key: jax.Array = jax.random.wrap_key_data(jax.device_put(data, placement(map_location)), impl=impl)
        return key

    def dtype(self, name: str) -> np.dtype:
        return jnp.dtype(name)


FRAMEWORK = JaxFramework()


# -- matching a stored tree against a live target --------------------------------------------
def _key_str(entry: Any) -> str:
    tu = jax.tree_util
    if isinstance(entry, tu.DictKey):
        return f"[{entry.key!r}]"
    if isinstance(entry, tu.SequenceKey):
        return f"[{entry.idx}]"
    if isinstance(entry, tu.GetAttrKey):
        return f".{entry.name}"
    if isinstance(entry, tu.FlattenedIndexKey):
        return f"[{entry.key}]"
    return f"[{entry!s}]"


def _stored_index(stored: Any, path: str, leaves: dict[str, Any], nodes: dict[str, Any]) -> None:
    """Index every leaf and every inner node of a decoded tree by its path string."""
    nodes[path] = stored
    if isinstance(stored, NamedTupleValue):
        for name, item in stored._asdict().items():
            _stored_index(item, f"{path}.{name}", leaves, nodes)
    elif isinstance(stored, dict):
        for key, item in stored.items():
            _stored_index(item, f"{path}[{key!r}]", leaves, nodes)
    elif isinstance(stored, (list, tuple)):
        for index, item in enumerate(stored):
            _stored_index(item, f"{path}[{index}]", leaves, nodes)
    elif stored is not None:
        leaves[path] = stored


def _describe(value: Any) -> str:
    if isinstance(value, PRNGKeyValue):
        return f"key<{value.impl}>{list(value.data.shape)}"
    if isinstance(value, (np.ndarray, np.generic, jax.Array, jax.ShapeDtypeStruct)):
        dtype = value.dtype
        name = f"key<{key_impl_name(dtype)}>" if is_key(value) else str(dtype)
        return f"{name}{list(value.shape)}"
    return type(value).__name__


def _weak(array: jax.Array) -> jax.Array:
    """Keep JAX's weak type (it changes type promotion, so it changes results)."""
    from jax._src.lax.lax import _convert_element_type  # no public way to set weak_type

    weak: jax.Array = _convert_element_type(array, array.dtype, weak_type=True)  # untyped private helper
    return weak


class _Mismatch(Exception):
    pass


class TreeMatcher:
    """Restores a stored tree into the structure of a live target, checking every leaf first.

    :meth:`match` computes the restored value without touching the target;
    in-place updates of NNX objects inside it are queued and run by
    :meth:`apply`, after the caller decided the problems are acceptable.
    """

    def __init__(self, map_location: Any = None, caster: Caster | None = None, component: str = "",
                 verify: bool = True) -> None:
        self.map_location = map_location
        self.verify = verify  # for stored leaves that are lazy handles (a sharded target reads regions)
        self.caster = caster or Caster()  # cast= of the load: dtype conversions allowed and recorded
        self.component = component
        self.dtype_only: list[tuple[str, str]] = []  # (stored, target) dtypes of same-shape mismatches (hints)
        self.missing: list[str] = []
        self.unexpected: list[str] = []
        self.wrong: list[str] = []
        self.unfilled: list[str] = []
        self._updates: list[Callable[[], None]] = []

    @property
    def problems(self) -> list[str]:
        out = [f"missing from the checkpoint: {', '.join(self.missing)}"] if self.missing else []
        if self.unexpected:
            out.append(f"not in the target: {', '.join(self.unexpected)}")
        out += self.wrong
        return out

    def match(self, target: Any, stored: Any, prefix: str = "") -> Any:
        leaves: dict[str, Any] = {}
        nodes: dict[str, Any] = {}
        _stored_index(stored, prefix, leaves, nodes)
        used: set[str] = set()
        nnx = _nnx()
        special = (nnx.Pytree, nnx.Variable) if nnx is not None else ()

        flat, treedef = jax.tree_util.tree_flatten_with_path(
            target, is_leaf=lambda x: bool(special) and isinstance(x, special))
        restored: list[Any] = []
        for key_path, leaf in flat:
            path = prefix + "".join(_key_str(entry) for entry in key_path)
            if special and isinstance(leaf, nnx.Pytree):
                restored.append(self._graph_node(leaf, nodes.get(path), path, leaves, used))
                continue
            if special and isinstance(leaf, nnx.Variable):
                current = leaf.get_value()
                new = self._leaf(current, leaves, used, path)
                if new is not current:
                    self._updates.append(partial(leaf.set_value, new))  # this variable and value, bound now
                restored.append(leaf)
                continue
            restored.append(self._leaf(leaf, leaves, used, path))
        self.unexpected += [p for p in leaves if p not in used]
        return jax.tree_util.tree_unflatten(treedef, restored)

    def _graph_node(self, node: Any, stored: Any, path: str, leaves: dict[str, Any], used: set[str]) -> Any:
        nnx = _nnx()
        state = nnx.state(node)
        sub = TreeMatcher(self.map_location, self.caster, self.component, self.verify)
        pure = sub.match(nnx.to_pure_dict(state), stored if stored is not None else {}, path)
        self.missing += sub.missing
        self.wrong += sub.wrong
        self.unfilled += sub.unfilled
        self.dtype_only += sub.dtype_only
        used.update(p for p in leaves if p == path or p.startswith((path + "[", path + ".")))
        self.unexpected += sub.unexpected

        def update() -> None:
            nnx.replace_by_pure_dict(state, pure)
            nnx.update(node, state)

        self._updates.append(update)
        return node

    def _leaf(self, target: Any, leaves: dict[str, Any], used: set[str], path: str) -> Any:
        if path not in leaves:
            self.missing.append(path)
            return self._keep(target, path)
        used.add(path)
        try:
            return self._convert(target, leaves[path], path)
        except _Mismatch as exc:
            self.wrong.append(f"{path}: {exc}")
            return self._keep(target, path)

    def _keep(self, target: Any, path: str) -> Any:
        if isinstance(target, jax.ShapeDtypeStruct):
            self.unfilled.append(path)
        return target

    def _convert(self, target: Any, stored: Any, path: str) -> Any:
        if jax_sharding.is_handle(stored):
            placed = self._assemble(target, stored)
            if placed is not None:
                return placed
            stored = jax_sharding.host_copy(stored.read(verify=self.verify))  # then as an eager read
        if isinstance(target, (jax.Array, jax.ShapeDtypeStruct)) and is_key(target):
            impl = key_impl_name(target.dtype)
            if not isinstance(stored, PRNGKeyValue):
                raise _Mismatch(f"stored {_describe(stored)} is not a PRNG key; target is {_describe(target)}")
            if stored.impl != impl or tuple(stored.data.shape[: len(target.shape)]) != tuple(target.shape):
                raise _Mismatch(f"stored {_describe(stored)} does not fit {_describe(target)}")
            key = FRAMEWORK.prng_key(stored.impl, jax_sharding.host_copy(np.asarray(stored.data)),
                                    map_location=self._where(target))
            if key.shape != target.shape:
                raise _Mismatch(f"stored {_describe(stored)} does not fit {_describe(target)}")
            return key
        if isinstance(target, (jax.Array, jax.ShapeDtypeStruct, np.ndarray, np.generic)):
            if not isinstance(stored, (np.ndarray, np.generic)) or isinstance(stored, PRNGKeyValue):
                raise _Mismatch(f"stored {_describe(stored)} does not fit {_describe(target)}")
            if stored.shape != target.shape:
                raise _Mismatch(f"stored {_describe(stored)} does not fit {_describe(target)}")
            if stored.dtype != target.dtype:
                stored = self._cast(stored, target, path)
            if isinstance(target, np.generic):
                return stored if isinstance(stored, np.generic) else stored[()]
            if isinstance(target, np.ndarray):
                return np.array(stored)
            try:
                array = FRAMEWORK.array(np.asarray(stored), map_location=self._where(target))
            except IncompatibleComponent as exc:
                raise _Mismatch(exc.message) from None
            return _weak(array) if getattr(target, "weak_type", False) else array
        if type(stored) is not type(target):
            raise _Mismatch(f"stored {_describe(stored)} does not fit {_describe(target)}")
        return stored

    def _cast(self, stored: Any, target: Any, path: str) -> Any:
        """``stored`` converted to the target's dtype under the load's ``cast=`` policy (recorded), or a mismatch."""
        refusal = ""
        if self.caster.enabled:
            try:
                return self.caster.cast(stored, np.dtype(target.dtype), _dotted(path), self.component)
            except CastRefused as exc:
                refusal = f": {exc}"
            except CheckpointError as exc:  # a dtype outside the format's table
                refusal = f": {exc.message}"
        with contextlib.suppress(CheckpointError):  # a dtype outside the table: no cast= hint for it
            self.dtype_only.append((dtype_name(np.dtype(stored.dtype)), dtype_name(np.dtype(target.dtype))))
        raise _Mismatch(f"stored {_describe(stored)} does not fit {_describe(target)}{refusal}")

    def _assemble(self, target: Any, handle: Any) -> jax.Array | None:
        """``target``'s sharding built block by block from a stored handle, when it fits as stored (else None:
        a mismatch, a cast or a single-device target go through the full read)."""
        sharding = jax_sharding.target_sharding(target) if self.map_location is None else None
        if sharding is None or is_key(target) or not isinstance(target, (jax.Array, jax.ShapeDtypeStruct)):
            return None
        if tuple(handle.shape) != tuple(target.shape) or numpy_dtype(handle.dtype) != np.dtype(target.dtype):
            return None
        _check_x64(handle.dtype)
        array = jax_sharding.assemble(handle, sharding, verify=self.verify)
        return _weak(array) if getattr(target, "weak_type", False) else array

    def _where(self, target: Any) -> Any:
        if self.map_location is not None:
            return placement(self.map_location)
        return getattr(target, "sharding", None)

    def apply(self) -> None:
        """Run the queued in-place updates of NNX objects."""
        for update in self._updates:
            update()
        self._updates.clear()


def _settle(matcher: TreeMatcher, strict: str, what: str) -> None:
    """Raise or warn about problems according to ``strict`` (before anything is touched)."""
    problems = matcher.problems
    hint = suggest([_dotted(p) for p in matcher.missing], [_dotted(p) for p in matcher.unexpected],
                   matcher.dtype_only)
    if matcher.unfilled:
        raise IncompatibleComponent(f"{what}: abstract target leaves left without a value: "
                                    f"{', '.join(matcher.unfilled)}; " + "; ".join(problems) + hint)
    if not problems:
        return
    message = f"{what}: " + "; ".join(problems) + hint
    if strict == "error":
        raise IncompatibleComponent(message)
    if strict == "warn":
        warnings.warn(f"loaded the matching part only; {message}", stacklevel=4)


_PATH_STEP = re.compile(r"\[('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^\]]*)\]|\.([^.\[]+)")


def _dotted(path: str) -> str:
    """A matcher path (``['encoder'][0].mu``) as the dotted key path ``rename=`` sees (``encoder.0.mu``)."""
    parts = []
    for match in _PATH_STEP.finditer(path):
        item, name = match.groups()
        if name is not None:
            parts.append(name)
        elif item[:1] in ("'", '"'):
            parts.append(str(ast.literal_eval(item)))
        else:
            parts.append(item)
    return ".".join(parts)


def _holds_optimizer_state(value: Any, depth: int = 4) -> bool:
    """An optax state or NNX optimizer (somewhere near the top): its parameter trees lie below its own fields,
    so ``rename=`` prefixes also match there (``opt_state.0.mu.<params>``)."""
    nnx = _nnx()
    if nnx is not None and isinstance(value, getattr(nnx, "Optimizer", ())):
        return True
    if type(value).__module__.split(".", 1)[0] == "optax":
        return True
    if depth and isinstance(value, (list, tuple, dict)):
        items = value.values() if isinstance(value, dict) else value
        return any(_holds_optimizer_state(item, depth - 1) for item in items)
    return False


def _matcher(reader: ComponentReader, value: Any) -> tuple[TreeMatcher, Any]:
    """A matcher with the load's ``cast=`` policy, and the stored tree with its ``rename=``/``subtree=`` applied.

    A target holding sharded arrays gets the stored tree as lazy handles: each device then reads only its block.
    """
    embedded = _holds_optimizer_state(value)
    if reader.map_location is None and jax_sharding.wants_regions(value):
        stored = reader.plan.apply(jax_sharding.lazy_tree(reader.reader, reader.name), reader.name, embedded=embedded)
    else:
        stored = reader.tree("numpy", embedded=embedded)
    return TreeMatcher(reader.map_location, reader.plan.caster, reader.name, reader.verify), stored


# -- adapters ------------------------------------------------------------------------------
def storable(value: Any) -> Any:
    """``value`` with NNX objects as state dicts and registered dataclasses as named records.

    Custom pytree nodes with named children (``flax.struct.dataclass``,
    ``jax.tree_util.register_dataclass``) become named-tuple nodes whose
    type name is informational only.
    """
    nnx = _nnx()
    if nnx is not None:
        if isinstance(value, nnx.Pytree):
            return nnx.to_pure_dict(nnx.state(value))
        if isinstance(value, nnx.Variable):
            return storable(value.get_value())
    if value is None or isinstance(value, (jax.Array, np.ndarray, np.generic, str, bytes, int, float, complex)):
        return value
    if isinstance(value, NamedTupleValue):  # a decoded one (its fields are per instance): type name kept
        return NamedTupleValue(value.type_name, {name: storable(item) for name, item in value._asdict().items()})
    fields = getattr(type(value), "_fields", None) if isinstance(value, tuple) else None
    if isinstance(fields, tuple):
        return NamedTupleValue(f"{type(value).__module__}.{type(value).__qualname__}",
                               {name: storable(item) for name, item in zip(fields, value, strict=True)})
    if isinstance(value, Mapping):
        return {key: storable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [storable(item) for item in value]
    if isinstance(value, tuple):
        return tuple(storable(item) for item in value)
    children, _ = jax.tree_util.tree_flatten_with_path(value, is_leaf=lambda x: x is not value)
    if len(children) == 1 and children[0][0] == () and children[0][1] is value:
        return value  # a leaf the encoder may know
    if all(len(p) == 1 and isinstance(p[0], jax.tree_util.GetAttrKey) for p, _ in children):
        return NamedTupleValue(f"{type(value).__module__}.{type(value).__qualname__}",
                               {p[0].name: storable(child) for p, child in children})
    return tuple(storable(child) for _, child in children)


class PytreeAdapter(Adapter):
    """A JAX pytree (arrays, keys, dicts, lists, tuples, named tuples, optax states, NNX objects).

    Loading returns a new pytree with the target's structure; dicts and lists
    are also refreshed in place, NNX objects inside are updated in place.
    """

    kind = "tree"

    def save(self, value: Any, writer: ComponentWriter) -> None:
        writer.hints["framework"] = "jax"
        writer.hints["class"] = f"{type(value).__module__}.{type(value).__qualname__}"
        writer.write_tree(storable(value))

    def prepare(self, value: Any, reader: ComponentReader, *, strict: str) -> PreparedRestore:
        matcher, stored = _matcher(reader, value)
        restored = matcher.match(value, stored)
        _settle(matcher, strict, reader.name)

        def apply() -> Any:
            matcher.apply()
            if isinstance(value, dict) and isinstance(restored, dict):
                value.clear()
                value.update(restored)
            elif isinstance(value, list) and isinstance(restored, list):
                value[:] = restored
            return restored

        return PreparedRestore(apply)


class NnxAdapter(Adapter):
    """An NNX module, optimizer or ``Rngs``: its ``nnx.state`` (every Variable type), updated in place."""

    kind = "tree"

    def save(self, value: Any, writer: ComponentWriter) -> None:
        nnx = _nnx()
        writer.hints["framework"] = "jax"
        writer.hints["class"] = f"{type(value).__module__}.{type(value).__qualname__}"
        writer.write_tree(nnx.to_pure_dict(nnx.state(value)))

    def prepare(self, value: Any, reader: ComponentReader, *, strict: str) -> PreparedRestore:
        matcher, stored = _matcher(reader, value)
        matcher.match(value, stored)
        try:
            _settle(matcher, strict, reader.name)
        except IncompatibleComponent as exc:
            raise IncompatibleComponent(exc.message + _torch_hint(reader)) from None
        return PreparedRestore(matcher.apply)


def _torch_hint(reader: ComponentReader) -> str:
    """Point a torch-saved module's state at the interchange helpers (layouts and names differ from NNX)."""
    hints = reader.record.hints or {}
    if not str(hints.get("class", "")).startswith("torch."):
        return ""
    return (f" (component {reader.name!r} was saved from a torch {hints['class']}: torch and NNX name and lay out "
            "parameters differently; read it with read_component, convert with "
            "opencheckpoint.interchange.torch_state_to_nnx(state, mapping) and apply nnx.replace_by_pure_dict; "
            "see the PyTorch and JAX interchange page of the docs)")


class NnxStateAdapter(Adapter):
    """An ``nnx.State``: stored as a plain dict, restored in place with ``nnx.replace_by_pure_dict``."""

    kind = "tree"

    def save(self, value: Any, writer: ComponentWriter) -> None:
        writer.hints["framework"] = "jax"
        writer.write_tree(_nnx().to_pure_dict(value))

    def prepare(self, value: Any, reader: ComponentReader, *, strict: str) -> PreparedRestore:
        nnx = _nnx()
        matcher, stored = _matcher(reader, value)
        pure = matcher.match(nnx.to_pure_dict(value), stored)
        _settle(matcher, strict, reader.name)
        return PreparedRestore(partial(nnx.replace_by_pure_dict, value, pure))


def _has_jax_leaf(value: Any) -> bool:
    nnx = _nnx()
    special = (nnx.Pytree, nnx.Variable) if nnx is not None else ()
    leaves = jax.tree_util.tree_leaves(value, is_leaf=lambda x: bool(special) and isinstance(x, special))
    return any(isinstance(leaf, (jax.Array, jax.ShapeDtypeStruct, *special)) for leaf in leaves)  # abstract too


def adapter_for(value: Any) -> Adapter | None:
    """The adapter for a JAX/Flax/optax value (or a container holding JAX arrays), else None."""
    nnx = _nnx()
    if nnx is not None:
        if isinstance(value, nnx.Pytree):
            return NnxAdapter()
        if isinstance(value, nnx.State):
            return NnxStateAdapter()
    if registry.for_module(type(value).__module__) is _ENTRY or _has_jax_leaf(value) or _is_registered_dataclass(value):
        return PytreeAdapter()
    return None


def _is_registered_dataclass(value: Any) -> bool:
    """A dataclass registered as a pytree node (``flax.struct.dataclass``, ``jax.tree_util.register_dataclass``)."""
    import dataclasses

    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return False
    leaves = jax.tree_util.tree_leaves(value, is_leaf=lambda x: x is not value)
    return not (len(leaves) == 1 and leaves[0] is value)


def restore_nnx(
    path: str | os.PathLike[str],
    name: str,
    target: Any,
    *,
    strict: str = "error",
    map_location: Any = None,
    verify: bool = True,
    rename: Rename | None = None,
    cast: CastPolicy = None,
    subtree: str | None = None,
) -> Any:
    """Build a concrete NNX object from a checkpoint and an abstract (or concrete) target.

    ``rename``, ``cast`` and ``subtree`` are those of :meth:`Checkpoint.load
    <opencheckpoint.Checkpoint.load>` (restoring into a changed model).

    ``target`` is a module from ``nnx.eval_shape`` (or any module), or a
    ``(graphdef, state)`` pair from ``nnx.split``. Every leaf must be in the
    checkpoint: an abstract leaf has no value to fall back to.

    >>> import tempfile, os
    >>> from flax import nnx
    >>> from opencheckpoint import Checkpoint
    >>> path = os.path.join(tempfile.mkdtemp(), "ckpt")
    >>> _ = Checkpoint(model=nnx.Linear(2, 3, rngs=nnx.Rngs(0))).save(path)
    >>> abstract = nnx.eval_shape(lambda: nnx.Linear(2, 3, rngs=nnx.Rngs(1)))
    >>> restore_nnx(path, "model", abstract).kernel.shape
    (2, 3)
    """
    from flax import nnx

    from ..reader import CheckpointReader

    graphdef, state = target if isinstance(target, tuple) else nnx.split(target)
    plan = RestorePlan(rename, subtree, cast)
    matcher = TreeMatcher(map_location, plan.caster, name, verify)
    regions = map_location is None and jax_sharding.wants_regions(state)  # sharded target: each device its block
    try:
        with CheckpointReader(path) as reader:
            stored = (jax_sharding.lazy_tree(reader, name) if regions
                      else reader.read(name, framework="numpy", verify=verify))
            pure = matcher.match(nnx.to_pure_dict(state), plan.apply(stored, name))
        _settle(matcher, strict, name)
    except CheckpointError as exc:
        raise exc.at(file=str(path), field=f"components.{name}") from None
    nnx.replace_by_pure_dict(state, pure)
    return nnx.merge(graphdef, state)


__all__ = [
    "FRAMEWORK",
    "KEY_IMPLS",
    "JaxFramework",
    "NnxAdapter",
    "NnxStateAdapter",
    "PytreeAdapter",
    "TreeMatcher",
    "adapter_for",
    "is_key",
    "key_impl_name",
    "placement",
    "restore_nnx",
    "storable",
    "to_tree_value",
]
