"""Sharded ``jax.Array``: saved shard by shard, restored onto any mesh or sharding (issue 10).

Saving (:func:`sharded_value`, called by :func:`opencheckpoint.adapters.jax.to_tree_value`):
an array whose sharding spreads it over several devices without a full copy on
each (``NamedSharding(mesh, P('x', 'y'))``, partially replicated ones included)
becomes a :class:`~opencheckpoint.sharding.ShardedValue` holding this
process's addressable shards with ``replica_id == 0``, so each region is written
once, by the process that owns its first replica. Fully replicated and
single-device arrays stay ordinary arrays (tag 6): a checkpoint without a
sharded array is a format version 1 checkpoint, byte for byte what it was.

Restoring (:func:`assemble`): the target (a live ``jax.Array``, a
``jax.ShapeDtypeStruct(..., sharding=...)`` or an abstract NNX state) names the
sharding; the array is built with ``jax.make_array_from_callback``, each
device's block read through the stored handle's ``read_region``, which reads
and verifies only the shards that overlap the block. The stored sharding
does not matter: 8 shards of a ``4x2`` mesh restore onto ``2x4``, onto
``P(None, 'x')`` or onto one device.
"""

from __future__ import annotations

import sys
from typing import Any, Protocol

import jax
import numpy as np

from ..format.dtypes import dtype_name
from ..format.errors import IncompatibleComponent, UnsupportedValue
from ..sharding import LocalShard, ShardedValue

Region = tuple[tuple[int, ...], tuple[int, ...]]


class RegionReader(Protocol):
    """What a stored array handle offers a restore: ``LazyArray`` (tag 6) and ``LazyShardedArray`` (tag 10)."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    def read_region(self, start: tuple[int, ...], size: tuple[int, ...], *, verify: bool = True) -> np.ndarray: ...


def is_sharded(value: jax.Array) -> bool:
    """True when no single device holds the whole array (it is split over a mesh, maybe partly replicated)."""
    return value.ndim > 0 and value.size > 0 and not value.sharding.is_fully_replicated


def index_region(index: tuple[slice, ...], shape: tuple[int, ...]) -> Region:
    """The (start, size) region of a device's index (slices with step 1, as JAX shardings give them)."""
    start, size = [], []
    for item, dim in zip(index, shape, strict=True):
        lo, hi, step = item.indices(dim)
        if step != 1:  # the format stores contiguous blocks; JAX's shardings give nothing else
            raise UnsupportedValue(f"a device's block {index} has a step; only contiguous blocks can be shards")
        start.append(lo)
        size.append(max(hi - lo, 0))
    return tuple(start), tuple(size)


def sharded_value(value: jax.Array) -> ShardedValue:
    """This process's share of ``value``: each addressable shard whose ``replica_id`` is 0, once.

    Each shard is stored with the region its index names, so blocks of unequal sizes (an uneven
    sharding: 10 rows over 4 devices as 3, 3, 3, 1) are stored as they are; a device buffer that is not
    exactly its region (padded) is refused rather than stored with its padding.
    """
    shape = tuple(value.shape)
    shards = []
    for shard in value.addressable_shards:
        if shard.replica_id != 0:
            continue
        start, size = index_region(shard.index, shape)
        data = np.asarray(shard.data)
        if tuple(data.shape) != size:
            raise UnsupportedValue(f"the device buffer of the block at {list(start)} has shape {list(data.shape)}, "
                                   f"its index {shard.index} names {list(size)} (a padded uneven shard); "
                                   "reshard the array evenly or gather it before saving")
        shards.append(LocalShard(start, data))
    return ShardedValue(shape, dtype_name(np.dtype(value.dtype)), shards)


def check_layout(shape: tuple[int, ...], sharding: jax.sharding.Sharding) -> None:
    """Refuse a target sharding JAX cannot build for ``shape`` (IncompatibleComponent), before any read.

    JAX builds only even shardings: every sharded dimension divisible by its mesh axes (a
    ``ShapeDtypeStruct`` accepts ``(10, 3)`` with ``P('x')`` over 4 devices, but no array can have it).
    """
    try:
        sharding.shard_shape(tuple(shape))
    except ValueError as exc:
        reason = str(exc).split(" (full shape", 1)[0].splitlines()[0]
        raise IncompatibleComponent(
            f"JAX cannot lay out an array of shape {list(shape)} with this sharding: {reason}; choose a sharding "
            "whose mesh axes divide every sharded dimension (or replicate that dimension)") from None


def target_sharding(target: Any) -> jax.sharding.Sharding | None:
    """The sharding a restore must build for ``target``, when it spans several devices (else None)."""
    sharding = getattr(target, "sharding", None)
    if isinstance(sharding, jax.sharding.Sharding) and len(sharding.device_set) > 1:
        return sharding
    return None


def wants_regions(target: Any) -> bool:
    """True when some array of ``target`` (a pytree, NNX module or state) spans several devices."""
    return any(target_sharding(leaf) is not None for leaf in jax.tree_util.tree_leaves(target))


def spans_processes(value: Any) -> bool:
    """True when some array of ``value`` (a pytree, an NNX module or state; abstract leaves included) is sharded
    over devices of several processes: every process of a ``jax.distributed`` job must load it together."""
    nnx = sys.modules.get("flax.nnx")
    if nnx is not None and isinstance(value, nnx.Module):
        value = nnx.state(value)
    for leaf in jax.tree_util.tree_leaves(value):
        sharding = getattr(leaf, "sharding", None)
        if isinstance(sharding, jax.sharding.Sharding) and not sharding.is_fully_addressable:
            return True
    return False


def lazy_tree(reader: Any, name: str) -> Any:
    """Component ``name`` of an open :class:`~opencheckpoint.read.reader.CheckpointReader` with lazy array handles.

    (Typed ``Any``: the adapters take the reader from their caller and never import the read path.)
    """
    return reader.tree(name)


def is_handle(value: Any) -> bool:
    """A stored array not read yet (a lazy handle with region reads)."""
    return hasattr(value, "read_region") and hasattr(value, "shape")


def host_copy(array: np.ndarray) -> np.ndarray:
    """An array JAX may keep: a read-only view into a checkpoint's map is copied (the map is closed after the
    load, and JAX on CPU may keep a host buffer instead of copying it); a fresh array is used as it is."""
    return array if array.flags.writeable and array.flags.c_contiguous else np.array(array, order="C")


def assemble(handle: RegionReader, sharding: jax.sharding.Sharding, *, verify: bool = True) -> jax.Array:
    """A ``jax.Array`` laid out by ``sharding``, each device's block read (and verified) from ``handle``.

    Replicas of one block (the same region on several devices) are read once.
    """
    shape = tuple(handle.shape)
    check_layout(shape, sharding)
    blocks: dict[Region, np.ndarray] = {}

    def block(index: tuple[slice, ...] | None) -> np.ndarray:
        region = index_region(index or tuple(slice(None) for _ in shape), shape)  # None: the whole array
        if region not in blocks:
            blocks[region] = host_copy(handle.read_region(*region, verify=verify))
        return blocks[region]

    array: jax.Array = jax.make_array_from_callback(shape, sharding, block)
    return array


__all__ = [
    "RegionReader",
    "assemble",
    "check_layout",
    "host_copy",
    "index_region",
    "is_handle",
    "is_sharded",
    "lazy_tree",
    "sharded_value",
    "target_sharding",
    "wants_regions",
]
