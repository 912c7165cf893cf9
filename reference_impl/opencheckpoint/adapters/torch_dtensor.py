"""DTensors (``torch.distributed.tensor``, FSDP2 ``fully_shard`` parameters) as sharded arrays.

Saving: :func:`to_sharded` turns a DTensor into a
:class:`~opencheckpoint.sharding.ShardedValue` holding the one block this rank
writes: its local tensor at the global offset its placements give
(``compute_local_shape_and_global_offset``, as ``torch.distributed.checkpoint``
does). A block replicated over a mesh dimension (``Replicate()``) is written by
the lowest rank holding it, the rank at coordinate 0 of every such dimension;
the others contribute no shard. ``Partial()`` placements (pending reductions)
are refused: their local tensors are not values of the array.

Loading (resharding: the checkpoint may have been written by any number of
ranks, or by one process): :func:`read_module_state` reads a module's state dict
for a live module holding DTensors. Each DTensor entry reads only its local
region (:func:`local_region`) through the array handle's ``read_region``, each
shard it touches verified against its CRC-32C, and wraps the block into a
DTensor with the live tensor's mesh and placements (:func:`from_region`); plain
tensors read the whole array. :func:`shard_optimizer_state` gives an
optimizer's full state tensors the placements of their (DTensor) parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.distributed.tensor import DTensor, Shard
from torch.distributed.tensor._utils import _get_shard_size_and_offsets, compute_local_shape_and_global_offset
from torch.distributed.tensor.placement_types import _StridedShard

from ..arrays import verify_view
from ..dtypes import numpy_dtype
from ..tree.decode import empty_array
from ..tree.nodes import ShardedArrayRef, ShardRef
from ..tree.refusals import refuse
from ..tree.shard_plan import LocalShard, ShardedValue
from .torch_tensors import _VIEWS, dtype_name_of, numpy_to_tensor, tensor_to_numpy

if TYPE_CHECKING:
    from .base import ComponentReader

__all__ = ["from_region", "holds_dtensors", "local_region", "read_module_state", "shard_optimizer_state",
           "to_sharded"]


def local_region(tensor: DTensor) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(start, size) of the block of the global array ``tensor`` holds on this rank; None off its mesh."""
    mesh = tensor.device_mesh
    coordinate = mesh.get_coordinate()
    if coordinate is None:
        return None
    if any(isinstance(placement, _StridedShard) for placement in tensor.placements):
        strided_block_is_contiguous(tuple(tensor.shape), tuple(mesh.shape), tuple(coordinate),
                                    tuple(tensor.placements))
    shape, offset = compute_local_shape_and_global_offset(tensor.shape, mesh, tensor.placements)
    return tuple(int(o) for o in offset), tuple(int(s) for s in shape)


def strided_block_is_contiguous(global_shape: tuple[int, ...], mesh_shape: tuple[int, ...],
                                coordinate: tuple[int, ...], placements: tuple[Any, ...]) -> None:
    """Refuse placements with a ``_StridedShard`` that leave this rank's elements scattered in the global array.

    ``_StridedShard`` (FSDP2 over a tensor-parallel mesh: ``(_StridedShard(0, sf=2), Shard(0))``) usually
    gives each rank one contiguous block, which is stored as one shard; on its own it gives a rank
    interleaved rows, which no single (start, size) region describes, so they are refused instead of
    being stored at the wrong place. The rows of each dimension are followed as torch does (left to right).
    """
    indices: dict[int, Any] = {}
    sizes = list(global_shape)
    for mesh_dim, placement in enumerate(placements):
        if not isinstance(placement, (Shard, _StridedShard)):
            continue
        dim = placement.dim
        sizes[dim], indices[dim] = _get_shard_size_and_offsets(
            sizes[dim], mesh_shape[mesh_dim], coordinate[mesh_dim], placement, indices.get(dim), global_shape[dim],
            False)
    for dim, index in indices.items():
        rows = [int(i) for i in index.tolist()] if sizes[dim] else []
        if rows and rows != list(range(rows[0], rows[0] + len(rows))):
            raise refuse(f"the placements {placements} give this rank the scattered indices {rows[:8]} "
                                   f"of dimension {dim}: a _StridedShard that does not leave each rank one "
                                   "contiguous block is not supported yet; redistribute the DTensor first")


def _writes_replica(tensor: DTensor) -> bool:
    """Whether this rank writes its block: it is at coordinate 0 of every mesh dimension that replicates.

    ``_StridedShard`` (FSDP2 on a 2-D mesh) shards although its ``is_shard()`` is False: only ``Replicate()``
    dimensions hold copies (``Partial()`` is refused before this).
    """
    coordinate = tensor.device_mesh.get_coordinate()
    assert coordinate is not None
    return all(coordinate[dim] == 0 for dim, placement in enumerate(tensor.placements) if placement.is_replicate())


def to_sharded(tensor: torch.Tensor) -> ShardedValue:
    """The sharded value of the DTensor ``tensor`` with this rank's block, if this rank writes it."""
    assert isinstance(tensor, DTensor)
    if any(placement.is_partial() for placement in tensor.placements):
        raise refuse(f"cannot store a DTensor with placements {tensor.placements}: a Partial() placement "
                               "holds unreduced values; redistribute it to Replicate() or Shard() first")
    name = dtype_name_of(tensor.dtype)
    shape = tuple(int(d) for d in tensor.shape)
    region = local_region(tensor)
    if region is None or not _writes_replica(tensor):
        return ShardedValue(shape, name, ())
    start, size = region
    local = tensor.to_local()
    if tuple(local.shape) != size:
        raise refuse(f"the local tensor of this rank has shape {tuple(local.shape)}, its placements "
                               f"{tensor.placements} give {size}")
    return ShardedValue(shape, name, (LocalShard(start, tensor_to_numpy(local)),))


