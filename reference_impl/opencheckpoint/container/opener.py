"""Open an existing checkpoint in whichever form it has (steps 1 and 2 of spec §15).

The only module that knows both forms: :mod:`.base` defines the interface and the forms
implement it, so the imports run one way (opener -> archive/directory -> base).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..format.errors import CheckpointError
from ..rules import raise_if
from ..rules.container import CON
from .archive import ArchiveSource
from .base import Source, check_locatable
from .directory import DirectorySource
from .foreign import describe_foreign


def open_source(path: str | os.PathLike[str]) -> Source:
    """Open an existing directory or archive checkpoint for reading (steps 1 and 2, no fallback)."""
    target = Path(path)
    raise_if(CON.check("R-PUB-10", None, os.path.exists(target), file=str(target)))
    check_locatable(target)
    try:
        if target.is_dir():
            return DirectorySource(target)
        return ArchiveSource(target)
    except CheckpointError as exc:
        # Another tool's checkpoint (a .pt, safetensors, orbax...): say what it is and how to convert it.
        foreign = describe_foreign(target)
        if foreign is not None:
            exc.message += f" (this is {foreign})"
        raise
