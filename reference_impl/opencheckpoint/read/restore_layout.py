"""Layout transforms of a restore: a target key filled from a stored key with its axes permuted.

A Flax kernel is the transpose of a torch ``Linear`` weight, so moving a model
between the frameworks renames *and* transposes. A **source map** says, for a
target key path, which stored key path fills it and how its axes are permuted
(:class:`Source`); :func:`sources` turns it into a ``rename=`` callable for
:meth:`Checkpoint.load <opencheckpoint.Checkpoint.load>` and
:func:`~opencheckpoint.read_component`. The renamed key it returns is a
:class:`Permuted` string carrying the axes: :class:`~opencheckpoint.read.restore_plan.RestorePlan`
then permutes the value — an array at once, and a stored array not read yet by
wrapping its handle (:class:`PermutedHandle`), whose region reads read the
stored region that holds the permuted one and transpose it. So a sharded
restore (FSDP2 DTensors, a JAX mesh) still reads, on each rank, only the shards
its own block needs.

>>> import numpy as np
>>> rename = sources({"dense.kernel": Source("0.weight", (1, 0)), "dense.bias": "0.bias"})
>>> key = rename("0.weight")
>>> key, key.axes, rename("0.bias"), rename("1.weight")
('dense.kernel', (1, 0), 'dense.bias', None)
>>> permute_value(np.arange(6).reshape(2, 3), key.axes).shape
(3, 2)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..format.errors import IncompatibleComponent

Region = tuple[tuple[int, ...], tuple[int, ...]]


@dataclass(frozen=True)
class Source:
    """Where a target key's value comes from: the stored key path and the permutation of its axes
    (``axes[i]`` is the stored axis that becomes axis ``i``, as ``numpy.transpose``); None keeps them."""

    key: str
    axes: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if type(self.key) is not str or not self.key:
            raise TypeError(f"Source key must be a non-empty key path, got {self.key!r}")
        if self.axes is not None and sorted(self.axes) != list(range(len(self.axes))):
            raise TypeError(f"Source axes must be a permutation of 0..n-1, got {self.axes!r}")


class Permuted(str):
    """A target key path (what a ``rename=`` callable returns) whose value is the stored one with ``axes``
    permuted."""

    axes: tuple[int, ...]

    def __new__(cls, key: str, axes: Sequence[int]) -> Permuted:
        self = super().__new__(cls, key)
        self.axes = tuple(int(a) for a in axes)
        return self


def sources(mapping: Mapping[str, Source | str]) -> Callable[[str], str | None]:
    """A ``rename=`` callable from a source map (target key path -> :class:`Source` or stored key path).

    Stored keys that fill no target key map to None (left unused); two target keys from one stored key are
    refused (a value is restored once).
    """
    inverse: dict[str, str] = {}
    for target, source in mapping.items():
        spec = source if isinstance(source, Source) else Source(source)
        if spec.key in inverse:
            raise TypeError(f"stored key {spec.key!r} is the source of both {inverse[spec.key]!r} and {target!r}")
        inverse[spec.key] = Permuted(target, spec.axes) if spec.axes is not None else target
    return inverse.get


def axes_of(key: str) -> tuple[int, ...] | None:
    """The permutation a renamed key carries (:class:`Permuted`), or None."""
    axes = getattr(key, "axes", None)
    return None if axes is None or axes == tuple(range(len(axes))) else axes


def permute_value(value: Any, axes: tuple[int, ...]) -> Any:
    """``value`` with its axes permuted: a stored array handle wrapped (read later, region by region), a
    NumPy array, torch tensor or JAX array transposed into C-ordered memory of its own."""
    ndim = len(getattr(value, "shape", ()))
    if not hasattr(value, "shape") or ndim != len(axes):
        raise IncompatibleComponent(f"a permutation of {len(axes)} axes {list(axes)} cannot apply to "
                                    f"{type(value).__name__} of shape {list(getattr(value, 'shape', ()))}")
    if hasattr(value, "read_region") and hasattr(value, "read"):
        return PermutedHandle(value, axes)
    if hasattr(value, "permute") and not isinstance(value, np.ndarray):  # torch
        return value.permute(*axes).contiguous()
    if isinstance(value, np.ndarray):
        return np.ascontiguousarray(value.transpose(axes))
    return value.transpose(axes)  # JAX


class PermutedHandle:
    """A stored array not read yet, seen with its axes permuted: shape and dtype now, regions on demand.

    A region of the permuted array is the transpose of one region of the stored array, so
    :meth:`read_region` reads (and verifies) only the stored shards that region overlaps.
    """

    def __init__(self, base: Any, axes: tuple[int, ...]) -> None:
        self.base = base
        self.axes = axes
        self.shape = tuple(int(base.shape[a]) for a in axes)
        self.dtype = base.dtype

    def stored_region(self, start: Sequence[int], size: Sequence[int]) -> Region:
        """The region of the stored array that holds the permuted region ``start .. start + size``."""
        stored_start, stored_size = [0] * len(self.axes), [0] * len(self.axes)
        for axis, source in enumerate(self.axes):
            stored_start[source], stored_size[source] = int(start[axis]), int(size[axis])
        return tuple(stored_start), tuple(stored_size)

    def permute(self, block: np.ndarray) -> np.ndarray:
        """A block of the stored array as the matching block of the permuted one (C order, its own memory)."""
        return np.ascontiguousarray(block.transpose(self.axes))

    def read_region(self, start: Sequence[int], size: Sequence[int], *, verify: bool = True) -> np.ndarray:
        return self.permute(self.base.read_region(*self.stored_region(start, size), verify=verify))

    def read(self, *, verify: bool = True) -> np.ndarray:
        return self.permute(self.base.read(verify=verify))

    def __repr__(self) -> str:
        return f"PermutedHandle({self.base!r}, axes={list(self.axes)})"


__all__ = ["Permuted", "PermutedHandle", "Source", "axes_of", "permute_value", "sources"]
