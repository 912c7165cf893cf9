"""DTensors (``torch.distributed.tensor``, FSDP2 ``fully_shard`` parameters) as sharded arrays.

Saving: :func:`to_sharded` turns a DTensor into a
:class:`~opencheckpoint.sharding.ShardedValue` holding the one block this rank
writes: its local tensor at the global offset its placements give
(``compute_local_shape_and_global_offset``, as ``torch.distributed.checkpoint``
does). A block replicated over a mesh dimension (``Replicate()``) is written by
the lowest rank holding it, the rank at coordinate 0 of every such dimension;
the others contribute no shard. ``Partial()`` placements (pending reductions)
are refused: their local tensors are not values of the array. A rank whose
``_StridedShard`` placements scatter its rows writes one shard per contiguous
box of them (:mod:`.torch_strided`).

Loading (resharding: the checkpoint may have been written by any number of
ranks, or by one process): :func:`read_module_state` reads a module's state dict
for a live module holding DTensors, :func:`read_optimizer_state` an optimizer's
state for DTensor parameters. Each DTensor entry (and each optimizer state
tensor shaped like its DTensor parameter) reads only its local region
(:func:`local_region`) through :class:`RegionReads`: every shard it touches is
verified against its CRC-32C over the shard file's memory map, and the block is
a view of the map when it lies in one shard (no fresh memory; the module's
``load_state_dict`` copies it once into the parameter) or is assembled from the
shards it spans; it is wrapped into a DTensor with the live tensor's mesh and
placements (:func:`from_region`). Optimizer blocks are copied (the optimizer
keeps them). Plain tensors read the whole array.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
from torch.distributed.tensor.placement_types import _StridedShard

from ..read.restore_layout import PermutedHandle
from ..read.sharded import ComponentFiles, ShardedReads
from ..tree.nodes import ShardedArrayRef
from ..tree.refusals import refuse
from ..tree.shard_plan import LocalShard, ShardedValue
from ..tree.sink import saving_ranks
from . import torch_strided as strided
from .torch_dense import COLLECTIVE_FIX
from .torch_tensors import _VIEWS, FRAMEWORK, dtype_name_of, numpy_to_tensor, tensor_to_numpy

if TYPE_CHECKING:
    from .base import ComponentReader

__all__ = ["from_region", "holds_dtensors", "holds_dtensors_anywhere", "local_region", "read_module_state",
           "read_optimizer_state", "shard_optimizer_state", "to_sharded"]


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
    gives each rank one contiguous block; on its own it can give a rank interleaved rows, which no
    single (start, size) region describes. A save stores such a rank's rows as several shards
    (:func:`to_sharded`); a restore into such a layout reads one region per rank, so it is refused
    here rather than filled at the wrong place.
    """
    for dim, rows in strided.dim_indices(global_shape, mesh_shape, coordinate, placements).items():
        if rows and rows != list(range(rows[0], rows[0] + len(rows))):
            raise refuse(f"the placements {placements} give this rank the scattered indices {rows[:8]} "
                         f"of dimension {dim}: restoring into a _StridedShard layout that does not "
                         "leave each rank one contiguous block is not supported yet; load into another "
                         "layout and redistribute the DTensor")


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
    ranks = tensor.device_mesh.size()
    if ranks > saving_ranks():
        raise refuse(f"cannot store a DTensor of shape {list(tensor.shape)} held by the {ranks} ranks of its mesh "
                     f"in a save by {saving_ranks()} process(es): no process holds all of it; {COLLECTIVE_FIX}; "
                     "or store tensor.full_tensor() (called on every rank) from one process")
    if any(placement.is_partial() for placement in tensor.placements):
        raise refuse(f"cannot store a DTensor with placements {tensor.placements}: a Partial() placement "
                               "holds unreduced values; redistribute it to Replicate() or Shard() first")
    name = dtype_name_of(tensor.dtype)
    shape = tuple(int(d) for d in tensor.shape)
    if any(isinstance(placement, _StridedShard) for placement in tensor.placements):
        return _strided_to_sharded(tensor, shape, name)
    region = local_region(tensor)
    if region is None or not _writes_replica(tensor):
        return ShardedValue(shape, name, ())
    start, size = region
    local = tensor.to_local()
    if tuple(local.shape) != size:
        raise refuse(f"the local tensor of this rank has shape {tuple(local.shape)}, its placements "
                               f"{tensor.placements} give {size}")
    return ShardedValue(shape, name, (LocalShard(start, tensor_to_numpy(local)),))


