"""Training runs: checkpoint rotation, periodic saves, resuming, clean stops on signals, process-global RNG state.

Owns :class:`Rotation` (:mod:`.rotation`: step-numbered checkpoints with a
retention policy, one class over any storage; its storage side in
:mod:`.rotation_store` (a local directory) and :mod:`.remote_store` (a prefix
of an object store), its policy and naming in :mod:`.rotation_policy`, a local
directory's state and lock in :mod:`.rotation_state`), ``RunCheckpointer`` and
``resolve_checkpoint_path`` (:mod:`.checkpointer`), ``StopOnSignal``
(:mod:`.stop_signal`) and ``GlobalRNGState`` (:mod:`.rng`). It sits above the
public API (``Checkpoint``, the write and read paths, adapters) and may import
any of them; only ``tools/``, ``cli/``, ``examples/`` and the package root may
import it.

* :class:`Rotation` keeps a directory of ``checkpoint-000000001234`` checkpoints
  (archives end in ``.ocp``): the ``keep_last`` most recently written, plus the
  best by a metric read from the manifest metadata. It deletes only checkpoints
  it wrote itself, never the one just written nor the newest valid one, and
  restoring falls back past a newest checkpoint that fails verification.
* :class:`RunCheckpointer` saves every ``interval`` steps and restores a run.
* :class:`StopOnSignal` turns SIGINT/SIGTERM into a stop request checked at
  loop boundaries.
* :func:`resolve_checkpoint_path` accepts a checkpoint or a run directory.

>>> from opencheckpoint.run import Rotation, RunCheckpointer, StopOnSignal
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..format.lazy_names import lazy_names

#: Public name -> the module that defines it, imported on first use (PEP 562): ``opencheckpoint ls``
#: needs only :mod:`.rotation_policy`, not the save path that ``RunCheckpointer`` and ``Rotation`` import.
_LAZY: dict[str, str] = {
    "RunCheckpointer": ".checkpointer",
    "resolve_checkpoint_path": ".checkpointer",
    "Rotation": ".rotation",
    "RotationEntry": ".rotation",
    "ARCHIVE_SUFFIX": ".rotation_policy",
    "ROTATION_KEY": ".rotation_policy",
    "StopOnSignal": ".stop_signal",
}

if TYPE_CHECKING:  # the names as static imports, for type checkers and the import graph
    from .checkpointer import RunCheckpointer as RunCheckpointer
    from .checkpointer import resolve_checkpoint_path as resolve_checkpoint_path
    from .rotation import Rotation as Rotation
    from .rotation import RotationEntry as RotationEntry
    from .rotation_policy import ARCHIVE_SUFFIX as ARCHIVE_SUFFIX
    from .rotation_policy import ROTATION_KEY as ROTATION_KEY
    from .stop_signal import StopOnSignal as StopOnSignal


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())


__all__ = ["ARCHIVE_SUFFIX", "ROTATION_KEY", "Rotation", "RotationEntry", "RunCheckpointer", "StopOnSignal",
           "resolve_checkpoint_path"]
