"""JAX values in the tree vocabulary and back: arrays, PRNG keys and dtypes out, the JAX framework in.

Writing (:func:`to_tree_value`, called by the tree encoder for objects of the
``jax``/``jaxlib``/``flax``/``optax`` modules) and reading
(:data:`FRAMEWORK`, ``framework="jax"``), as :mod:`opencheckpoint.adapters.jax`
describes; that module re-exports every name here.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..format.dtypes import dtype_name
from ..format.errors import CheckpointError, IncompatibleComponent, UnsupportedValue
from ..rules import raise_if
from ..rules.tree import TREE
from ..tree.encode import NOT_HANDLED
from ..tree.nodes import DtypeValue, PRNGKeyValue
from ..tree.sink import saving_ranks
from . import jax_sharding

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
    raise_if(TREE.check("R-TREE-25", None, str(name or dtype), False, reported_as=UnsupportedValue))
    return str(name)


#: The collective form of a save in a ``jax.distributed`` job, named by the refusals of arrays no process holds.
JAX_COLLECTIVE_FIX = ("call Checkpoint(...).save(path) in every process of the jax.distributed job, with the same "
                      "path (the collective form; docs: Scaling out, \"Several processes: jax.distributed\")")


#: The type of every concrete ``jax.Array`` (``ArrayImpl``): other ``jax.Array`` instances are tracers or refused.
_ARRAY_TYPE = type(jnp.zeros(()))


def _host_array(value: jax.Array) -> np.ndarray:
    """The values of an array this process can read whole (the allowlist of JAX arrays), else refused."""
    if isinstance(value, jax.core.Tracer):
        raise UnsupportedValue("cannot save a traced value; save outside jit/grad/vmap")
    if not value.is_fully_addressable:
        if value.sharding.is_fully_replicated:  # every process holds all of it: this process's copy
            return np.asarray(value.addressable_data(0))
        raise UnsupportedValue("array is not fully addressable from this process (multi-host); "
                               "gather it or save per process")
    return np.asarray(value)


def _key_data(keys: jax.Array) -> np.ndarray:
    """The whole ``uint32`` data of a key array: a key node holds its data as one array (spec R-TREE-26).

    Keys sharded over this process's devices are gathered here (they are small); keys sharded over
    several processes have no whole copy in any process and are refused with the two fixes.
    """
    data = jax.random.key_data(keys)
    if not isinstance(data, jax.core.Tracer) and not data.is_fully_addressable \
            and not data.sharding.is_fully_replicated:
        raise UnsupportedValue(
            f"a PRNG key array of shape {list(keys.shape)} sharded over several processes cannot be saved: a key "
            "node stores its data whole (R-TREE-26) and no process holds all of it; replicate the keys first "
            "(jax.jit(lambda k: k, out_shardings=NamedSharding(mesh, P()))(keys)), or save "
            "jax.random.key_data(keys) (an array, saved shard by shard) and rebuild the keys with "
            "jax.random.wrap_key_data after the restore")
    return _host_array(data)


def to_tree_value(value: Any) -> Any:
    """Tree-vocabulary replacement for a JAX/Flax/optax object, or ``NOT_HANDLED``."""
    if isinstance(value, jax.Array):
        if not isinstance(value, jax.core.Tracer) and value.is_deleted():  # donated or deleted: no buffers left
            raise UnsupportedValue("cannot save a deleted jax.Array (donated to a jitted function with "
                                   "donate_argnums, or .delete()d): it has no values; save the array the "
                                   "function returned")
        if not isinstance(value, jax.core.Tracer) and type(value) is not _ARRAY_TYPE and not is_key(value):
            raise UnsupportedValue(f"cannot store a {type(value).__module__}.{type(value).__qualname__}: not a "
                                   "concrete jax.Array whose values JAX can hand over; convert it with "
                                   "jnp.asarray(value) first")
        if is_key(value):
            return PRNGKeyValue(key_impl_name(value.dtype), _key_data(value))
        if not isinstance(value, jax.core.Tracer) and jax_sharding.is_sharded(value):
            if not value.is_fully_addressable and saving_ranks() < 2:
                raise UnsupportedValue(f"cannot store a jax.Array of shape {list(value.shape)} sharded over "
                                       "several processes in a save by one process: no process holds all of "
                                       f"it; {JAX_COLLECTIVE_FIX}")
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
        where = placement(map_location)
        if isinstance(where, jax.sharding.Sharding):
            jax_sharding.check_layout(data.shape, where)  # an uneven sharding: a clear error, not JAX's ValueError
        try:
            placed: jax.Array = jax.device_put(data, where)  # typed Any by jax
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
        where = placement(map_location)
        if isinstance(where, jax.sharding.Sharding):  # placed as the key data is: an uneven one refused
            jax_sharding.check_layout(data.shape, where)
        key: jax.Array = jax.random.wrap_key_data(jax.device_put(data, where), impl=impl)
        return key

    def dtype(self, name: str) -> np.dtype:
        return jnp.dtype(name)


FRAMEWORK = JaxFramework()


__all__ = ["FRAMEWORK", "KEY_IMPLS", "JaxFramework", "is_key", "key_impl_name", "placement", "to_tree_value"]
