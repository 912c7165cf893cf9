"""What a save may replace and the library may delete (spec R-PUB-16): nothing, or a checkpoint.

A path is *recognisably a checkpoint* when its ``manifest.json`` parses as
JSON and names the format (``"format": "opencheckpoint"``, any
``format_version``), and nothing is in it but ``manifest.json`` and the files
its manifest lists (with the directories that hold them). A damaged
checkpoint (a listed file missing, truncated or flipped) still is one: it
can be replaced. A directory with one file its manifest does not list, a
symbolic link, a FIFO, a file that is not an OpenCheckpoint archive: none is,
and nothing of the library replaces or deletes it. An empty directory holds
nothing to lose: a save may replace it.

>>> import tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> _ = (folder / "thesis.tex").write_text("chapter 1")
>>> try:
...     check_replaceable(folder, overwrite=True)
... except TargetExists as exc:
...     print(exc.message)
not an OpenCheckpoint checkpoint (no manifest.json); nothing was changed
>>> (folder / "thesis.tex").read_text()
'chapter 1'
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from ..errors import CheckpointError, TargetExists
from ..manifest import MANIFEST_NAME
from ..models import FORMAT_NAME
from ..strict_json import parse_ijson
from .base import old_candidates
from .opener import open_source


def not_a_checkpoint_reason(path: Path) -> str | None:
    """Why the existing ``path`` is not recognisably a checkpoint (None: it is one)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError as exc:
        return f"cannot stat it ({exc.strerror})"
    if stat.S_ISLNK(mode):
        return "a symbolic link (save to the path it points to, or remove the link)"
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        return "neither a directory nor a regular file"
    try:
        with open_source(path) as source:
            manifest = parse_ijson(source.read_manifest(), file=MANIFEST_NAME)
            listed = _listed_files(manifest)
            if listed is None:
                return f"not an OpenCheckpoint checkpoint ({MANIFEST_NAME} does not name the format)"
            found, errors, _rejected = source.inventory()
    except CheckpointError as exc:
        if not os.path.lexists(path / MANIFEST_NAME) and stat.S_ISDIR(mode):
            return f"not an OpenCheckpoint checkpoint (no {MANIFEST_NAME})"
        return f"not recognisably an OpenCheckpoint checkpoint ({exc.message})"
    except OSError as exc:  # unreadable: what cannot be looked at cannot be known to be a checkpoint
        return f"cannot be read to check that it is a checkpoint ({exc.strerror})"
    if errors:
        first = errors[0]
        return f"{first.file!r} inside it is not a file a checkpoint can hold ({first.message})"
    for rel in sorted(found):
        if rel != MANIFEST_NAME and rel not in listed:
            return f"{rel!r} inside it is not listed in its {MANIFEST_NAME}"
    return None


def _listed_files(manifest: Any) -> set[str] | None:
    """Full paths the manifest lists (None unless it identifies the format)."""
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        return None
    components = manifest.get("components")
    listed: set[str] = set()
    if not isinstance(components, dict):
        return listed
    for record in components.values():
        if not isinstance(record, dict) or not isinstance(record.get("path"), str):
            continue
        files = record.get("files")
        if isinstance(files, dict):
            listed.update(f"{record['path']}/{rel}" for rel in files if isinstance(rel, str))
    return listed


def check_replaceable(target: Path, *, overwrite: bool) -> None:
    """Raise :class:`TargetExists` unless a save may put a new checkpoint at ``target``.

    Nothing at ``target``: always. A checkpoint (see the module docstring):
    only with ``overwrite``. Anything else: never.
    """
    if not os.path.lexists(target):
        if not overwrite and old_candidates(target):
            # Readers serve the checkpoint from its old copy while the name is missing (R-PUB-13).
            raise TargetExists("a checkpoint exists here (moved aside by an interrupted save) and overwrite=False; "
                               "nothing was changed", file=str(target), rule="R-PUB-16")
        return
    if _empty_directory(target):
        return
    reason = not_a_checkpoint_reason(target)
    if reason is not None:
        raise TargetExists(f"{reason}; nothing was changed", file=str(target), rule="R-PUB-16")
    if not overwrite:
        raise TargetExists("a checkpoint exists here and overwrite=False; nothing was changed", file=str(target),
                           rule="R-PUB-16")


def _empty_directory(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode) and not os.listdir(path)
    except OSError:
        return False


def check_deletable(path: Path) -> None:
    """Raise :class:`TargetExists` unless ``path`` is a checkpoint the library may delete."""
    reason = not_a_checkpoint_reason(path)
    if reason is not None:
        raise TargetExists(f"refusing to delete: {reason}", file=str(path), rule="R-PUB-16")
