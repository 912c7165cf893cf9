"""The computation behind the tiling rules (R-SHD-9, R-SHD-11): whether distinct regions tile a shape.

The regions tile the shape when every element lies in exactly one of them,
that is when ``sum(1[region]) - 1[shape]`` is zero everywhere. :func:`tiles`
decides this without comparing pairs of regions: the function is zero exactly
when its signed corner points cancel (the mixed difference of a box's
indicator is +1/-1 at its 2^d corners), and they are summed one dimension at
a time, merging equal partial corners as soon as they meet, so a grid of
one-element shards never has more than about ``2 n`` rows in flight. Every
step is a NumPy sort over those rows (two keys: the corner so far, and an id
of the box's dimensions not summed yet): ``O(r log r)`` per dimension for
``r`` rows, with no Python loop over regions. Dimensions that
every region spans whole are dropped first. When corners do not meet (cuts
at distinct places in many dimensions), the rows would double per dimension:
past a budget of rows (:data:`_ROWS_PER_REGION` per region, at least
:data:`_ROWS_MIN_BUDGET`), a sweep that compares each
region with the open ones decides instead (at most ``n (n - 1) / 2`` box tests,
bounded by R-LIM-20). The spec (§S.4) states the outcome, not this method.

>>> import numpy as np
>>> tiles((2, 2), np.array([[0, 0], [1, 0]]), np.array([[1, 2], [1, 2]]))
True
>>> tiles((2, 2), np.array([[0, 0], [0, 1]]), np.array([[2, 1], [1, 1]]))
False
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

#: Rows in flight per region before :func:`tiles` gives up summing corners (they meet in grids and most
#: layouts; cuts at distinct places in many dimensions double them per dimension) and sweeps instead.
_ROWS_PER_REGION = 16
#: ... and at least this many (about 200 MiB of row arrays): random cuts in 8 dimensions fit.
_ROWS_MIN_BUDGET = 1 << 22
#: Up to this many regions, an overlapping pair is named in messages by comparing every pair (at most
#: ~500 comparisons); for more, the message gives the element counts only.
_PAIRWISE = 32


def tiles(shape: Sequence[int], starts: np.ndarray, sizes: np.ndarray) -> bool:
    """Whether the distinct regions (rows of ``starts``/``sizes``, inside ``shape``) cover every element once."""
    shape_row = np.asarray(shape, dtype=np.int64).reshape(1, len(shape))
    lows = np.vstack([starts.astype(np.int64), np.zeros_like(shape_row)])
    highs = np.vstack([(starts + sizes).astype(np.int64), shape_row])
    whole = np.all((lows == 0) & (highs == shape_row), axis=0)  # dimensions no region splits
    lows, highs = lows[:, ~whole], highs[:, ~whole]
    ndim = lows.shape[1]
    # rest[d][i]: one id per distinct (lows[i, d:], highs[i, d:]): the part of box i not summed yet
    rest = [np.zeros(len(lows), dtype=np.int64)]
    for d in reversed(range(ndim)):
        rest.insert(0, _ids(lows[:, d], highs[:, d], rest[0]))
    signs = np.ones(len(lows), dtype=np.int64)
    signs[-1] = -1  # the shape itself, subtracted
    boxes, groups = np.arange(len(lows)), np.zeros(len(lows), dtype=np.int64)
    boxes, groups, signs = _merge(boxes, groups, signs, rest[0])
    budget = max(_ROWS_PER_REGION * len(lows), _ROWS_MIN_BUDGET)
    for d in range(ndim):
        if not len(signs):
            break
        if len(signs) > budget:  # corners that do not meet (irregular cuts in many dimensions)
            return _sweep_overlap(starts, sizes) is None and covered(sizes.tolist()) == math.prod(shape)
        # One more dimension summed: each row becomes its low corner (+) and its high corner (-) there.
        coords = np.concatenate([lows[boxes, d], highs[boxes, d]])
        boxes, groups = np.concatenate([boxes, boxes]), _ids(np.concatenate([groups, groups]), coords)
        signs = np.concatenate([signs, -signs])
        boxes, groups, signs = _merge(boxes, groups, signs, rest[d + 1])
    return not len(signs)


def _ids(*columns: np.ndarray) -> np.ndarray:
    """One int64 id per distinct row of the given columns (equal rows, equal ids), by one lexicographic sort."""
    order = np.lexsort(columns[::-1])
    fresh = np.zeros(len(order), dtype=bool)
    for column in columns:
        ordered = column[order]
        fresh[1:] |= ordered[1:] != ordered[:-1]
    ids = np.empty(len(order), dtype=np.int64)
    ids[order] = np.cumsum(fresh)
    return ids


def _merge(boxes: np.ndarray, groups: np.ndarray, signs: np.ndarray,
           rest: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of one group and one remaining box summed into one; rows whose signs cancel dropped."""
    ids = _ids(groups, rest[boxes])
    total = np.bincount(ids, weights=signs).astype(np.int64)
    first = np.full(len(total), len(ids), dtype=np.int64)
    np.minimum.at(first, ids, np.arange(len(ids)))
    keep = np.flatnonzero(total)
    return boxes[first[keep]], groups[first[keep]], total[keep]


def _sweep_overlap(starts: np.ndarray, sizes: np.ndarray) -> tuple[int, int] | None:
    """Two distinct regions (rows) that share an element, or None; ``O(n log n + n x open)``, vectorised.

    The fallback of :func:`tiles`: a sweep along the dimension with the most distinct starts, each
    region compared (in one NumPy operation) with the regions still open at its start. At most
    ``n (n - 1) / 2`` box tests for ``n`` regions (bounded by R-LIM-20).
    """
    ends = starts + sizes
    axis = int(np.argmax([len(np.unique(starts[:, d])) for d in range(starts.shape[1])]))
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


def covered(sizes: Sequence[Sequence[int]]) -> int:
    """The elements the regions of these sizes hold together, counted once per region (exact integers)."""
    return sum(math.prod(size) for size in sizes)


def overlapping_pair(starts: np.ndarray, sizes: np.ndarray) -> tuple[int, int] | None:
    """Two regions that share an element, for a message: found among at most :data:`_PAIRWISE` regions."""
    if len(starts) > _PAIRWISE:
        return None
    low, high = starts.tolist(), (starts + sizes).tolist()
    for i in range(len(low)):
        for j in range(i + 1, len(low)):
            if all(a < d and c < b for a, b, c, d in zip(low[i], high[i], low[j], high[j], strict=True)):
                return i, j
    return None
