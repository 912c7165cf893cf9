"""Resuming training runs: checkpoint rotation, periodic saves, clean stops on signals.

Owns: :class:`Rotation` (:mod:`.rotation`: step-numbered checkpoints with a
retention policy, one class over any storage, its storage side in
:mod:`.rotation_store` (a local directory) and :mod:`.remote_store` (a prefix
of an object store), its policy and naming in :mod:`.rotation_policy`, a local
directory's state and lock in :mod:`.rotation_state`) and
:class:`RunCheckpointer` (:mod:`.checkpointer`: periodic and final saves,
resuming a run).

May import: the public API (``checkpoint``), the write pipeline (``write/``:
async saves), the read path (``reader``, ``validate``), storage
(``container/``, ``remote/``) and the format core. Nothing below imports
``run/``.

* :class:`Rotation` keeps a directory of ``checkpoint-000000001234`` checkpoints
  (archives end in ``.ocp``): the ``keep_last`` most recently written, plus the
  best by a metric read from the manifest metadata. It deletes only checkpoints
  it wrote itself, never the one just written nor the newest valid one, and
  restoring falls back past a newest checkpoint that fails verification.
* :class:`RunCheckpointer` saves every ``interval`` steps and restores a run.
* :class:`StopOnSignal` turns SIGINT/SIGTERM into a stop request checked at
  loop boundaries.
* :func:`resolve_checkpoint_path` accepts a checkpoint or a run directory.
"""

from __future__ import annotations

from ..stop_signal import StopOnSignal as StopOnSignal
from .checkpointer import RunCheckpointer as RunCheckpointer
from .checkpointer import resolve_checkpoint_path as resolve_checkpoint_path
from .rotation import Rotation as Rotation
from .rotation import RotationEntry as RotationEntry
from .rotation_policy import ARCHIVE_SUFFIX as ARCHIVE_SUFFIX
from .rotation_policy import ROTATION_KEY as ROTATION_KEY

__all__ = ["ARCHIVE_SUFFIX", "ROTATION_KEY", "Rotation", "RotationEntry", "RunCheckpointer", "StopOnSignal",
           "resolve_checkpoint_path"]