def _strided_to_sharded(tensor: DTensor, shape: tuple[int, ...], name: str) -> ShardedValue:
    """This rank's rows under ``_StridedShard`` placements: one shard per contiguous box of the global array.

    Scattered rows (``(_StridedShard(0, sf=2),)`` gives rank 0 the rows 0, 1, 4, 5 of 8) become
    several shards of this rank's file; one block stays one shard.
    """
    mesh = tensor.device_mesh
    coordinate = mesh.get_coordinate()
    if coordinate is None or not _writes_replica(tensor):
        return ShardedValue(shape, name, ())
    local = tensor_to_numpy(tensor.to_local())
    blocks = strided.local_blocks(shape, tuple(mesh.shape), tuple(coordinate), tuple(tensor.placements))
    expected = tuple(max((b[1][d] + b[2][d] for b in blocks), default=0) for d in range(len(shape)))
    if blocks and tuple(local.shape) != expected:
        raise refuse(f"the local tensor of this rank has shape {tuple(local.shape)}, its placements "
                     f"{tensor.placements} give {expected}")
    return ShardedValue(shape, name, tuple(
        LocalShard(start, local[tuple(slice(o, o + n) for o, n in zip(offset, size, strict=True))])
        for start, offset, size in blocks))


def from_region(block: torch.Tensor, like: DTensor) -> Any:
    """A DTensor with ``like``'s mesh, placements, shape and stride whose local tensor is ``block``."""
    return DTensor.from_local(block.to(like.device), like.device_mesh, like.placements,
                              run_check=False, shape=like.shape, stride=like.stride())


def holds_dtensors_anywhere(value: Any) -> bool:
    """Whether a live value of a load holds DTensors: a module's parameters or buffers, an optimizer's
    parameters, or a value of a mapping (every rank of such a value must load it together)."""
    if isinstance(value, torch.nn.Module):
        return any(isinstance(t, DTensor) for t in itertools.chain(value.parameters(), value.buffers()))
    if isinstance(value, torch.optim.Optimizer):
        return any(isinstance(p, DTensor) for group in value.param_groups for p in group["params"])
    if isinstance(value, Mapping):
        return any(isinstance(v, DTensor) for v in value.values())
    return isinstance(value, DTensor)


def holds_dtensors(state: Mapping[str, Any]) -> bool:
    """Whether a live state dict has a DTensor entry (a module sharded by FSDP2 or tensor parallelism)."""
    return any(isinstance(value, DTensor) for value in state.values())


class RegionReads:
    """This rank's blocks of the stored arrays of one component, for one restore.

    Each block of a sharded array is taken from the memory maps of the shard
    files that hold it: every shard it touches is verified once (its CRC-32C
    computed over the map, R-ARR-14), and a block that lies in one shard (the
    layout that saved it, or a finer one) is a read-only view of the map, no
    byte copied; only a block spread over several shards is assembled into
    fresh memory. The views are copied from once, into the live tensors, by
    ``load_state_dict`` in phase 2, while the checkpoint is still open.
    """

    def __init__(self, reader: ComponentReader) -> None:
        self.verify = reader.verify
        self._files: ComponentFiles | None = None
        self._reader = reader
        self._verified: dict[tuple[str, int, int, int], np.ndarray] = {}
        self._regions: dict[tuple[Any, ...], tuple[tuple[int, ...], tuple[int, ...]] | None] = {}

    def local_region(self, target: DTensor) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """:func:`local_region`, computed once per (shape, mesh, placements) of the restore."""
        key = (tuple(target.shape), id(target.device_mesh), tuple(target.placements))
        if key not in self._regions:
            self._regions[key] = local_region(target)
        return self._regions[key]

    def block(self, handle: Any, start: tuple[int, ...], size: tuple[int, ...]) -> np.ndarray:
        """The block ``start .. start + size`` of a stored array handle (read-only; a view when it can be)."""
        if isinstance(handle, PermutedHandle):  # a source map's transpose: the stored region holding this one
            return handle.permute(self.block(handle.base, *handle.stored_region(start, size)))
        ref = getattr(handle, "ref", None)
        if isinstance(ref, ShardedArrayRef):
            if self._files is None:
                self._files = self._reader.reader.component_files(self._reader.name)
            return ShardedReads(ref, self._files, verified=self._verified).block(start, size, verify=self.verify)
        # A tag-6 array (a checkpoint of one process): verified whole once, then sliced (no copy).
        whole: np.ndarray = handle.read(verify=self.verify)
        return whole[tuple(slice(s, s + n) for s, n in zip(start, size, strict=True))]

    def dtensor(self, handle: Any, target: DTensor) -> Any:
        """A DTensor like ``target`` holding this rank's block of ``handle`` (``target`` when it holds none)."""
        region = self.local_region(target)
        if region is None:
            return target  # this rank holds none of it: the live value is written back as is
        block = _VIEWS.array(self.block(handle, *region))
        return from_region(block.to(target.dtype) if block.dtype != target.dtype else block, target)


