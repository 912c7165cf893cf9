"""Modules that keep the tensors ``load_state_dict`` gives them: detected, then given owned tensors.

:class:`~opencheckpoint.adapters.torch.ModuleAdapter` hands ``load_state_dict``
tensors that are views of a read-only map of the checkpoint's data file, to
be copied from. A module whose ``load_state_dict`` assigns what it is given
instead (``super().load_state_dict(sd, assign=True)``, usual after building on
the meta device) would be left holding parameters in that map: the first
in-place update (an optimizer step) writes to a read-only page and the
process dies, and the parameters would follow the file. After the call,
:class:`MapRanges` tells, from each parameter's and buffer's data pointer
alone (no pass over the bytes), whether the module kept memory of the views;
if it did, :func:`load_owning` calls ``load_state_dict`` again with fresh,
owned tensors read from the file (verified like any read).
"""

from __future__ import annotations

import bisect
import contextlib
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

import torch


class MapRanges:
    """The address ranges of the storages of the given CPU tensors (the views of a map), merged and sorted."""

    __slots__ = ("_starts", "_ends")

    def __init__(self, tensors: Iterable[Any]) -> None:
        spans = sorted((storage.data_ptr(), storage.data_ptr() + storage.nbytes())
                       for storage in (t.untyped_storage() for t in tensors if _plain_cpu(t)) if storage.nbytes())
        starts: list[int] = []
        ends: list[int] = []
        for start, end in spans:
            if ends and start <= ends[-1]:
                ends[-1] = max(ends[-1], end)
            else:
                starts.append(start)
                ends.append(end)
        self._starts = starts
        self._ends = ends

    def holds(self, tensor: Any) -> bool:
        """Whether ``tensor``'s memory lies in one of the ranges."""
        if not self._starts or not _plain_cpu(tensor) or not tensor.untyped_storage().nbytes():
            return False
        pointer = tensor.untyped_storage().data_ptr()
        index = bisect.bisect_right(self._starts, pointer) - 1
        return index >= 0 and pointer < self._ends[index]

    def kept_by(self, module: torch.nn.Module) -> bool:
        """Whether a parameter or buffer of ``module`` lives in the ranges."""
        return any(self.holds(t) for t in (*module.parameters(), *module.buffers()))


def _plain_cpu(tensor: Any) -> bool:
    return isinstance(tensor, torch.Tensor) and type(tensor).__name__ != "DTensor" and tensor.device.type == "cpu"


def load_owning(module: torch.nn.Module, state: Any, ranges: MapRanges, load: Callable[[Any], None],
                fresh: Callable[[], dict[str, Any]], name: str) -> None:
    """``load(state)``; when ``module`` then holds memory in ``ranges`` (the map ``state``'s views live in),
    ``load`` again with each tensor of ``state`` in the ranges replaced by its counterpart from ``fresh()``
    (keyed like ``state``; converted tensors, owned already, stay).

    When the first call raises (any exception, a ``KeyboardInterrupt`` too) after the
    module kept such memory, the second call is made as well, and the first error raised.
    """
    try:
        load(state)
    except BaseException:
        if ranges.kept_by(module):
            with contextlib.suppress(Exception):  # the first call's error is the one raised
                load(_owned(state, ranges, fresh()))
        raise
    if not ranges.kept_by(module):
        return
    load(_owned(state, ranges, fresh()))
    if ranges.kept_by(module):
        warnings.warn(f"component {name!r}: {type(module).__name__} still holds tensors of the checkpoint's "
                      "read-only map after a second load_state_dict with owned tensors: an in-place update of "
                      "them will crash the process", RuntimeWarning, stacklevel=6)


def _owned(state: Any, ranges: MapRanges, fresh: dict[str, Any]) -> Any:
    """``state`` with every tensor in the ranges replaced by ``fresh``'s (same keys), ``_metadata`` kept."""
    owned = OrderedDict((key, fresh[key] if ranges.holds(value) else value) for key, value in state.items())
    metadata = getattr(state, "_metadata", None)
    if metadata is not None:
        owned._metadata = metadata  # type: ignore[attr-defined]  # torch's convention
    return owned
