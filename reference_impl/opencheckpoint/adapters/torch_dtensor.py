"""DTensors (``torch.distributed.tensor``, FSDP2 ``fully_shard`` parameters) as sharded arrays.

Saving: :func:`to_sharded` turns a DTensor into a
:class:`~opencheckpoint.sharding.ShardedValue` holding the one block this rank
writes: its local tensor at the global offset its placements give
(``compute_local_shape_and_global_offset``, as ``torch.distributed.checkpoint``
does). A block replicated over a mesh dimension (``Replicate()``) is written by
the lowest rank holding it, the rank at coordinate 0 of every such dimension;
the others contribute no shard. ``Partial()`` placements (pending reductions)
are refused: their local tensors are not values of the array.

Loading: :func:`local_region` is the block of the global array a DTensor target
holds on this rank, and :func:`from_region` wraps that block back into a DTensor
with the target's mesh and placements.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

from ..errors import UnsupportedValue
from ..tree.sharded import LocalShard, ShardedValue
from .torch_tensors import dtype_name_of, tensor_to_numpy

__all__ = ["from_region", "local_region", "to_sharded"]


def local_region(tensor: DTensor) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(start, size) of the block of the global array ``tensor`` holds on this rank; None off its mesh."""
    mesh = tensor.device_mesh
    if mesh.get_coordinate() is None:
        return None
    shape, offset = compute_local_shape_and_global_offset(tensor.shape, mesh, tensor.placements)
    return tuple(int(o) for o in offset), tuple(int(s) for s in shape)


def _writes_replica(tensor: DTensor) -> bool:
    """Whether this rank writes its block: it is at coordinate 0 of every mesh dimension that does not shard."""
    coordinate = tensor.device_mesh.get_coordinate()
    assert coordinate is not None
    return all(coordinate[dim] == 0 for dim, placement in enumerate(tensor.placements) if not placement.is_shard())


def to_sharded(tensor: torch.Tensor) -> ShardedValue:
    """The sharded value of the DTensor ``tensor`` with this rank's block, if this rank writes it."""
    assert isinstance(tensor, DTensor)
    if any(placement.is_partial() for placement in tensor.placements):
        raise UnsupportedValue(f"cannot store a DTensor with placements {tensor.placements}: a Partial() placement "
                               "holds unreduced values; redistribute it to Replicate() or Shard() first",
                               rule="R-WTR-3")
    name = dtype_name_of(tensor.dtype)
    shape = tuple(int(d) for d in tensor.shape)
    region = local_region(tensor)
    if region is None or not _writes_replica(tensor):
        return ShardedValue(shape, name, ())
    start, size = region
    local = tensor.to_local()
    if tuple(local.shape) != size:
        raise UnsupportedValue(f"the local tensor of this rank has shape {tuple(local.shape)}, its placements "
                               f"{tensor.placements} give {size}", rule="R-WTR-3")
    return ShardedValue(shape, name, (LocalShard(start, tensor_to_numpy(local)),))


def from_region(block: torch.Tensor, like: DTensor) -> Any:
    """A DTensor with ``like``'s mesh, placements, shape and stride whose local tensor is ``block``."""
    return DTensor.from_local(block.to(like.to_local().device), like.device_mesh, like.placements,
                              run_check=False, shape=like.shape, stride=like.stride())
