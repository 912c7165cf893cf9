"""Where a save writes: one :class:`Target` interface for a local directory, a ZIP archive and an object store.

Each stage of the pipeline (:mod:`.stages`) asks the target one thing:

* plan: :meth:`Target.check` (may a checkpoint be put there: R-PUB-16 locally,
  R-PUB-21 on an object store; nothing on disk changes before it passes) and
  :meth:`Target.scratch` (where files an adapter dumps itself wait, on the
  file system of the staging area so the write stage moves them);
* write: :meth:`Target.open`, a :class:`Staging` area (a hidden staging
  directory or archive next to a local target, a local scratch checkpoint for
  an object store) that components are written into;
* commit: :meth:`Target.commit`, ``manifest.json`` last, then publication
  (an atomic rename locally, R-PUB-1..18; data objects then the manifest on
  an object store, R-PUB-22). A rename that meets another writer's checkpoint
  is that writer's win: :class:`~opencheckpoint.format.errors.ConcurrentModification`.

:func:`opencheckpoint.write.pipeline.open_target` picks the implementation from the location.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..container.debris import working_path
from ..container.staged import StagedCheckpoint
from ..container.target import check_replaceable
from ..format.errors import ConcurrentModification
from ..remote.fspath import FsPath

if TYPE_CHECKING:
    from ..container.archive_writer import ArchiveWriter

__all__ = ["LocalTarget", "Staging", "Target", "lost_races", "publication_race"]

FORMS = ("directory", "archive")
#: What rename(2) reports when another writer published at the target between our check and our rename.
_RACE_ERRNOS = frozenset({errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR})


class Staging(Protocol):
    """The area a save's components are written into before the commit."""

    @property
    def directory(self) -> Path:
        """The root of the checkpoint being written (``components/NAME`` below it)."""
        ...

    @property
    def archive(self) -> ArchiveWriter | None:
        """The archive form's one-pass writer (members streamed into it), else None."""
        ...

    def pack(self, records: Mapping[str, Mapping[str, Any]]) -> None:
        """Archive form: copy files an adapter wrote itself into the archive, in manifest order."""
        ...


class Target(Protocol):
    """One place a checkpoint is saved to (see the module docstring for what each stage asks of it)."""

    @property
    def location(self) -> Path | FsPath:
        """Where the checkpoint is published: what ``save`` returns."""
        ...

    @property
    def form(self) -> str:
        """``"directory"`` or ``"archive"``."""
        ...

    @property
    def durable(self) -> bool:
        """Whether the commit fsyncs before it publishes."""
        ...

    def check(self) -> None:
        """Raise unless a checkpoint may be put here; change nothing."""
        ...

    def scratch(self) -> Path:
        """A fresh path (not created) for files adapters dump at the plan stage, on the staging file system."""
        ...

    def open(self) -> AbstractContextManager[Staging]:
        """The staging area, removed on exit unless the commit published it."""
        ...

    def commit(self, staging: Staging, body: Mapping[str, Any], unsynced: Sequence[Path] = ()) -> None:
        """Write ``manifest.json`` (``body``) last and publish; ``unsynced``: files a durable commit fsyncs."""
        ...


class LocalTarget:
    """A local path: the directory form (staging directory) or the archive form (staging ZIP file)."""

    def __init__(self, location: Path, *, form: str, durable: bool, overwrite: bool) -> None:
        if form not in FORMS:
            raise ValueError(f"format must be one of {FORMS}, got {form!r}")
        self.location = location
        self.form = form
        self.durable = durable
        self.overwrite = overwrite

    def check(self) -> None:
        check_replaceable(self.location, overwrite=self.overwrite)

    def scratch(self) -> Path:
        # a hidden working name beside the target: the debris of a killed save is recognisably ours
        return working_path(self.location, "staging")

    def open(self) -> StagedCheckpoint:
        return StagedCheckpoint(self.location, form=self.form, durable=self.durable, overwrite=self.overwrite)

    def commit(self, staging: Staging, body: Mapping[str, Any], unsynced: Sequence[Path] = ()) -> None:
        assert isinstance(staging, StagedCheckpoint)
        with lost_races(self.location):
            staging.commit(body, unsynced)

    def __repr__(self) -> str:
        return f"LocalTarget({str(self.location)!r}, form={self.form!r})"


def publication_race(exc: OSError, target: Path) -> ConcurrentModification | None:
    """The error to raise when a save lost a race with another writer of ``target``, else None.

    Two saves to a missing target both see it missing; the second rename then meets the first
    one's checkpoint (``Directory not empty``). Or, without an atomic exchange, another writer
    renamed the target aside just before this one could (``No such file or directory`` for the
    target). Nothing of the losing save was published; the other writer's work is left alone.
    """
    moved_away = exc.errno == errno.ENOENT and exc.filename is not None and Path(exc.filename) == target
    if not moved_away and (exc.errno not in _RACE_ERRNOS or not os.path.lexists(target)):
        return None
    return ConcurrentModification(
        "another process published or is publishing a checkpoint at this path while this save was writing "
        f"it; this save published nothing ({exc.strerror}); save again to replace it", file=str(target))


@contextlib.contextmanager
def lost_races(target: Path) -> Iterator[None]:
    """Raise a lost publication race inside the block as :class:`ConcurrentModification`; other errors as they are."""
    try:
        yield
    except OSError as exc:
        raced = publication_race(exc, target)
        if raced is None:
            raise
        raise raced from exc
