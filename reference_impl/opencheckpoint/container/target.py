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
>>> from opencheckpoint.format.errors import TargetExists
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

from ..format.errors import CheckpointError, ConcurrentModification
from ..format.manifest import MANIFEST_NAME
from ..format.names import FORMAT_NAME
from ..format.strict_json import parse_ijson
from ..rules import raise_if
from ..rules.publication import PUB
from .archive import ArchiveSource
from .base import identity, old_candidates
from .directory import DirectorySource


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
        # By its type, not its name: a staging or old copy is judged by what it holds (R-PUB-12 is a reader rule).
        with (DirectorySource(path) if stat.S_ISDIR(mode) else ArchiveSource(path)) as source:
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
    if stat.S_ISDIR(mode):
        return _unlisted_directory(path, listed)
    return None


def reason_unless_replaced(path: Path) -> tuple[str | None, bool]:
    """:func:`not_a_checkpoint_reason` for ``path``, and whether that reason may be a race: the name came to
    resolve to another entry while it was looked at (or was found empty). Another writer replaced what was
    looked at and is deleting it: a half-deleted folder says nothing about what stands at the name."""
    before = identity(path)
    reason = not_a_checkpoint_reason(path)
    return reason, reason is not None and (before is None or identity(path) != before)


def _unlisted_directory(path: Path, listed: set[str]) -> str | None:
    """The first folder inside ``path`` that holds no listed file (a user's, even if empty), or None."""
    holders = {"components"} | {rel.rsplit("/", 1)[0] for rel in listed} | {
        "/".join(rel.split("/")[:depth]) for rel in listed for depth in range(1, rel.count("/"))}
    for root, directories, _files in os.walk(path):
        for name in sorted(directories):
            rel = os.path.relpath(os.path.join(root, name), path).replace(os.sep, "/")
            if rel not in holders:
                return f"{rel + '/'!r} inside it is a folder its {MANIFEST_NAME} does not list"
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
    only with ``overwrite``. Anything else: never. Nor a target inside a
    checkpoint (it would add a file its manifest does not list), nor one
    below a path that is a file.
    """
    raise_if(PUB.check("R-PUB-16", None, _refusal(target, overwrite), file=str(target)))


def _refusal(target: Path, overwrite: bool) -> str | None:
    """Why a save may not put a checkpoint at ``target`` (R-PUB-16), or None."""
    refusal = _ancestors_refusal(target)
    if refusal is not None:
        return refusal
    if not os.path.lexists(target):
        if not overwrite and old_candidates(target):
            # Readers serve the checkpoint from its old copy while the name is missing (R-PUB-13).
            return "a checkpoint exists here (moved aside by an interrupted save) and overwrite=False"
        return None
    if is_empty_directory(target):
        return None
    reason, replaced = reason_unless_replaced(target)
    if replaced:
        raise ConcurrentModification(
            "another process replaced or is replacing the checkpoint at this path while this save checked it "
            f"({reason}); this save published nothing; save again to replace it", file=str(target))
    if reason is None and not overwrite:
        return "a checkpoint exists here and overwrite=False"
    return reason


def _ancestors_refusal(target: Path) -> str | None:
    """Refuse a target below a file, or inside a directory checkpoint (its ``components/new``, say)."""
    for ancestor in target.absolute().parents:
        try:
            mode = os.stat(ancestor).st_mode
        except FileNotFoundError:
            continue  # made by the save
        except OSError as exc:
            return f"its parent {str(ancestor)!r} cannot be looked at ({exc.strerror})"
        if not stat.S_ISDIR(mode):
            return f"its parent {str(ancestor)!r} is a file, not a folder"
        if os.path.isfile(ancestor / MANIFEST_NAME) and not_a_checkpoint_reason(ancestor) is None:
            return (f"it is inside the checkpoint {str(ancestor)!r}, which would then hold a file its "
                    f"{MANIFEST_NAME} does not list")
    return None


def is_empty_directory(path: Path) -> bool:
    """Whether ``path`` is a directory (not a link to one) with no entries."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode) and not os.listdir(path)
    except OSError:
        return False


def check_deletable(path: Path) -> None:
    """Raise :class:`TargetExists` unless ``path`` is a checkpoint the library may delete."""
    reason = not_a_checkpoint_reason(path)
    raise_if(PUB.check("R-PUB-16", None, None if reason is None else f"refusing to delete: {reason}",
                       "nothing was deleted", file=str(path)))
