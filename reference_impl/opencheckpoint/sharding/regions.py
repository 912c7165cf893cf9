"""Index regions of an n-dimensional array: intersection, NumPy-style keys, and tilings.

A :data:`Region` is ``(start, size)``: the elements ``start[d] .. start[d] + size[d]``
of every dimension ``d``. Shard records of a sharded array (tag 10) are regions
of its global shape; a region read asks for one.

>>> intersect(((0, 0), (4, 4)), ((2, 3), (4, 4)))
((2, 3), (2, 1))
>>> slices_to_region((8, 6), (slice(0, 4), 2))
((0, 2), (4, 1))
>>> check_tiling((4,), [((0,), (2,)), ((3,), (1,))])
Traceback (most recent call last):
...
opencheckpoint.format.errors.ArrayLayoutError: ArrayLayoutError: $: the shard regions leave 1 of 4 elements uncovered (a gap) [R-SHD-11]
"""  # noqa: E501  (doctest: an error message is shown whole, as users see it)

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..tree.decode import empty_array

#: ``(start, size)`` per dimension.
Region = tuple[tuple[int, ...], tuple[int, ...]]


def intersect(a: Region, b: Region) -> Region | None:
    """The common part of two regions of one array, or None when they share no element."""
    start = tuple(max(x, y) for x, y in zip(a[0], b[0], strict=True))
    stop = tuple(min(x + n, y + m) for x, n, y, m in zip(a[0], a[1], b[0], b[1], strict=True))
    if any(lo >= hi for lo, hi in zip(start, stop, strict=True)):
        return None
    return start, tuple(hi - lo for lo, hi in zip(start, stop, strict=True))


def region_slices(region: Region, origin: Sequence[int]) -> tuple[slice, ...]:
    """The slices that select ``region`` in an array whose element 0 sits at ``origin``."""
    return tuple(slice(s - o, s - o + n) for s, n, o in zip(region[0], region[1], origin, strict=True))


def index_plan(shape: Sequence[int], key: Any) -> tuple[Region, tuple[int | slice | None, ...]]:
    """NumPy basic indexing ``array[key]`` as a bounding region plus the index to apply inside it (:func:`select`).

    ``key`` holds ints, slices (any step), at most one Ellipsis and None
    (``np.newaxis``: a new dimension of length 1, as in NumPy); missing trailing
    dimensions are whole. Other keys (arrays, bools) raise :class:`TypeError`,
    out-of-range ints :class:`IndexError`, as NumPy does.
    """
    items = key if isinstance(key, tuple) else (key,)
    if sum(item is Ellipsis for item in items) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    named = sum(item is not Ellipsis and item is not None for item in items)
    if named > len(shape):
        raise IndexError(f"too many indices for array: array is {len(shape)}-dimensional, but {named} were indexed")
    expanded: list[Any] = []
    for item in items:
        if item is Ellipsis:
            expanded.extend([slice(None)] * (len(shape) - named))
        else:
            expanded.append(item)
    expanded.extend([slice(None)] * (len(shape) - sum(item is not None for item in expanded)))
    dimensions = iter(shape)
    plans = [None if item is None else _dimension_plan(next(dimensions), item) for item in expanded]
    picked = [plan for plan in plans if plan is not None]
    inner = tuple(None if plan is None else plan[2] for plan in plans)
    return (tuple(p[0] for p in picked), tuple(p[1] for p in picked)), inner


def select(part: np.ndarray, inner: Sequence[int | slice | None]) -> np.ndarray:
    """``part[inner]`` (basic indexing, one item per dimension plus Nones), also for a zero-element
    ``part`` NumPy refuses to index (a huge shape with a zero dimension: the result is empty too)."""
    if part.size:
        return part[tuple(inner)]
    shape: list[int] = []
    sizes = iter(part.shape)
    for item in inner:
        if item is None:
            shape.append(1)
            continue
        size = next(sizes)
        if isinstance(item, slice):
            shape.append(len(range(*item.indices(size))))
    return empty_array(tuple(shape), part.dtype)


def _dimension_plan(dim: int, item: Any) -> tuple[int, int, int | slice]:
    """(start, size, index inside the region) of one dimension's key."""
    if isinstance(item, slice):
        steps = range(*item.indices(dim))
        if not steps:
            return 0, 0, slice(0, 0)
        low, high = min(steps[0], steps[-1]), max(steps[0], steps[-1])
        stop = steps.stop - low
        return low, high - low + 1, slice(steps.start - low, stop if stop >= 0 else None, steps.step)
    if isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)):
        index = operator.index(item)
        if not -dim <= index < dim:
            raise IndexError(f"index {index} is out of bounds for axis with size {dim}")
        return index % dim, 1, 0
    raise TypeError(f"only integers, slices and Ellipsis are valid indices here, not {type(item).__name__}")


def slices_to_region(shape: Sequence[int], key: Any) -> Region:
    """The smallest region holding every element ``array[key]`` selects (see :func:`index_plan`)."""
    return index_plan(shape, key)[0]


def checked_region(shape: Sequence[int], start: Sequence[Any], size: Sequence[Any]) -> Region:
    """``(start, size)`` as a region of an array of ``shape``: ints only (:class:`TypeError` for a float or
    bool, which would silently pick another element), inside the shape (:class:`ValueError`)."""
    region = tuple(tuple(_index(value, name) for value in values) for name, values in (("start", start),
                                                                                         ("size", size)))
    check_region(shape, *region)
    return region[0], region[1]


def _index(value: Any, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} elements must be ints, not {type(value).__name__} ({value!r})")
    return operator.index(value)


def check_region(shape: Sequence[int], start: Sequence[int], size: Sequence[int]) -> None:
    """Raise :class:`ValueError` unless ``(start, size)`` is a region of an array of ``shape``."""
    if len(start) != len(shape) or len(size) != len(shape):
        raise ValueError(f"start {list(start)} and size {list(size)} need {len(shape)} elements each")
    for d, (s, n, dim) in enumerate(zip(start, size, shape, strict=True)):
        if s < 0 or n < 0 or s + n > dim:
            raise ValueError(f"region [{s}, {s + n}) of dimension {d} is outside the shape {list(shape)}")


def check_tiling(shape: Sequence[int], regions: Sequence[Region]) -> None:
    """Raise the R-SHD error of the first way ``regions`` fail to tile ``shape`` (writers check before saving).

    Identical regions are replicas (allowed); any other overlap, a region outside
    the shape, an empty region or a gap is an
    :class:`~opencheckpoint.format.errors.ArrayLayoutError` naming the rule.
    """
    from ..rules.sharded import tiling_error

    error = tiling_error(tuple(shape), [tuple(map(tuple, region)) for region in regions])  # type: ignore[misc]
    if error is not None:
        raise error
