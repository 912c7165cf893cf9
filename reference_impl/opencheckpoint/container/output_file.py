"""Files the tools write that are not checkpoints (an export, a schema, a report): what they may replace.

The library's save rule, for a plain output file: nothing at the target, or,
only when the caller says ``overwrite``, a regular file that is recognisably
an earlier output of the same kind (a safetensors file for a safetensors
export, a JSON Schema for ``schema export``). Anything else (a checkpoint, a
directory, a link, a user's file) is refused, whatever ``overwrite`` says.
The new file is written beside the target under a hidden name and renamed
over it, so a failed write leaves the old file whole.

>>> import tempfile, pathlib
>>> from opencheckpoint.format.errors import TargetExists
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> notes = folder / "notes.txt"
>>> _ = notes.write_text("mine")
>>> try:
...     check_output_file(notes, kind="safetensors file", overwrite=True, recognised=lambda p: False)
... except TargetExists as exc:
...     print(exc.message)
it exists and is not a safetensors file; nothing was changed
>>> write_output_file(folder / "new.txt", lambda path: path.write_text("hello")).read_text()
'hello'
"""

from __future__ import annotations

import os
import stat
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

from ..format.errors import TargetExists


def check_output_file(target: Path, *, kind: str, overwrite: bool, recognised: Callable[[Path], bool]) -> None:
    """Raise :class:`TargetExists` unless a ``kind`` output file may be written at ``target``.

    ``recognised(target)`` says whether an existing regular file is an earlier output of that kind.
    """
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise TargetExists(f"cannot look at it ({exc.strerror}); nothing was changed", file=str(target)) from None
    if not stat.S_ISREG(mode) or not _is_kind(target, recognised):
        what = "a directory" if stat.S_ISDIR(mode) else "a symbolic link" if stat.S_ISLNK(mode) else None
        reason = f"it is {what}" if what else f"it exists and is not a {kind}"
        raise TargetExists(f"{reason}; nothing was changed", file=str(target))
    if not overwrite:
        raise TargetExists(f"a {kind} exists here and overwrite=False; nothing was changed", file=str(target))


def _is_kind(target: Path, recognised: Callable[[Path], bool]) -> bool:
    try:
        return recognised(target)
    except (OSError, ValueError):
        return False


def write_output_file(target: Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(temporary)`` for a hidden file beside ``target``, then rename it over ``target``.

    The temporary file is removed if ``write`` fails; an old file at ``target`` stays whole until the rename.
    """
    temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.partial")
    try:
        write(temporary)
        os.replace(temporary, target)
    finally:
        if os.path.lexists(temporary):
            os.unlink(temporary)
    return target


def refused_target(exc: TargetExists, overwrite: bool) -> int:
    """Print the one line of a command that refused its target (what is there, and ``--overwrite`` when it
    would help) on stderr; return exit status 1."""
    message = exc.message.replace("overwrite=False", "--overwrite was not given")
    hint = "" if overwrite or "--overwrite" not in message else " (pass --overwrite to replace it)"
    print(f"error: {exc.file}: refused to write there: {message}{hint}", file=sys.stderr)
    return 1