def _is_handle(value: Any) -> bool:
    return hasattr(value, "read") and hasattr(value, "shape") and hasattr(value, "dtype")


def read_module_state(reader: ComponentReader, live: Mapping[str, Any]) -> Any:
    """A stored module state dict for ``live``, with ``rename=``/``subtree=`` applied (the result has the live
    names): DTensor targets get DTensors of their local region only.

    An entry whose live tensor is a DTensor of the same global shape reads the
    block this rank holds (:class:`RegionReads`: verified views of the shard
    files' maps); every other array is read whole (a verified read-only view,
    copied into the module later). Non-dict trees are returned as stored.
    """
    lazy = reader.reader.tree(reader.name)
    if not isinstance(lazy, dict):
        return lazy
    if reader.plan.selects:
        # rename= / subtree= (and a source map's transposes) act on the handles, before any read: each entry is
        # looked up in the live module by its renamed key, and a permuted one reads its permuted region only.
        lazy = reader.plan.apply_flat(lazy, reader.name)
    reads = RegionReads(reader)
    out: dict[str, Any] = {}
    for key, handle in lazy.items():
        target = live.get(key)
        if reader.plan.selects and target is None and _is_handle(handle):
            out[key] = handle  # not in the module: reported by name, never read
            continue
        if not _is_handle(handle):
            out[key] = handle
        elif isinstance(target, DTensor) and tuple(handle.shape) == tuple(target.shape):
            out[key] = reads.dtensor(handle, target)
        else:
            out[key] = _VIEWS.array(handle.read(verify=reader.verify))
    return out


def read_optimizer_state(reader: ComponentReader, optimizer: torch.optim.Optimizer) -> Any:
    """The stored state of an optimizer of DTensor parameters, each per-parameter state tensor shaped like its
    parameter read as this rank's block only (a DTensor of the parameter's placements), in owned memory.

    Other arrays (step counts, state of plain parameters) are read whole. A state
    stored with mapping attributes, or holding values other than arrays and plain
    data, is read whole and cut (:func:`shard_optimizer_state`), as before.
    """
    from .state_dict import ATTRIBUTES_KEY, read_state

    metadata = reader.record.metadata
    lazy = reader.reader.tree(reader.name)
    stored_ids = _stored_param_ids(lazy)
    if (isinstance(metadata, dict) and metadata.get(ATTRIBUTES_KEY) is not None) or stored_ids is None \
            or not _plain(lazy):
        return shard_optimizer_state(optimizer, read_state(reader, "torch"))
    params = [param for group in optimizer.param_groups for param in group["params"]]
    sharded = {pid: param for pid, param in zip(stored_ids, params, strict=False) if isinstance(param, DTensor)}
    reads = RegionReads(reader)

    def tensor(handle: Any, param: Any) -> Any:
        if isinstance(param, DTensor) and tuple(handle.shape) == tuple(param.shape):
            region = reads.local_region(param)
            if region is not None:  # a copy: the optimizer keeps these tensors after the checkpoint is closed
                return from_region(numpy_to_tensor(np.array(reads.block(handle, *region), order="C")), param)
        return FRAMEWORK.array(handle.read(verify=reader.verify), map_location=reader.map_location)

    def convert(node: Any, param: Any = None) -> Any:
        if _is_handle(node):
            return tensor(node, param)
        if isinstance(node, dict):
            return {key: convert(value, param) for key, value in node.items()}
        if isinstance(node, (list, tuple)):
            items = [convert(value, param) for value in node]
            return items if isinstance(node, list) else type(node)(items)
        return node

    state = {key: value for key, value in lazy.items() if key != "state"}
    converted = {key: convert(value) for key, value in state.items()}
    converted["state"] = {pid: convert(entry, sharded.get(pid)) for pid, entry in lazy["state"].items()}
    return {key: converted[key] for key in lazy}


def _stored_param_ids(lazy: Any) -> list[Any] | None:
    """The parameter ids of a stored optimizer state dict's groups in order, or None when it is not one."""
    if not (isinstance(lazy, dict) and isinstance(lazy.get("state"), dict)
            and isinstance(lazy.get("param_groups"), list)):
        return None
    ids: list[Any] = []
    for group in lazy["param_groups"]:
        if not (isinstance(group, dict) and isinstance(group.get("params"), list)):
            return None
        ids += group["params"]
    return ids


def _plain(node: Any) -> bool:
    """Whether a lazy tree holds only array handles and plain data (no dtype, PRNG key or named tuple)."""
    if _is_handle(node):
        return True
    if isinstance(node, dict):
        return all(_plain(value) for value in node.values())
    if type(node) in (list, tuple):
        return all(_plain(value) for value in node)
    return node is None or type(node) in (bool, int, float, complex, str, bytes)


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
