"""A rotation of checkpoints below a prefix of an object store (spec §12.7, R-PUB-19, R-PUB-23).

:class:`RemoteRotation` has the methods of :class:`~opencheckpoint.run.Rotation`
(which returns one for a URL or an :class:`~.fspath.FsPath`), with what an
object store changes:

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
  wrote, never the newest valid one nor the one just written. Verification
  failures found at resume are remembered for the process (``failed``), not
  stored.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

from ..checkpoint import Checkpoint, CheckpointFormat, LoadResult
from ..container.debris import STALE_AFTER_S, process_running, process_token
from ..format.errors import CheckpointError, IncompatibleComponent, NotACheckpoint, TargetExists, UnsupportedLocation
from ..location import PathArg, resolve_location
from ..read.reader import CheckpointReader
from ..read.validate import validate
from ..rotation_policy import (
    ARCHIVE_SUFFIX,
    ROTATION_KEY,
    STEP_DIGITS,
    best_entry,
    check_policy,
    metric,
    name_pattern,
    newest_first,
    owned_sequence,
    save_metadata,
)
from ..rotation_state import STATE_NAME
from .failures import is_storage_error, storage_error
from .fspath import FsPath
from .publish import clean_remote_debris, delete_remote_checkpoint

logger = logging.getLogger("opencheckpoint.run")
_T = TypeVar("_T")


class RemoteEntry:
    """One checkpoint of a remote rotation (the fields of :class:`~opencheckpoint.run.RotationEntry`)."""

    __slots__ = ("path", "step", "created_at", "metric", "owned", "sequence", "writer")

    def __init__(self, path: FsPath, step: int, manifest: Mapping[str, Any], keep_best: Any,
                 rotation_id: str | None, prefix: str) -> None:
        metadata = manifest.get("metadata") or {}
        sequence = owned_sequence(metadata, path.name, prefix, step, rotation_id)
        mark = metadata.get(ROTATION_KEY) if isinstance(metadata, dict) else None
        writer = mark.get("writer") if sequence is not None and isinstance(mark, dict) else None
        self.path = path
        self.step = step
        self.created_at = str(manifest.get("created_at", ""))
        self.metric = metric(metadata.get(keep_best[0])) if keep_best and isinstance(metadata, dict) else None
        self.owned = sequence is not None
        self.sequence = sequence or 0
        self.writer = writer if isinstance(writer, str) else None


class RemoteRotation:
    """Step-numbered checkpoints below a prefix of an fsspec filesystem, with a retention policy."""

    def __init__(self, directory: PathArg, keep_last: int = 3, keep_best: tuple[str, str] | None = None,
                 prefix: str = "checkpoint") -> None:
        check_policy(keep_last, keep_best, prefix)
        location = resolve_location(directory)
        if not isinstance(location, FsPath):
            raise TypeError("RemoteRotation is for fsspec locations; use Rotation for a local directory")
        self.directory = location
        self.keep_last = keep_last
        self.keep_best = keep_best
        self.prefix = prefix
        self._pattern = name_pattern(prefix)
        #: Checkpoints that failed verification when resuming (this process) -> why.
        self.failed: dict[FsPath, str] = {}

    def path_for(self, step: int, format: CheckpointFormat = "directory") -> FsPath:
        """The location a checkpoint of ``step`` gets."""
        return self.directory / f"{self.prefix}-{step:0{STEP_DIGITS}d}{ARCHIVE_SUFFIX if format == 'archive' else ''}"

    # -- the rotation id: a small object of its own, as the local state file -------------
    def _rotation_id(self, *, create: bool) -> str | None:
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

    # -- saving -------------------------------------------------------------------------
    def save(self, checkpoint: Checkpoint, step: int, metadata: Mapping[str, Any] | None = None,
             format: CheckpointFormat | None = None, *, components: Collection[str] | None = None,
             metric_required: bool = True) -> FsPath:
        """Save ``checkpoint`` as the checkpoint of ``step`` at a new prefix, then prune; return its location
        (``metric_required``: as :meth:`Rotation.save`)."""
        meta = save_metadata(step, metadata, self.keep_best if metric_required else None)
        output = format or checkpoint.format
        if output != "directory":
            raise UnsupportedLocation("a remote rotation stores checkpoints in directory form (format='directory')",
                                      file=str(self.directory))
        try:
            rotation_id = self._rotation_id(create=True)
            sequence = 1 + max((e.sequence for e in self.entries()), default=0)
            target = self.path_for(step)
            meta[ROTATION_KEY] = {"prefix": self.prefix, "step": step, "sequence": sequence,
                                  "rotation": rotation_id, "name": target.name, "writer": process_token()}
            self._make_room(target, step)
            path = checkpoint.save(target, components=components, metadata=meta, format="directory")
        except Exception as exc:  # a storage failure is reported as the library's error, naming the location
            if not is_storage_error(exc):
                raise
            raise storage_error(exc, str(self.directory), f"save step {step} of the rotation") from exc
        assert isinstance(path, FsPath)
        try:
            self.prune(protect=[path])
        except Exception as exc:  # the checkpoint is published and valid: a failed prune never fails the save
            if not (is_storage_error(exc) or isinstance(exc, CheckpointError)):
                raise
            logger.warning("saved %s, but pruning %s failed (the next save prunes again): %s", path,
                           self.directory, exc)
        return path

    def _make_room(self, target: FsPath, step: int) -> None:
        """Saving a step again: its old checkpoint must go first (never overwritten in place), so only one
        that fails verification is deleted; a valid one is refused (deleting it first would leave a window, or
        after a failed save nothing, where the step's valid checkpoint is gone and nothing replaces it)."""
        for entry in self.entries():
            if entry.path != target or not entry.owned:
                continue
            report = validate(target)
            if report.ok:
                raise TargetExists(f"step {step} already has a valid checkpoint here; on an object store a "
                                   "checkpoint is never overwritten in place, and deleting it before the new one "
                                   "is published could leave none: save under a new step, or delete it first",
                                   file=str(target))  # the rotation's policy (spec §12.7, informative)
            logger.warning("deleting %s before saving step %d again: it fails verification (%s)", target, step,
                           self.failed.get(target) or report.errors[0])
            delete_remote_checkpoint(target)
            self.failed.pop(target, None)

    # -- listing ------------------------------------------------------------------------
    def _scan(self) -> tuple[list[RemoteEntry], list[tuple[FsPath, CheckpointError]]]:
        """The checkpoints below the prefix (oldest step first), and the names that do not open."""
        self.directory.fs.invalidate_cache(self.directory.path)  # other processes save and prune here too
        try:
            names = sorted({str(n).rstrip("/").rsplit("/", 1)[-1]
                            for n in self.directory.fs.ls(self.directory.path, detail=False)})
        except (FileNotFoundError, NotADirectoryError):
            return [], []
        rotation_id = self._rotation_id(create=False)
        found: list[RemoteEntry] = []
        broken: list[tuple[FsPath, CheckpointError]] = []
        for name in names:
            match = self._pattern.fullmatch(name)
            if match is None:
                continue
            path = self.directory / name
            try:
                with CheckpointReader(path) as reader:
                    manifest = reader.manifest
            except CheckpointError as exc:
                broken.append((path, exc))  # no manifest (unfinished), unreadable or foreign: never pruned
                continue
            found.append(RemoteEntry(path, int(match.group(1)), manifest, self.keep_best, rotation_id, self.prefix))
        found.sort(key=lambda e: (e.step, e.created_at, e.path.name))
        return found, broken

    def entries(self) -> list[RemoteEntry]:
        """Every readable checkpoint below the prefix, oldest step first."""
        return self._scan()[0]

    def checkpoints(self) -> list[FsPath]:
        """Locations of the readable checkpoints, oldest step first."""
        return [e.path for e in self.entries()]

    def latest(self) -> FsPath | None:
        """The checkpoint this rotation wrote most recently (none of its own: the highest step), or None."""
        entries = newest_first(self.entries())
        return entries[0].path if entries else None

    def best(self) -> FsPath | None:
        """The checkpoint with the best metric (ties: the newer one), or None."""
        entry = self._best(self.entries())
        return None if entry is None else entry.path

    def _best(self, entries: list[RemoteEntry]) -> RemoteEntry | None:
        return best_entry(entries, self.keep_best)

    # -- pruning ------------------------------------------------------------------------
    def prune(self, protect: Collection[FsPath] = ()) -> list[FsPath]:
        """Delete this rotation's checkpoints beyond the policy (manifest first), and ended writers' debris.

        Keeps the ``keep_last`` most recently written, the best, ``protect``, the newest one of every
        other writer that still runs, and the newest one that passes :func:`~opencheckpoint.validate`.
        """
        clean_remote_debris(self.directory)
        owned = newest_first(e for e in self.entries() if e.owned)
        keep = {e.path for e in owned[: self.keep_last]} | set(protect) | self._newest_of_live_writers(owned)
        best = self._best(owned)
        if best is not None:
            keep.add(best.path)
        removable = [e for e in owned if e.path not in keep]
        if not removable:
            return []
        for entry in owned:  # never delete the newest valid checkpoint: checksums verified, even of the one
            # just written (``protect``): objects can change in the store after the upload (R-PUB-19)
            if validate(entry.path).ok:
                keep.add(entry.path)
                break
            logger.warning("%s fails verification: pruning keeps an older valid checkpoint", entry.path)
        removed: list[FsPath] = []
        for entry in reversed(removable):  # oldest first
            if entry.path in keep:
                continue
            try:
                delete_remote_checkpoint(entry.path)
            except FileNotFoundError:  # pruned by another process meanwhile
                continue
            removed.append(entry.path)
            reason = self.failed.pop(entry.path, None)
            if reason is not None:
                logger.warning("pruned %s, which failed verification when a run resumed from it (%s)",
                               entry.path, reason)
        return removed

    def _newest_of_live_writers(self, owned: list[RemoteEntry]) -> set[FsPath]:
        """The newest checkpoint of every other writer process that still runs (another machine's: an hour)."""
        mine = process_token()
        newest: dict[str, RemoteEntry] = {}
        for entry in owned:
            if entry.writer is not None and entry.writer != mine:
                newest.setdefault(entry.writer, entry)
        kept: set[FsPath] = set()
        for writer, entry in newest.items():
            running = process_running(writer)
            if running is None:
                try:
                    running = time.time() - entry.path.fs.modified(entry.path.key("manifest.json")).timestamp() \
                        < STALE_AFTER_S
                except (NotImplementedError, OSError):
                    running = True
            if running:
                kept.add(entry.path)
        return kept

    # -- resuming -------------------------------------------------------------------------
    def load_newest(self, load: Callable[[FsPath], _T]) -> tuple[FsPath, _T] | None:
        """Call ``load`` on the newest checkpoint, falling back past those that fail verification.

        As :meth:`Rotation.load_newest <opencheckpoint.run.Rotation.load_newest>`; a prefix
        without a manifest (an abandoned save) is no candidate and no error.
        """
        entries, broken = self._scan()
        broken = [(path, exc) for path, exc in broken if not isinstance(exc, NotACheckpoint)]
        for path, error in broken:
            logger.warning("skipping %s: not a readable checkpoint (%s)", path, error)
        first_error: CheckpointError | None = None
        for entry in newest_first(entries):
            try:
                return entry.path, load(entry.path)
            except IncompatibleComponent:
                raise
            except CheckpointError as exc:
                logger.warning("skipping %s: it fails verification (%s); falling back to an older checkpoint",
                               entry.path, exc)
                self.failed[entry.path] = str(exc)
                first_error = first_error or exc
        if first_error is not None:
            raise first_error
        if broken:
            raise max(broken, key=lambda item: item[0].name)[1]
        return None

    def load_latest(self, checkpoint: Checkpoint, **load_kwargs: Any) -> LoadResult:
        """Restore ``checkpoint`` from the newest checkpoint that loads (:class:`NotACheckpoint` if none)."""
        found = self.load_newest(lambda path: checkpoint.load(path, **load_kwargs))
        if found is None:
            raise NotACheckpoint(f"no {self.prefix}-<step> checkpoint below the prefix", file=str(self.directory))
        return found[1]
