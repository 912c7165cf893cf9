"""The rule table of containers and what a path names (spec §3, §12.3, steps 1-3, 10 and 11 of §15).

One check per requirement ID, each the only place its rule is checked: it
returns why what the reader found breaks the rule, or None. The containers
(:mod:`opencheckpoint.container.directory`, :mod:`~opencheckpoint.container.archive`,
:mod:`opencheckpoint.remote.source`) and the opening steps
(:mod:`opencheckpoint.read.opening`) find the facts (a directory entry's type, an
``OSError``, a size) and dispatch with :meth:`RuleTable.check
<opencheckpoint.rules.RuleTable.check>`, which adds the file and the rule ID.
"""

from __future__ import annotations

from typing import Final

from ..format.errors import (
    ConcurrentModification,
    ExtraFile,
    IntegrityError,
    LimitExceeded,
    MissingFile,
    NotACheckpoint,
    UnsafePath,
)
from ..format.limits import MANIFEST_MAX_BYTES
from . import RuleTable

CON = RuleTable(version=1, file=None)
rule = CON.rule

# Rules tested where the reader holds the facts (a payload's size and CRC-32C, the bytes of a file, an
# opening attempt): declared with their class; the site reports them with CON.error. R-RDR-13 and
# R-RDR-14 are not file defects (spec §12.6): the implementation's own class, not one of Table 16-1.
CON.declare("R-CHK-7", IntegrityError)
CON.declare("R-CHK-8", IntegrityError)
CON.declare("R-LIM-2", LimitExceeded)
CON.declare("R-LIM-9", LimitExceeded)
CON.declare("R-PUB-14", NotACheckpoint)
CON.declare("R-RDR-13", ConcurrentModification)
CON.declare("R-RDR-14", ConcurrentModification)

#: The mark of a writer's staging directory ``.NAME.oc-staging-*`` (spec §12).
STAGING_MARK: Final = ".oc-staging-"

#: Where a reader looked for ``manifest.json`` (R-CON-1) -> how its absence reads.
_NO_MANIFEST: Final = {
    "directory": "no manifest.json: not a checkpoint (or an unfinished one)",
    "archive": "the archive has no member manifest.json",
    "remote": "no manifest.json: not a checkpoint (on an object store the manifest is written last: an unfinished "
              "or abandoned save)",
}
#: An entry that is neither a regular file nor a directory (R-CON-4) -> how it is reported.
_NOT_REGULAR: Final = {
    "symlink": "symbolic links are not allowed in a checkpoint",
    "special": "special files (device, FIFO, socket) are not allowed",
    "through": "path passes through a symlink or a non-directory",
    "opened": "not a regular file",
    "manifest": "manifest.json is a symlink or a special file",
    "directory": "cannot open directory",
}


def _reason(failure: BaseException | str) -> str:
    """An OS error's own words (``strerror``), else the failure's text."""
    if isinstance(failure, OSError) and failure.strerror:
        return failure.strerror
    return str(failure)


@rule("R-PUB-10", NotACheckpoint)
def path_exists(exists: bool, detail: str = "no such file or directory") -> str | None:
    """A path that does not exist is not a checkpoint (R-PUB-13's fallback aside); ``detail`` says what was seen."""
    return None if exists else detail


@rule("R-PUB-11", NotACheckpoint)
def directory_or_file(is_dir_or_file: bool, failure: BaseException | str | None = None,
                      action: str = "open") -> str | None:
    """A path that is neither a directory nor a regular file (after following links), or that cannot be
    opened as the one it is (``failure`` while the reader tried to ``action`` it), is not a checkpoint."""
    if failure is not None:
        return f"cannot {action}: {_reason(failure)}"
    return None if is_dir_or_file else "neither a directory nor a regular file"


@rule("R-PUB-12", NotACheckpoint)
def not_staging_name(last_segment: str) -> str | None:
    """A last segment that begins with ``.`` and contains ``.oc-staging-`` is a writer's staging directory."""
    if last_segment.startswith(".") and STAGING_MARK in last_segment:
        return "a staging name (.NAME.oc-staging-*) is never a checkpoint"
    return None


@rule("R-CON-1", NotACheckpoint)
def manifest_present(form: str, found: str) -> str | None:
    """The checkpoint has a file ``manifest.json``: ``found`` is what the ``form`` holds under that name
    (``"file"``, ``"absent"`` or ``"directory"``)."""
    if found == "file":
        return None
    if found == "directory":
        return "manifest.json is a directory, not a file"
    return _NO_MANIFEST[form]


@rule("R-CON-2", ExtraFile)
def files_listed(unlisted: int, *, entries: str | None = None) -> str | None:
    """Every file but ``manifest.json`` is listed by a component: ``unlisted`` files are not (1: the file the
    error names; more: those not reported one by one); ``entries`` (``"files"``, ``"objects"``): the
    container holds more of them than any manifest can list."""
    if entries is not None:
        return f"more {entries} than a manifest can list"
    if unlisted == 1:
        return "no component lists this file"
    if unlisted > 1:
        return f"and {unlisted} more files that no component lists (not reported one by one)"
    return None


@rule("R-CON-3", MissingFile)
def listed_file_present(absent: str | None = None, failure: BaseException | str | None = None,
                        action: str = "read", more: int = 0) -> str | None:
    """A listed file exists as a regular file and can be read: ``absent`` says where it was not found,
    ``failure`` is what stopped the reader's ``action`` on it, ``more`` counts absent files beyond those
    reported one by one."""
    if more:
        return f"and {more} more listed files are absent (not reported one by one)"
    if absent is not None:
        return f"listed in the manifest but {absent}"
    if failure is not None:
        return f"cannot {action}: {_reason(failure)}"
    return None


@rule("R-CON-4", UnsafePath)
def regular_entry(entry: str, failure: BaseException | None = None) -> str | None:
    """Every entry is a regular file or a directory: ``entry`` is what the reader found (``"file"``,
    ``"directory"``, or a key of the table above); ``failure``: a directory that could not be opened."""
    if entry == "directory" and failure is not None:
        return f"cannot open directory: {_reason(failure)}"
    if entry in ("file", "directory"):
        return None
    return _NOT_REGULAR[entry]


@rule("R-LIM-1", LimitExceeded)
def manifest_size(size: int) -> str | None:
    """``manifest.json`` is at most 64 MiB (checked before it is read, and again on what was read)."""
    return f"manifest is {size} bytes, limit {MANIFEST_MAX_BYTES}" if size > MANIFEST_MAX_BYTES else None


@rule("R-CHK-6", IntegrityError)
def file_size(actual: int, size: int) -> str | None:
    """A listed file's length equals its entry's ``size``."""
    if actual == size:
        return None
    what = "truncated" if actual < size else "extended"
    return f"file is {actual} bytes, the manifest says {size} ({what})"
