"""Open an existing checkpoint in whichever form it has (steps 1 and 2 of spec §15).

The only module that knows both forms: :mod:`.base` defines the interface and the forms
implement it, so the imports run one way (opener -> archive/directory -> base).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import NotACheckpoint
from .archive import ArchiveSource
from .base import Source, check_locatable
from .directory import DirectorySource


def open_source(path: str | os.PathLike[str]) -> Source:
    """Open an existing directory or archive checkpoint for reading (steps 1 and 2, no fallback)."""
    target = Path(path)
    if not os.path.exists(target):
        raise NotACheckpoint("no such file or directory", file=str(target), rule="R-PUB-10")
    check_locatable(target)
    if target.is_dir():
        return DirectorySource(target)
    return ArchiveSource(target)
