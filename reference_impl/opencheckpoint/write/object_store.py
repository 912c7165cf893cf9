"""The :class:`~.target.Target` of an object store (any fsspec filesystem): nothing there can be renamed.

Publication follows spec §12.7 (:mod:`opencheckpoint.remote.publish`): the
plan stage checks the prefix (R-PUB-21: empty, outside any checkpoint, after
removing ended writers' debris); the write stage fills a local scratch
checkpoint (no fsync: it is a scratch copy); the commit writes its manifest,
then uploads the data objects under a writer marker and ``manifest.json``
strictly last (R-PUB-22). Storage failures become ``CheckpointError``s naming
the URL. Only the directory form is stored on a remote filesystem.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..container.staged import StagedCheckpoint
from ..format.errors import UnsupportedLocation
from ..remote.failures import storage_errors
from ..remote.fspath import FsPath
from ..remote.publish import check_remote_target, upload_checkpoint
from .target import Staging

__all__ = ["ObjectStoreTarget"]


class ObjectStoreTarget:
    """A prefix on an fsspec filesystem (``s3://bucket/run/ckpt``, ``memory://x``), directory form only."""

    durable = False  # the local copy is scratch; the object store's own durability is the upload's

    def __init__(self, location: FsPath, *, form: str) -> None:
        if form != "directory":
            raise UnsupportedLocation("the archive form is written to local paths only; on a remote filesystem a "
                                      "checkpoint is stored in directory form (format='directory')",
                                      file=str(location))
        self.location = location
        self.form = form

    def check(self) -> None:
        with storage_errors(self.location, "save a checkpoint here"):
            check_remote_target(self.location)

    def scratch(self) -> Path:
        return Path(tempfile.mkdtemp(prefix="opencheckpoint-plan-"))

    @contextlib.contextmanager
    def open(self) -> Iterator[Staging]:
        with (tempfile.TemporaryDirectory(prefix="opencheckpoint-upload-") as scratch,
              StagedCheckpoint(Path(scratch) / "checkpoint", form="directory", durable=False) as staged):
            yield staged

    def commit(self, staging: Staging, body: Mapping[str, Any], unsynced: Sequence[Path] = ()) -> None:
        assert isinstance(staging, StagedCheckpoint)
        staging.commit(body)  # the local scratch checkpoint, manifest included
        with storage_errors(self.location, "save a checkpoint here"):
            upload_checkpoint(staging.target, self.location)

    def __repr__(self) -> str:
        return f"ObjectStoreTarget({str(self.location)!r})"

