"""Training runs: periodic saves, resuming, clean stops on signals, process-global RNG state.

Owns ``RunCheckpointer`` and ``resolve_checkpoint_path`` (``checkpointer``), ``StopOnSignal``
(``stop_signal``) and ``GlobalRNGState`` (``rng``); re-exports ``Rotation``. It sits above the
public API (``Checkpoint``, the write and read paths, adapters) and may import any of them; only
``tools/``, ``cli/``, ``examples/`` and the package root may import it.

>>> from opencheckpoint.run import RunCheckpointer, StopOnSignal
"""

from __future__ import annotations

from .checkpointer import (
    ARCHIVE_SUFFIX,
    ROTATION_KEY,
    Rotation,
    RotationEntry,
    RunCheckpointer,
    StopOnSignal,
    resolve_checkpoint_path,
)

__all__ = ["ARCHIVE_SUFFIX", "ROTATION_KEY", "Rotation", "RotationEntry", "RunCheckpointer", "StopOnSignal",
           "resolve_checkpoint_path"]
