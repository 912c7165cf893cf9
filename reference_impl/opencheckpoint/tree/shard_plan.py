"""Sharded arrays on the write side (format version 2): the values a caller passes, and their tag-10 nodes.

A :class:`ShardedValue` is an array of ``global_shape`` whose elements this
process holds only in part: the :class:`LocalShard` pieces it must write
(replicas already removed by the caller, e.g. the lowest rank holding a region).
The tree encoder turns it into a tag-10 node ``[m, dtype, shape, shards]`` whose
shard records ``[file, start, size, offset, nbytes, crc32c]`` point into this
process's ``shards/rank-NNNNN.bin`` (:func:`rank_file`), planned and written by
:class:`ShardPlan` with the same extent writer as ``data.bin``.

In a collective save every rank plans the same tree; the coordinator gathers the
other ranks' shard records (:meth:`ShardPlan.summary`), appends them to its own
nodes (:func:`merge_records`) and writes the one ``tree.msgpack``.

>>> import numpy as np
>>> value = ShardedValue((4,), "int32", [LocalShard((0,), np.arange(2, dtype=np.int32))])
>>> plan = ShardPlan(rank=3)
>>> node = plan.node(value, "$.w")
>>> node[1:3], node[3][0][:5], rank_file(3)
(['int32', [4]], ['shards/rank-00003.bin', [0], [2], 0, 8], 'shards/rank-00003.bin')
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import msgpack
import numpy as np

from ..format.dtypes import dtype_name, numpy_dtype
from ..format.errors import CheckpointError, LimitExceeded
from ..format.limits import SHARDS_MAX_PER_ARRAY
from ..rules import raise_if
from ..rules.tree import TREE
from .datafile import DataFilePlan
from .refusals import refuse

__all__ = ["SHARDED_ARRAY_TAG", "LocalShard", "ShardPlan", "ShardedValue", "check_cover", "merge_records",
           "rank_file"]

#: Tag of a sharded array node (format version 2, spec R-SHD).
SHARDED_ARRAY_TAG: Final = 10
_MARK: Final = msgpack.ExtType(SHARDED_ARRAY_TAG, b"")


def rank_file(rank: int) -> str:
    """The inventory key of the shard data file rank ``rank`` writes in a component."""
    return f"shards/rank-{rank:05d}.bin"


@dataclass(frozen=True)
class LocalShard:
    """One piece of a sharded array: the block of the global array starting at ``start``, of ``data.shape``."""

    start: tuple[int, ...]
    data: np.ndarray


@dataclass(frozen=True)
class ShardedValue:
    """An array of ``global_shape`` and spec ``dtype`` of which this process writes ``local_shards``.

    The shards every process of a save writes, together, must tile the global
    shape (each element in exactly one region; identical regions are replicas and
    must hold equal bytes). A process that holds only replicas another one writes
    passes no shard.
    """

    global_shape: tuple[int, ...]
    dtype: str
    local_shards: Sequence[LocalShard] = field(default_factory=tuple)


class ShardPlan:
    """This rank's shard records of one tree and the extents of its shard data file."""

    def __init__(self, rank: int) -> None:
        self.file = rank_file(rank)
        self.data = DataFilePlan()
        #: (tree path, node) of every tag-10 node, in document order.
        self.nodes: list[tuple[str, list[Any]]] = []

    def node(self, value: ShardedValue, path: str, *, merged: bool = True) -> list[Any]:
        """The tag-10 node of ``value`` with records of this rank's shards (CRCs filled in by :meth:`write`);
        ``merged=False``: a node of this rank alone (in a per-rank value), not merged with the other ranks'."""
        shape, dtype = _checked_header(value, path)
        records: list[list[Any]] = []
        empty = math.prod(shape) == 0
        for index, shard in enumerate(value.local_shards):
            where = f"{path}.local_shards[{index}]"
            array = _checked_shard(shard, shape, dtype, where)
            if empty or array.size == 0:
                continue  # nothing to store: an empty array has no shard record (R-SHD), an empty piece adds none
            array = np.ascontiguousarray(array)
            record: list[Any] = [self.file, [int(s) for s in shard.start], list(array.shape), 0, array.nbytes, 0]
            extent = self.data.extent_for(array, array.nbytes)
            record[3] = extent.offset
            extent.nodes.append(record)
            records.append(record)
        node = [_MARK, dtype, list(shape), records]
        if merged:
            self.nodes.append((path, node))
        return node

    def write(self, directory: Path, *, durable: bool, sha256: bool) -> dict[str, dict[str, Any]]:
        """Write this rank's shard data file below ``directory`` (none when it holds no shard); its file entry."""
        if not self.data.extents:
            return {}
        (directory / "shards").mkdir(parents=True, exist_ok=True)
        return {self.file: self.data.write(directory / self.file, durable=durable, sha256=sha256)}

    def summary(self) -> list[dict[str, Any]]:
        """The JSON a rank sends its coordinator: each tag-10 node's path, header and (written) records."""
        return [{"path": path, "dtype": node[1], "shape": node[2], "shards": node[3]} for path, node in self.nodes]


