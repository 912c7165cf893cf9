"""The blocks of the global array a DTensor rank holds under ``_StridedShard`` placements (issue 10).

A ``_StridedShard`` (FSDP2 over a tensor-parallel mesh, ``(_StridedShard(0, sf=2), Shard(0))``;
or a strided shard on its own) can give a rank rows that are scattered through the global array:
``(_StridedShard(0, sf=2),)`` over 2 ranks gives rank 0 the rows 0, 1, 4, 5 of 8. A shard record
of the format describes one box (a start and a size per dimension), and a rank may write several,
so such a local tensor is stored as one shard per box: the product, over the dimensions, of the
runs of consecutive global indices of that dimension (:func:`local_blocks`).

The global index of each local row is computed by torch itself
(``_get_shard_size_and_offsets``, which ``compute_local_shape_and_global_offset`` uses too),
following the placements left to right as torch does.
"""

from __future__ import annotations

import itertools
from typing import Any

from torch.distributed.tensor import Shard
from torch.distributed.tensor._utils import _get_shard_size_and_offsets
from torch.distributed.tensor.placement_types import _StridedShard

__all__ = ["Block", "dim_indices", "local_blocks", "runs"]

#: (global start, local start, size), one entry per dimension: a box of the local tensor and where it lies.
Block = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]


def dim_indices(global_shape: tuple[int, ...], mesh_shape: tuple[int, ...], coordinate: tuple[int, ...],
                placements: tuple[Any, ...]) -> dict[int, list[int]]:
    """For each sharded dimension, the global index of each of this rank's rows along it, in local order."""
    indices: dict[int, Any] = {}
    sizes = list(global_shape)
    for mesh_dim, placement in enumerate(placements):
        if not isinstance(placement, (Shard, _StridedShard)):
            continue
        dim = placement.dim
        sizes[dim], indices[dim] = _get_shard_size_and_offsets(
            sizes[dim], mesh_shape[mesh_dim], coordinate[mesh_dim], placement, indices.get(dim), global_shape[dim],
            False)
    # torch gives an empty shard a one-element index (its offset): no rows then
    return {dim: [int(i) for i in index.tolist()] if sizes[dim] else [] for dim, index in indices.items()}


def runs(indices: list[int]) -> list[tuple[int, int, int]]:
    """The maximal runs of consecutive global indices: (global start, local start, length) each."""
    out: list[tuple[int, int, int]] = []
    for local, index in enumerate(indices):
        if out and out[-1][0] + out[-1][2] == index:
            start, first, length = out[-1]
            out[-1] = (start, first, length + 1)
        else:
            out.append((index, local, 1))
    return out


def local_blocks(global_shape: tuple[int, ...], mesh_shape: tuple[int, ...], coordinate: tuple[int, ...],
                 placements: tuple[Any, ...]) -> list[Block]:
    """The boxes of this rank's local tensor, each contiguous in the global array (none when it holds nothing).

    One box when the rank's rows are one block (the usual FSDP2 + TP layout); otherwise one per
    combination of runs, in C order of the local tensor.
    """
    indices = dim_indices(global_shape, mesh_shape, coordinate, placements)
    per_dim = [runs(indices[dim]) if dim in indices else [(0, 0, size)] for dim, size in enumerate(global_shape)]
    if any(not dim_runs for dim_runs in per_dim):
        return []
    return [(tuple(r[0] for r in combo), tuple(r[1] for r in combo), tuple(r[2] for r in combo))
            for combo in itertools.product(*per_dim)]
