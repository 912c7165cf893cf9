"""The rule table of sharded arrays (format version 2, spec ``opencheckpoint-v2.md`` §S.3): one check per ID.

Each function is the only place its rule is checked and returns why a value
breaks it, or None; :meth:`RuleTable.check <opencheckpoint.rules.RuleTable.check>`
turns that into the rule's error class with the tree path and rule ID. The
table names no file: a tree component's reader adds its ``tree.msgpack`` or
data file (:meth:`CheckpointError.at <opencheckpoint.format.errors.CheckpointError.at>`).
The parser (:mod:`opencheckpoint.tree.sharded`) runs R-SHD-1, R-LIM-20 and
R-SHD-5 while it reads a node; :func:`tiling_error` runs R-SHD-6 and
R-SHD-8 .. R-SHD-11 in that order (step 15); R-SHD-7 needs the component's
inventory (:mod:`.layout`).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

import numpy as np

from ..format.errors import ArrayLayoutError, CheckpointError, LimitExceeded, TreeError
from ..format.limits import SHARDS_MAX_PER_ARRAY
from . import RuleTable
from .tiling import covered, overlapping_pair, tiles

#: ``(start, size)`` per dimension (``opencheckpoint.sharding.regions`` computes with them).
Region = tuple[tuple[int, ...], tuple[int, ...]]

SHD = RuleTable(version=2, file=None)
rule = SHD.rule

# Every structural defect of a tag 10 node, found by the exact parser (tree/sharded.py).
SHD.declare("R-SHD-4", TreeError)


@rule("R-SHD-1", TreeError)
def sharded_node_allowed(kind_version: int) -> str | None:
    """Tag 10 appears only in a ``tree`` component of kind_version 2 (format version 2)."""
    if kind_version >= 2:
        return None
    return f"a sharded array (tag 10) in a tree component of kind_version {kind_version}; it needs kind_version 2"


@rule("R-LIM-20", LimitExceeded)
def shard_count(count: int) -> str | None:
    if count > SHARDS_MAX_PER_ARRAY:
        return f"{count} shard records, limit {SHARDS_MAX_PER_ARRAY}"
    return None


@rule("R-SHD-5", TreeError)
def record_ndim(ndim: int, start: Sequence[int], size: Sequence[int]) -> str | None:
    """``start`` and ``size`` of a shard record have one element per dimension of the global shape."""
    if len(start) == len(size) == ndim:
        return None
    return f"start has {len(start)} and size {len(size)} elements; the array has {ndim} dimensions"


@rule("R-SHD-6", ArrayLayoutError)
def inside_shape(shape: Sequence[int], start: Sequence[int], size: Sequence[int]) -> str | None:
    """Every shard region lies inside the global shape."""
    for d, (s, n, dim) in enumerate(zip(start, size, shape, strict=True)):
        if s + n > dim:
            return f"region [{s}, {s + n}) of dimension {d} is outside the global shape {list(shape)}"
    return None


@rule("R-SHD-7", ArrayLayoutError)
def shard_file(file: str, data_files: Collection[str]) -> str | None:
    """A shard's ``file`` is a data file of the component: ``data.bin`` or a listed shard data file."""
    if file in data_files:
        return None
    return f"shard file {file!r} is not a data file of this component (has: {sorted(data_files)[:8]})"[:300]


@rule("R-SHD-8", ArrayLayoutError)
def regions_not_empty(shape: Sequence[int], regions: Sequence[Region]) -> str | None:
    """A zero-element array has no shard; otherwise no shard region is empty."""
    if any(dim == 0 for dim in shape):
        return None if not regions else f"a zero-element array of shape {list(shape)} has shard records"
    for index, (_, size) in enumerate(regions):
        if any(n == 0 for n in size):
            return f"shard record {index} has an empty region (size {list(size)})"
    return None


@rule("R-SHD-9", ArrayLayoutError)
def identical_or_disjoint(shape: Sequence[int], starts: np.ndarray, sizes: np.ndarray,
                          names: Sequence[str]) -> str | None:
    """Two distinct shard regions share no element (identical regions are replicas).

    Checked with R-SHD-11 as one property (§S.5): the distinct regions tile the shape. When they do not,
    the failure is R-SHD-9's when they hold at least as many elements as the shape (then two of them
    overlap), else R-SHD-11's (a gap), whatever else is wrong.
    """
    total = math.prod(shape)
    held = covered(sizes.tolist())
    if held < total or tiles(shape, starts, sizes):
        return None
    pair = overlapping_pair(starts, sizes)
    if pair is not None:
        return f"shard records {names[pair[0]]} and {names[pair[1]]} overlap without being the same region"
    return (f"the {len(starts)} distinct shard regions hold {held} elements together for a shape of {total}, "
            "and do not tile it: two of them overlap without being the same region")


@rule("R-SHD-10", ArrayLayoutError)
def replicas_agree(first: str, other: str, crcs: tuple[int, int]) -> str | None:
    """Replicas (shard records of one region) have equal crc32c: they hold the same bytes."""
    if crcs[0] == crcs[1]:
        return None
    return f"shard records {first} and {other} are replicas of one region with different crc32c"


@rule("R-SHD-11", ArrayLayoutError)
def regions_cover(shape: Sequence[int], sizes: Sequence[Sequence[int]]) -> str | None:
    """The distinct shard regions cover every element of the global shape (after R-SHD-9: they tile it, or
    hold fewer elements than it)."""
    total = math.prod(shape)
    held = covered(sizes)
    if held >= total:
        return None
    return f"the distinct shard regions hold {held} of the {total} elements: at least {total - held} uncovered (a gap)"


def tiling_error(shape: tuple[int, ...], regions: Sequence[Region], crcs: Sequence[int] | None = None,
                 names: Sequence[str] | None = None, where: str = "$") -> CheckpointError | None:
    """The first of R-SHD-6, R-SHD-8, R-SHD-9, R-SHD-10, R-SHD-11 (in this order) that ``regions`` break, or None.

    ``crcs`` (one per region) makes identical regions replicas that must agree;
    ``names`` label regions in messages (tree paths of shard records).
    """
    labels = list(names) if names is not None else [f"#{i}" for i in range(len(regions))]
    for (start, size), label in zip(regions, labels, strict=True):
        error = SHD.check("R-SHD-6", label, shape, start, size)
        if error is not None:
            return error
    error = SHD.check("R-SHD-8", where, shape, regions)
    if error is not None:
        return error
    if not regions:  # nothing to pair up; a shape with any element is then one gap (R-SHD-11)
        return SHD.check("R-SHD-11", where, shape, [])
    first: dict[Region, int] = {}
    replicas: list[tuple[int, int]] = []
    for index, region in enumerate(regions):
        seen = first.setdefault(region, index)
        if seen != index:
            replicas.append((seen, index))
    unique = list(first)
    starts = np.array([r[0] for r in unique], dtype=np.int64).reshape(len(unique), len(shape))
    sizes = np.array([r[1] for r in unique], dtype=np.int64).reshape(len(unique), len(shape))
    error = SHD.check("R-SHD-9", where, shape, starts, sizes, [labels[first[r]] for r in unique])
    if error is not None:
        return error
    for seen, index in replicas if crcs is not None else ():
        assert crcs is not None  # for mypy: the loop runs only with crcs
        error = SHD.check("R-SHD-10", labels[index], labels[seen], labels[index], (crcs[seen], crcs[index]))
        if error is not None:
            return error
    return SHD.check("R-SHD-11", where, shape, [r[1] for r in unique])
