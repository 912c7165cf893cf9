"""The two computations behind the tiling rules (R-SHD-9, R-SHD-11), bounded for 65,536 shards (R-LIM-20).

No Python loop over pairs of regions: :func:`find_overlap` counts covers on
the compressed grid of region boundaries (vectorised) or, when that grid is
too big, sweeps once along one dimension and compares each region with the
open ones in one NumPy operation; :func:`uncovered` sums volumes, exact in
Python integers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

#: The compressed grid of :func:`_grid_overlap` is used up to this many cells and dimensions.
_GRID_CELLS = 1 << 22
_GRID_NDIM = 8
#: Up to this many regions, every pair is compared in plain Python (:func:`_pairwise_overlap`): at most
#: ~500 comparisons, cheaper than the NumPy set-up of the grid for the few shards of a usual array.
_PAIRWISE = 32


def find_overlap(starts: np.ndarray, sizes: np.ndarray) -> tuple[int, int] | None:
    """Two distinct regions (rows) that share an element, or None.

    First on the compressed grid of all region boundaries when it is small
    (:func:`_grid_overlap`: every sharding that is a grid, fully vectorised),
    else by a sweep (:func:`_sweep_overlap`).
    """
    count, ndim = starts.shape
    if count < 2:
        return None
    if ndim == 0:
        return 0, 1
    if count <= _PAIRWISE:
        return _pairwise_overlap(starts.tolist(), (starts + sizes).tolist())
    if ndim <= _GRID_NDIM:
        found = _grid_overlap(starts, sizes)
        if not isinstance(found, bool):
            return found
    return _sweep_overlap(starts, sizes)


def _pairwise_overlap(starts: list[list[int]], ends: list[list[int]]) -> tuple[int, int] | None:
    """Two regions that share an element, comparing every pair (few regions: see :data:`_PAIRWISE`)."""
    for i, (low, high) in enumerate(zip(starts, ends, strict=True)):
        for j in range(i + 1, len(starts)):
            if all(a < d and c < b for a, b, c, d in zip(low, high, starts[j], ends[j], strict=True)):
                return i, j
    return None


def _grid_overlap(starts: np.ndarray, sizes: np.ndarray) -> tuple[int, int] | bool | None:  # False: grid too big
    """Overlap by counting, per cell of the grid that all region boundaries cut, how many regions cover it.

    Each region adds +1/-1 at the 2^ndim corners of its box in a difference
    array whose prefix sums are the cover counts. Returns False when the grid
    would exceed :data:`_GRID_CELLS` cells (the caller sweeps instead).
    """
    ends = starts + sizes
    axes = [np.unique(np.concatenate([starts[:, d], ends[:, d]])) for d in range(starts.shape[1])]
    if math.prod(len(a) for a in axes) > _GRID_CELLS:
        return False
    low = np.stack([np.searchsorted(a, starts[:, d]) for d, a in enumerate(axes)], axis=1)
    high = np.stack([np.searchsorted(a, ends[:, d]) for d, a in enumerate(axes)], axis=1)
    counts = np.zeros([len(a) for a in axes], dtype=np.int64)
    for corner in range(1 << len(axes)):
        picks = [(corner >> d) & 1 for d in range(len(axes))]
        index = tuple(np.where(pick, high[:, d], low[:, d]) for d, pick in enumerate(picks))
        np.add.at(counts, index, -1 if sum(picks) % 2 else 1)
    for d in range(len(axes)):
        counts = np.cumsum(counts, axis=d)
    crowded = np.argwhere(counts > 1)
    if not len(crowded):
        return None
    cell = crowded[0]
    holders = np.flatnonzero(np.all((low <= cell) & (cell < high), axis=1))
    return int(holders[0]), int(holders[1])


def _sweep_overlap(starts: np.ndarray, sizes: np.ndarray) -> tuple[int, int] | None:
    """Two distinct regions (rows) that share an element, or None; ``O(n log n + n x active)``, vectorised.

    A sweep along the dimension with the most distinct starts: regions are taken
    in order of their start there, and each is compared (in one NumPy operation)
    only with the regions still open at that start. In a tiling the open regions
    are the ones cut by one hyperplane, so a grid of ``k x k`` shards compares
    each shard with at most ``k`` others.
    """
    ends = starts + sizes
    ndim = starts.shape[1]
    axis = int(np.argmax([len(np.unique(starts[:, d])) for d in range(ndim)]))
    order = np.argsort(starts[:, axis], kind="stable")
    active = np.empty(0, dtype=np.int64)
    for index in order:
        low, high = starts[index], ends[index]
        active = active[ends[active, axis] > low[axis]]
        if active.size:
            hit = np.all((starts[active] < high) & (ends[active] > low), axis=1)
            if hit.any():
                return int(active[int(np.argmax(hit))]), int(index)
        active = np.append(active, index)
    return None


def uncovered(shape: Sequence[int], sizes: Sequence[Sequence[int]]) -> int:
    """Elements of ``shape`` that pairwise disjoint regions of these sizes leave uncovered."""
    return math.prod(shape) - sum(math.prod(size) for size in sizes)
