"""What a :class:`~.rotation.Rotation` asks of the storage its checkpoints live on, and the local directory's answers.

One :class:`RotationStore` protocol, two implementations: :class:`LocalStore`
(a directory: a state file and an advisory lock, :mod:`.rotation_state`;
deletion by renaming out of the namespace first) and
:class:`~.remote_store.RemoteStore` (a prefix of an object
store: the id in a small object, no lock, deletion manifest first, a step's
valid checkpoint never overwritten in place). The retention policy, naming,
ownership, "latest", pruning and falling back at resume are the rotation's,
the same for both.

>>> import tempfile, pathlib
>>> store = LocalStore(pathlib.Path(tempfile.mkdtemp()))
>>> store.rotation_id(create=False) is None, len(store.rotation_id(create=True))
(True, 32)
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from ..container.debris import parse, release, working_path
from ..container.publish import clean_debris, remove_tree
from ..container.target import check_deletable, is_empty_directory
from ..format.errors import CheckpointError
from ..remote.fspath import FsPath
from .rotation_state import ensure_identity, locked, read_state, record_failures

__all__ = ["LocalStore", "RotationStore"]


class RotationStore(Protocol):
    """The storage side of a rotation (see the module docstring)."""

    #: where the checkpoints live: a local directory or a prefix
    directory: Any
    #: whether a path the caller just published is trusted valid when pruning (an object store's objects can
    #: change after the upload: validated like any other)
    trusts_protected: bool
    #: whether an async save's bookkeeping (the listing, the id, making room) runs in its writer thread rather than
    #: in the caller's: on an object store it is a request per checkpoint kept (the training loop must not wait)
    bookkeeping_in_writer: bool

    def names(self) -> list[str]:
        """The names a checkpoint of the rotation may have now (including one served from an old copy)."""
        ...

    def rotation_id(self, *, create: bool) -> str | None:
        """The rotation id of the directory, made on first save (``create``)."""
        ...

    def failures(self) -> dict[str, str]:
        """Checkpoint names recorded as failing verification at resume -> why (kept across processes)."""
        ...

    def record_failures(self, failures: dict[str, str | None], *, lock: bool = True) -> None:
        """Add (reason) or drop (None) recorded failures; best effort."""
        ...

    def locked(self) -> AbstractContextManager[bool]:
        """One rotation at a time for bookkeeping and pruning; yields whether the lock is held."""
        ...

    def errors(self, doing: str) -> AbstractContextManager[None]:
        """Storage failures inside the block as :class:`CheckpointError` naming the location."""
        ...

    def check_form(self, form: str) -> None:
        """Refuse a form the storage does not keep."""
        ...

    def make_room(self, target: Any, step: int, owned: bool, reason: str | None) -> None:
        """Before saving a step again at ``target`` (``owned``: the rotation's; ``reason``: why it failed
        verification at resume, if it did)."""
        ...

    def exists(self, path: Any) -> bool: ...

    def delete(self, path: Any) -> None:
        """Delete a checkpoint of the rotation; never leave a half-deleted one under its name."""
        ...

    def clean_debris(self) -> None:
        """Remove the debris of ended writers."""
        ...

    def modified(self, path: Any) -> float:
        """When the checkpoint at ``path`` last changed (a time that counts as fresh when unknowable remotely)."""
        ...

    def ignorable(self, path: Any, error: CheckpointError) -> bool:
        """Whether a name that does not open is no failure at resume (nothing there yet)."""
        ...


class LocalStore:
    """A rotation's local directory."""

    trusts_protected = True
    #: a local listing is quick, and the bookkeeping's lock makes the directory the caller's target check needs
    bookkeeping_in_writer = False

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def names(self) -> list[str]:
        """Every entry, plus the names served from an old copy while the name is missing (R-PUB-13).

        A replacement killed between its two renames (file systems without an atomic exchange) leaves the
        checkpoint only at ``.NAME.oc-old-*``: it still is that step's checkpoint.
        """
        try:
            names = os.listdir(self.directory)
        except (FileNotFoundError, NotADirectoryError):
            return []
        found = set(names)
        for name in names:
            entry = parse(self.directory / name) if name.startswith(".") else None
            if entry is not None and entry.kind == "old" and entry.target_name not in found:
                found.add(entry.target_name)
        return sorted(found)

    def rotation_id(self, *, create: bool) -> str | None:
        if not create:
            return read_state(self.directory).rotation_id
        return ensure_identity(self.directory)  # the caller holds the lock

    def failures(self) -> dict[str, str]:
        return read_state(self.directory).failed

    def record_failures(self, failures: dict[str, str | None], *, lock: bool = True) -> None:
        record_failures(self.directory, failures, lock=lock)

    def locked(self) -> AbstractContextManager[bool]:
        return locked(self.directory)

    @contextlib.contextmanager
    def errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except OSError as exc:  # a file system failure is reported as the library's error, naming the path
            where = exc.filename if isinstance(exc.filename, str) else str(self.directory)
            raise CheckpointError(f"the rotation could not {doing}: {exc.strerror or exc}", file=where) from exc

    def check_form(self, form: str) -> None:
        """Both forms are kept locally."""

    def make_room(self, target: Any, step: int, owned: bool, reason: str | None) -> None:
        """Nothing to do: a local save replaces the step's checkpoint atomically."""

    def exists(self, path: Any) -> bool:
        return os.path.lexists(path)

    def delete(self, path: Any) -> None:
        """Renamed out of the rotation's namespace first, so a crash never leaves a half-deleted checkpoint
        under its name (the ``.NAME.oc-delete-*`` tombstone is debris, cleaned later)."""
        check_deletable(path)  # only ever a checkpoint (R-PUB-16), whatever the name says
        tombstone = working_path(path, "delete")
        try:
            os.replace(path, tombstone)
            remove_tree(tombstone)
        finally:
            release(tombstone)

    def clean_debris(self) -> None:
        clean_debris(self.directory)

    def modified(self, path: Any) -> float:
        try:
            return os.lstat(path).st_mtime
        except OSError:
            return 0.0  # gone: long ended

    def ignorable(self, path: Any, error: CheckpointError) -> bool:
        return is_empty_directory(path)


def store_for(location: Path | FsPath) -> RotationStore:
    """The store of a rotation at ``location``: a local directory, or a prefix of an fsspec filesystem."""
    if isinstance(location, FsPath):
        from .remote_store import RemoteStore  # loaded only when a remote location is used

        return RemoteStore(location)
    return LocalStore(location)
