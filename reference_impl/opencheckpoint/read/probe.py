"""Looking at a path without reading payloads: :func:`is_checkpoint` and :func:`manifest`.

Both open the checkpoint as every read does (spec §15 steps 1-11: the
container, the manifest and its checksum, every rule of its members, the
paths, and that every listed file exists with its listed size) and stop
there: no payload byte is read. :func:`~opencheckpoint.validate` checks the
rest (every checksum).

>>> import numpy as np, tempfile, os
>>> from opencheckpoint import Checkpoint
>>> path = Checkpoint(w=np.zeros(2)).save(os.path.join(tempfile.mkdtemp(), "c"), metadata={"step": 3})
>>> is_checkpoint(path), is_checkpoint(path.parent), manifest(path)["metadata"]
(True, False, {'step': 3})
"""

from __future__ import annotations

from typing import Any

from ..format.errors import CheckpointError, UnsupportedLocation
from ..location import PathArg
from .opened import OpenedCheckpoint


def is_checkpoint(path: PathArg) -> bool:
    """Whether ``path`` holds an OpenCheckpoint checkpoint (directory or archive) that a reader can open.

    Never raises because ``path`` is not one: a missing path, a folder or
    file of anything else, a directory without a manifest (a save in
    progress, debris of a killed one), a manifest that fails its checksum or
    a rule, a listed file missing: all ``False``. A URL or
    :class:`~opencheckpoint.remote.fspath.FsPath` is looked at on its
    filesystem (spec §12.7). Only a location this implementation cannot read
    at all (a URL no installed fsspec implementation serves,
    :class:`UnsupportedLocation`) raises, because the answer there is unknown, not "no".

    Examples:
        >>> import tempfile
        >>> from opencheckpoint import is_checkpoint
        >>> is_checkpoint(tempfile.mkdtemp()), is_checkpoint("/nonexistent/run")
        (False, False)
    """
    try:
        OpenedCheckpoint(path).close()
    except UnsupportedLocation:
        raise
    except (CheckpointError, OSError):
        return False
    return True


def manifest(path: PathArg) -> dict[str, Any]:
    """The checkpoint's manifest as plain JSON values, parsed and validated, without reading any payload.

    ``format_version`` is the file's own (what ``inspect`` shows); the other
    members of an older format version come back migrated to the current
    one's shape (spec R-VER-5). Raises the :class:`CheckpointError` subclass
    of the first rule the checkpoint breaks (:class:`NotACheckpoint` when
    there is no checkpoint at ``path``), naming the file and the field.

    Examples:
        >>> import tempfile, os
        >>> from opencheckpoint import Checkpoint, manifest
        >>> path = Checkpoint(config={"lr": 0.1}).save(os.path.join(tempfile.mkdtemp(), "c"))
        >>> record = manifest(path)["components"]["config"]
        >>> record["kind"], record["path"], sorted(record["files"])
        ('json', 'components/config', ['value.json'])
        >>> manifest(path)["format_version"]
        1
    """
    with OpenedCheckpoint(path) as opened:
        return opened.manifest
