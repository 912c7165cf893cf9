"""An async save's snapshot: every planned array extent copied into one host buffer the plan owns.

:func:`take` copies the extents of a :class:`~.plan.SavePlan` (torch tensors,
CUDA ones included, and JAX arrays were already turned into NumPy arrays by
their adapters while planning) into one buffer and points the plan at the
copies, so the live state may change as soon as it returns; :func:`give_back`
keeps that buffer for the next snapshot once the plan is written.

A training loop saves the same state again and again: copying into memory
already mapped avoids the page faults that make copying into fresh memory
several times slower than memcpy (at most one buffer is kept; see
:func:`release_buffers`).
"""

from __future__ import annotations

import os
import threading

import numpy as np

from ..format.limits import ALIGNMENT
from .plan import SavePlan

__all__ = ["give_back", "release_buffers", "take"]

_spare: list[np.ndarray] = []
_spare_lock = threading.Lock()


def _buffer(nbytes: int) -> np.ndarray:
    """A host buffer of at least ``nbytes``: the spare one if it is big enough, else a new one."""
    with _spare_lock:
        spare = _spare.pop() if _spare else None
    if spare is not None and spare.nbytes >= nbytes:
        return spare
    del spare  # too small: freed before the new one is allocated
    return np.empty(max(nbytes, 1), dtype=np.uint8)


def _after_fork_in_child() -> None:
    global _spare_lock
    _spare_lock = threading.Lock()  # a writer thread the child does not have may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)


def release_buffers() -> None:
    """Free the host buffer kept from the last finished async save (the next one allocates afresh)."""
    with _spare_lock:
        _spare.clear()


def take(plan: SavePlan) -> None:
    """Copy every planned array extent into one host buffer the plan owns (:attr:`SavePlan.nbytes` bytes)."""
    arena = plan.arena = _buffer(plan.nbytes)
    offset = 0
    for extent in plan.extents:
        source = extent.array
        copy = arena[offset : offset + extent.nbytes].view(source.dtype).reshape(source.shape)
        np.copyto(copy, source, casting="no")
        extent.array = copy
        offset += -(-extent.nbytes // ALIGNMENT) * ALIGNMENT


def give_back(plan: SavePlan) -> None:
    """The plan is written (or failed): keep its buffer as the spare for the next snapshot."""
    arena, plan.arena = plan.arena, None
    if arena is not None:
        with _spare_lock:
            if not _spare or _spare[0].nbytes < arena.nbytes:
                _spare[:] = [arena]