def from_region(block: torch.Tensor, like: DTensor) -> Any:
    """A DTensor with ``like``'s mesh, placements, shape and stride whose local tensor is ``block``."""
    return DTensor.from_local(block.to(like.to_local().device), like.device_mesh, like.placements,
                              run_check=False, shape=like.shape, stride=like.stride())


def holds_dtensors(state: Mapping[str, Any]) -> bool:
    """Whether a live state dict has a DTensor entry (a module sharded by FSDP2 or tensor parallelism)."""
    return any(isinstance(value, DTensor) for value in state.values())


def read_region(handle: Any, start: tuple[int, ...], size: tuple[int, ...], *, verify: bool,
                whole_shard: Callable[[Any, Any], np.ndarray] | None = None) -> np.ndarray:
    """The block ``start .. start + size`` of a stored array handle, verified unless ``verify`` is False.

    When the block is exactly one stored shard (a restore onto the layout that saved it) and
    ``whole_shard`` is given, the shard is read by ``whole_shard`` (straight into a fresh buffer).
    """
    ref = getattr(handle, "ref", None)
    if whole_shard is not None and isinstance(ref, ShardedArrayRef):
        match = next((shard for shard in ref.shards if shard.start == start and shard.size == size), None)
        if match is not None:
            return whole_shard(ref, match)
    reader = getattr(handle, "read_region", None)
    if reader is not None:
        block: np.ndarray = reader(start, size, verify=verify)
        return block
    # A tag-6 handle without region reads verifies its whole extent once, then is sliced (no copy).
    whole: np.ndarray = handle.read(verify=verify)
    return whole[tuple(slice(s, s + n) for s, n in zip(start, size, strict=True))]


def _is_handle(value: Any) -> bool:
    return hasattr(value, "read") and hasattr(value, "shape") and hasattr(value, "dtype")


def shard_reader(reader: ComponentReader) -> Callable[[ShardedArrayRef, ShardRef], np.ndarray]:
    """Reads one whole shard of the component with positioned reads (no memory map), verified after.

    A shard read through the map is copied out page by page; read into a fresh buffer
    (``preadv``) and checksummed while it is hot in the cache, it costs one copy.
    """
    record = reader.record

    def read(ref: ShardedArrayRef, shard: ShardRef) -> np.ndarray:
        extent = shard.extent(ref.dtype)
        out = empty_array(shard.size, numpy_dtype(ref.dtype).newbyteorder("="))
        path = f"{record.path}/{shard.file}"
        if out.size:
            with reader.reader.open_region(path, record.files[shard.file].size) as region:
                region.readinto(out.reshape(-1).view(np.uint8), shard.offset)
            if reader.verify:
                verify_view(out, extent, path)
        return out

    return read


def read_module_state(reader: ComponentReader, live: Mapping[str, Any]) -> Any:
    """A stored module state dict for ``live``: DTensor targets get DTensors of their local region only.

    An entry whose live tensor is a DTensor of the same global shape reads the
    block this rank holds; every other array is read whole (a read-only view,
    copied into the module later). Non-dict trees are returned as stored.
    """
    lazy = reader.reader.tree(reader.name)
    if not isinstance(lazy, dict):
        return lazy
    whole_shard = shard_reader(reader)
    out: dict[str, Any] = {}
    for key, handle in lazy.items():
        target = live.get(key)
        if not _is_handle(handle):
            out[key] = handle
        elif isinstance(target, DTensor) and tuple(handle.shape) == tuple(target.shape):
            region = local_region(target)
            if region is None:
                out[key] = target  # this rank holds none of it: the live value is written back as is
                continue
            block = numpy_to_tensor(np.ascontiguousarray(
                read_region(handle, *region, verify=reader.verify, whole_shard=whole_shard)))
            out[key] = from_region(block.to(target.dtype) if block.dtype != target.dtype else block, target)
        else:
            out[key] = _VIEWS.array(handle.read(verify=reader.verify))
    return out


def shard_optimizer_state(optimizer: torch.optim.Optimizer, state: Any) -> Any:
    """``state`` (an optimizer state dict of full tensors) with each per-parameter tensor shaped like its
    parameter turned into a DTensor of the parameter's placements (this rank's block of it)."""
    if not isinstance(state, dict) or not isinstance(state.get("state"), dict):
        return state
    params = [param for group in optimizer.param_groups for param in group["params"]]
    stored_ids = [pid for group in state.get("param_groups", []) for pid in group.get("params", [])]
    for pid, param in zip(stored_ids, params, strict=False):
        entry = state["state"].get(pid)
        if not isinstance(param, DTensor) or not isinstance(entry, dict):
            continue
        region = local_region(param)
        for key, value in entry.items():
            if isinstance(value, torch.Tensor) and not isinstance(value, DTensor) and value.shape == param.shape \
                    and region is not None:
                block = value[tuple(slice(s, s + n) for s, n in zip(*region, strict=True))]
                entry[key] = from_region(block.contiguous(), param)
    return state