def _checked_header(value: ShardedValue, path: str) -> tuple[tuple[int, ...], str]:
    shape = value.global_shape
    if not isinstance(shape, (tuple, list)) or not all(type(d) is int and d >= 0 for d in shape):
        raise refuse(f"global_shape must be a tuple of ints >= 0, got {shape!r}", field=path)
    raise_if(TREE.check("R-LIM-13", path, len(shape)))
    if len(value.local_shards) > SHARDS_MAX_PER_ARRAY:
        # The reader's limit (R-LIM-20), refused before writing; the rule's one check site is the reader's.
        raise LimitExceeded(f"{len(value.local_shards)} local shards, limit {SHARDS_MAX_PER_ARRAY} per array "
                            "(R-LIM-20)", field=path)
    try:
        numpy_dtype(value.dtype)
    except CheckpointError as exc:
        raise exc.at(field=path) from None
    return tuple(shape), value.dtype


def _checked_shard(shard: LocalShard, shape: tuple[int, ...], dtype: str, path: str) -> np.ndarray:
    """The shard's array, refused unless it lies inside ``shape`` with the array's dtype."""
    if not isinstance(shard, LocalShard) or not isinstance(shard.data, np.ndarray):
        raise refuse("a local shard must be a LocalShard(start, data: numpy.ndarray)", field=path)
    array = shard.data
    try:
        name = dtype_name(array.dtype)
    except CheckpointError as exc:
        raise exc.at(field=path) from None
    if name != dtype or array.dtype.byteorder == ">":
        raise refuse(f"shard dtype {array.dtype.str} is not the array's little-endian {dtype}",
                               field=path)
    start = shard.start
    if len(start) != len(shape) or array.ndim != len(shape) or not all(type(s) is int and s >= 0 for s in start):
        raise refuse(f"shard start {start!r} and data shape {array.shape} must have the "
                               f"{len(shape)} dimensions of the global shape {shape}", field=path)
    if any(s + n > d for s, n, d in zip(start, array.shape, shape, strict=True)):
        raise refuse(f"shard at {tuple(start)} of shape {array.shape} lies outside the global shape "
                               f"{shape}", field=path)
    return array


def check_cover(shape: Sequence[int], records: Sequence[Sequence[Any]], path: str) -> None:
    """Refuse shard records that do not tile ``shape`` before anything is published.

    Identical regions are replicas (their CRCs must agree); distinct regions must
    be pairwise disjoint and, together, hold every element: disjoint regions whose
    volumes add up to the array's are exactly a tiling. A shard count over the
    reader's limit is refused too.
    """
    if len(records) > SHARDS_MAX_PER_ARRAY:
        raise LimitExceeded(f"{len(records)} shard records, limit {SHARDS_MAX_PER_ARRAY} per array (R-LIM-20)",
                            field=path)
    total = math.prod(shape)
    regions: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}
    for record in records:
        key = (tuple(record[1]), tuple(record[2]))
        if regions.setdefault(key, record[5]) != record[5]:
            raise refuse(f"two replicas of the region start={list(key[0])} size={list(key[1])} hold "
                                   "different bytes", field=path)
    # Imported here: the package of the tiling sweep imports this module (a cycle at import time otherwise).
    from ..rules.tiling import covered, overlapping_pair, tiles

    held = covered([size for _, size in regions])
    if regions and len(shape):
        starts = np.array([start for start, _ in regions], dtype=np.int64)
        sizes = np.array([size for _, size in regions], dtype=np.int64)
        # The reader's check (R-SHD-9, R-SHD-11): one tiling test, the element count naming the failure.
        if held >= total and not tiles(shape, starts, sizes):
            pair = overlapping_pair(starts, sizes)
            which = f": start={starts[pair[0]].tolist()} and start={starts[pair[1]].tolist()}" if pair else ""
            raise refuse(f"shard regions overlap{which}", field=path)
    if held < total:
        raise refuse(f"the shards of every rank leave at least {total - held} of the {total} elements of the "
                     f"global shape {list(shape)} uncovered: some region was written by no rank", field=path)


def merge_records(nodes: Sequence[tuple[str, list[Any]]], summaries: Sequence[Sequence[dict[str, Any]]],
                  ranks: Sequence[int]) -> None:
    """Append every other rank's shard records to the coordinator's tag-10 ``nodes``, then check coverage.

    Every rank plans the same tree, so its summary lists the same arrays in the
    same order; anything else means the ranks saved different trees.
    """
    for summary, rank in zip(summaries, ranks, strict=True):
        if len(summary) != len(nodes):
            raise refuse(f"rank {rank} saved {len(summary)} sharded arrays, the coordinator "
                                   f"{len(nodes)}: every rank must save the same tree")
        for (path, node), theirs in zip(nodes, summary, strict=True):
            if (theirs["path"], theirs["dtype"], list(theirs["shape"])) != (path, node[1], node[2]):
                raise refuse(
                    f"rank {rank} saved {theirs['path']} as {theirs['dtype']} {theirs['shape']} where the "
                    f"coordinator has {node[1]} {node[2]}: every rank must save the same tree", field=path)
            node[3].extend(theirs["shards"])
    for path, node in nodes:
        node[3].sort(key=lambda record: (record[1], record[0]))  # canonical order: by region, then file
        check_cover(node[2], node[3], path)
