"""Reading sharded arrays: verified assembly of a whole array or of any region, from the shards it overlaps.

A region read takes, for every distinct shard region that overlaps the region
asked for, the first of its replicas, checks that shard's CRC-32C (and bool
bytes) over its whole extent the first time it is used (R-ARR-14, R-ARR-13:
a checksum covers a whole shard, so a verified read of part of a shard reads
all of it once), and copies the overlapping part into the result. Shards
that do not overlap are never opened. ``verify=False`` (an explicit opt-out)
copies only the overlapping bytes from the memory map.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..arrays import array_view, verify_view
from ..dtypes import numpy_dtype
from ..tree.decode import empty_array
from ..tree.nodes import ShardedArrayRef, ShardRef
from .regions import Region, check_region, index_plan, intersect, region_slices


class ComponentFiles:
    """The data files of one tree component, mapped on first use: inventory key -> read-only memory map."""

    def __init__(self, map_file: Callable[[str, int], memoryview], component_path: str,
                 sizes: Mapping[str, int]) -> None:
        self._map_file = map_file
        self.component_path = component_path
        self._sizes = sizes
        self._maps: dict[str, memoryview] = {}

    def path(self, rel: str) -> str:
        """The file's path in the checkpoint (what errors name)."""
        return f"{self.component_path}/{rel}"

    def map(self, rel: str) -> memoryview:
        data = self._maps.get(rel)
        if data is None:
            data = self._maps[rel] = self._map_file(self.path(rel), self._sizes[rel])
        return data


class ShardedReads:
    """Region reads of one sharded array; remembers which shards it has verified."""

    def __init__(self, ref: ShardedArrayRef, files: ComponentFiles) -> None:
        self.ref = ref
        self.files = files
        self._verified: set[tuple[str, int, int, int]] = set()
        regions: dict[Region, ShardRef] = {}
        for shard in ref.shards:
            regions.setdefault((shard.start, shard.size), shard)  # replicas hold the same bytes (R-SHD-10)
        self.distinct: tuple[ShardRef, ...] = tuple(regions.values())

    def shard(self, shard: ShardRef, *, verify: bool) -> np.ndarray:
        """A read-only view of one shard's bytes (shape ``size``), verified once when ``verify``."""
        extent = shard.extent(self.ref.dtype)
        view = array_view(self.files.map(shard.file), extent)
        key = (shard.file, shard.offset, shard.nbytes, shard.crc32c)
        if verify and key not in self._verified:
            verify_view(view, extent, self.files.path(shard.file))
            self._verified.add(key)
        return view

    def overlapping(self, region: Region) -> list[tuple[ShardRef, Region]]:
        """The distinct shards that share an element with ``region``, each with the common part."""
        out = []
        for shard in self.distinct:
            common = intersect(region, (shard.start, shard.size))
            if common is not None:
                out.append((shard, common))
        return out

    def read_region(self, start: Sequence[int], size: Sequence[int], *, verify: bool = True) -> np.ndarray:
        """A fresh array of shape ``size`` holding the elements ``start .. start + size``."""
        start, size = tuple(int(s) for s in start), tuple(int(n) for n in size)
        check_region(self.ref.shape, start, size)
        out = empty_array(size, numpy_dtype(self.ref.dtype))
        if out.size == 0:
            return out
        for shard, common in self.overlapping((start, size)):
            view = self.shard(shard, verify=verify)
            out[region_slices(common, start)] = view[region_slices(common, shard.start)]
        return out

    def read(self, *, verify: bool = True) -> np.ndarray:
        """The whole array, assembled."""
        return self.read_region((0,) * len(self.ref.shape), self.ref.shape, verify=verify)


def assemble(ref: ShardedArrayRef, files: ComponentFiles, *, verify: bool = True) -> np.ndarray:
    """The whole sharded array as one fresh, writeable NumPy array, every shard used verified."""
    return ShardedReads(ref, files).read(verify=verify)


class LazyShardedArray:
    """A sharded array in a checkpoint, not yet read: shape and dtype now, any region's bytes on demand.

    ``handle[key]`` (ints, slices with any step, Ellipsis: NumPy basic indexing)
    and :meth:`read_region` read only the shards that overlap, each verified
    before use; :meth:`read` assembles the whole array (and keeps it).
    """

    __slots__ = ("ref", "_reads", "_full")

    def __init__(self, ref: ShardedArrayRef, files: ComponentFiles) -> None:
        self.ref = ref
        self._reads = ShardedReads(ref, files)
        self._full: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return self.ref.shape

    @property
    def dtype(self) -> str:
        return self.ref.dtype

    @property
    def nbytes(self) -> int:
        return self.ref.nbytes

    @property
    def shards(self) -> int:
        """Number of shard records (replicas included)."""
        return len(self.ref.shards)

    def read(self, *, verify: bool = True) -> np.ndarray:
        """The whole array (kept: a second call returns the same array)."""
        if self._full is None:
            self._full = self._reads.read(verify=verify)
        return self._full

    def read_region(self, start: Sequence[int], size: Sequence[int], *, verify: bool = True) -> np.ndarray:
        """Elements ``start[d] .. start[d] + size[d]`` of every dimension, as a fresh array of shape ``size``."""
        return self._reads.read_region(start, size, verify=verify)

    def __getitem__(self, key: Any) -> np.ndarray:
        region, inner = index_plan(self.ref.shape, key)
        return self._reads.read_region(*region)[inner]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        array = self.read()
        return array if dtype is None else array.astype(dtype)

    def __repr__(self) -> str:
        ref = self.ref
        return f"LazyShardedArray({ref.dtype}{list(ref.shape)}, {len(ref.shards)} shards, {ref.path})"
