"""The two computations behind the tiling rules (R-SHD-9, R-SHD-11), bounded for 65,536 shards (R-LIM-20).

No Python loop over pairs of regions: :func:`find_overlap` sweeps once along
one dimension and compares each region with the open ones in one NumPy
operation; :func:`uncovered` sums volumes, exact in Python integers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def find_overlap(starts: np.ndarray, sizes: np.ndarray) -> tuple[int, int] | None:
    """Two distinct regions (rows) that share an element, or None; ``O(n log n + n x active)``, vectorised.

    A sweep along the dimension with the most distinct starts: regions are taken
    in order of their start there, and each is compared (in one NumPy operation)
    only with the regions still open at that start. In a tiling the open regions
    are the ones cut by one hyperplane, so a grid of ``k x k`` shards compares
    each shard with at most ``k`` others.
    """
    count, ndim = starts.shape
    if count < 2:
        return None
    if ndim == 0:
        return 0, 1
    ends = starts + sizes
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
