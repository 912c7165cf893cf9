"""The storage side of a rotation below a prefix of an object store (spec §12.7, R-PUB-19, R-PUB-23).

:class:`RemoteStore` answers :class:`~opencheckpoint.run.Rotation`'s
questions (the :class:`~opencheckpoint.run.rotation_store.RotationStore`
protocol) for a URL or an :class:`~opencheckpoint.remote.fspath.FsPath`, with what an object store
changes:

* every save writes a new prefix ``{prefix}-{step:012d}``, manifest last; a
  checkpoint is never overwritten in place: saving a step again (after resuming
  from an older one) first deletes this rotation's own checkpoint of that step
  only when it fails verification, and refuses (:class:`TargetExists`) when it
  is valid, so no failed or killed save ever leaves the step without one;
* "latest" and pruning follow manifests: a prefix without ``manifest.json`` is
  no checkpoint (an unfinished or abandoned save) and is never listed; pruning
  deletes a checkpoint's manifest first, then its data objects;
* there is no lock (object stores have none): two processes rotating one
  prefix may both prune, and each deletes only checkpoints this rotation
  wrote, never the newest valid one nor the one just written (validated even
  so: objects can change after the upload). Verification failures found at
  resume are remembered for the process (``Rotation.failed``), not stored.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

from ..format.errors import CheckpointError, NotACheckpoint, TargetExists, UnsupportedLocation
from ..format.manifest import MANIFEST_NAME
from ..read.validate import validate
from ..remote.failures import is_storage_error, storage_error
from ..remote.fspath import FsPath
from ..remote.publish import clean_remote_debris, delete_remote_checkpoint
from .rotation_state import STATE_NAME

__all__ = ["RemoteStore"]

logger = logging.getLogger("opencheckpoint.run")


class RemoteStore:
    """A rotation's prefix on an fsspec filesystem."""

    trusts_protected = False
    bookkeeping_in_writer = True

    def __init__(self, directory: FsPath) -> None:
        self.directory = directory

    def names(self) -> list[str]:
        self.directory.fs.invalidate_cache(self.directory.path)  # other processes save and prune here too
        try:
            listed = self.directory.fs.ls(self.directory.path, detail=False)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted({str(n).rstrip("/").rsplit("/", 1)[-1] for n in listed})

    def rotation_id(self, *, create: bool) -> str | None:
        """The rotation id: a small object of its own, as the local state file."""
        fs, key = self.directory.fs, self.directory.key(STATE_NAME)
        try:
            state = json.loads(fs.cat_file(key))
            found = state.get("rotation_id") if isinstance(state, dict) else None
            if isinstance(found, str):
                return found
        except (FileNotFoundError, ValueError):
            pass
        if not create:
            return None
        made = uuid.uuid4().hex
        fs.pipe_file(key, json.dumps({"rotation_id": made, "failed": {}}).encode())
        return made

    def failures(self) -> dict[str, str]:
        return {}  # remembered for the process only (Rotation.failed)

    def record_failures(self, failures: dict[str, str | None], *, lock: bool = True) -> None:
        """Not stored on an object store."""

    @contextlib.contextmanager
    def locked(self) -> Iterator[bool]:
        yield True  # object stores have no lock: each prune deletes only what the rotation wrote

    @contextlib.contextmanager
    def errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except Exception as exc:  # a storage failure is reported as the library's error, naming the location
            if not is_storage_error(exc):
                raise
            raise storage_error(exc, str(self.directory), f"{doing} of the rotation") from exc

    def check_form(self, form: str) -> None:
        if form != "directory":
            raise UnsupportedLocation("a remote rotation stores checkpoints in directory form (format='directory')",
                                      file=str(self.directory))

    def make_room(self, target: Any, step: int, owned: bool, reason: str | None) -> None:
        """Saving a step again: its old checkpoint must go first (never overwritten in place), so only one
        that fails verification is deleted; a valid one is refused (deleting it first would leave a window, or
        after a failed save nothing, where the step's valid checkpoint is gone and nothing replaces it)."""
        if not owned:
            return
        report = validate(target)
        if report.ok:
            raise TargetExists(f"step {step} already has a valid checkpoint here; on an object store a "
                               "checkpoint is never overwritten in place, and deleting it before the new one "
                               "is published could leave none: save under a new step, or delete it first",
                               file=str(target))  # the rotation's policy (spec §12.7, informative)
        logger.warning("deleting %s before saving step %d again: it fails verification (%s)", target, step,
                       reason or report.errors[0])
        delete_remote_checkpoint(target)

    def exists(self, path: Any) -> bool:
        return bool(self.directory.fs.exists(path.key(MANIFEST_NAME)))

    def delete(self, path: Any) -> None:
        delete_remote_checkpoint(path)

    def clean_debris(self) -> None:
        clean_remote_debris(self.directory)

    def modified(self, path: Any) -> float:
        try:
            return float(path.fs.modified(path.key(MANIFEST_NAME)).timestamp())
        except (NotImplementedError, OSError):
            return time.time()  # unknowable: counts as fresh (its writer may run)

    def ignorable(self, path: Any, error: CheckpointError) -> bool:
        return isinstance(error, NotACheckpoint)  # a prefix without a manifest: an abandoned save
