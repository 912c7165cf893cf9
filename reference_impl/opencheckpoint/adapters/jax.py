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
into JAX therefore raises :class:`~opencheckpoint.format.errors.IncompatibleComponent`
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

import os
from collections.abc import Mapping
from functools import partial
from typing import Any

import jax
import numpy as np

from ..format import frameworks as registry
from ..format.errors import CheckpointError, IncompatibleComponent
from ..read.casting import CastPolicy
from ..read.restore_plan import Rename, RestorePlan, check_renames
from ..sharding.agreement import agreement
from ..tree.nodes import NamedTupleValue
from . import flax_struct, jax_sharding
from .collectives import DEFAULT_TIMEOUT, load_collective
from .component_io import ComponentReader, ComponentWriter
from .jax_matcher import TreeMatcher, _key_str, _matcher, _settle
from .jax_values import FRAMEWORK, KEY_IMPLS, JaxFramework, _nnx, is_key, key_impl_name, placement, to_tree_value
from .protocol import Adapter, PreparedRestore

#: This module's row of the framework registry.
_ENTRY = registry.by_name("jax")


# -- adapters ------------------------------------------------------------------------------
def storable(value: Any) -> Any:
    """``value`` with NNX objects as state dicts and registered dataclasses as named records.

    Custom pytree nodes with named children (``flax.struct.dataclass``,
    ``jax.tree_util.register_dataclass``) become named-tuple nodes whose
    type name is informational only, static fields included (:mod:`.flax_struct`).
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
        return flax_struct.record(value, {p[0].name: storable(child) for p, child in children})  # statics too
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
        stored = flax_struct.split_static(value, stored, _key_str, matcher.wrong, matcher.missing)
        restored = matcher.match(value, stored)
        _settle(matcher, strict, reader.name, reader.not_restored)

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
            _settle(matcher, strict, reader.name, reader.not_restored)
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
            "opencheckpoint.tools.interchange.torch_state_to_nnx(state, mapping) and apply nnx.replace_by_pure_dict; "
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
        _settle(matcher, strict, reader.name, reader.not_restored)
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

    from ..read.reader import CheckpointReader

    graphdef, state = target if isinstance(target, tuple) else nnx.split(target)
    plan = RestorePlan(rename, subtree, cast)
    matcher = TreeMatcher(map_location, plan.caster, name, verify)
    regions = map_location is None and jax_sharding.wants_regions(state)  # sharded target: each device its block
    # A state sharded over several processes: every process reads its blocks, then they agree (as Checkpoint.load)
    with agreement(load_collective(None, DEFAULT_TIMEOUT, [state])) as passed:
        try:
            with CheckpointReader(path) as reader:
                stored = (jax_sharding.lazy_tree(reader, name) if regions
                          else reader.read(name, framework="numpy", verify=verify))
                pure = matcher.match(nnx.to_pure_dict(state), plan.apply(stored, name))
                check_renames([(name, plan)])
                manifest = reader.manifest
            _settle(matcher, strict, name)
        except CheckpointError as exc:
            raise exc.at(file=str(path), field=f"components.{name}") from None
        passed({"checkpoint": [manifest.get("checkpoint_id"), manifest.get("manifest_crc32c")], "component": name,
                "strict": strict, "verify": verify, "subtree": subtree, "rename": rename is not None})
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
