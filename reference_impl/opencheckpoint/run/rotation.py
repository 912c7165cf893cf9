"""Checkpoint rotation: step-numbered checkpoints with a retention policy (:class:`Rotation`), on any storage.

One class for a local directory and for a prefix of an object store (a URL
or an ``FsPath``): what differs between them (a lock or none, how a
checkpoint is deleted, whether a step's checkpoint may be replaced in place)
is the :class:`~.rotation_store.RotationStore`'s. Every save goes through
:meth:`Checkpoint.save <opencheckpoint.Checkpoint.save>` (the save pipeline),
an async one through the pipeline's async save.

It keeps the ``keep_last`` most recently written checkpoints plus the best by
a metric read from the manifest metadata, deletes only checkpoints it wrote
itself, never the one just written nor the newest valid one, and restoring
falls back past a newest checkpoint that fails verification.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from ..container.debris import STALE_AFTER_S, process_running, process_token
from ..format.errors import CheckpointError, IncompatibleComponent, NotACheckpoint
from ..location import PathArg, resolve_location
from ..progress import ProgressArg
from ..read.reader import CheckpointReader
from ..read.validate import validate
from ..remote.failures import is_storage_error
from ..write.async_save import SaveHandle, save_in_background
from .rotation_policy import (
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
from .rotation_store import store_for

if TYPE_CHECKING:
    from ..checkpoint import Checkpoint, CheckpointFormat, LoadResult

#: How many listings a scan takes at most when a run pruning meanwhile emptied the previous one.
_SCANS = 3

logger = logging.getLogger("opencheckpoint.run")

_T = TypeVar("_T")


@dataclass(frozen=True)
class RotationEntry:
    """One recognised checkpoint of a rotation.

    ``owned``: the rotation wrote it (its manifest metadata records, under
    :data:`ROTATION_KEY`, this directory's rotation id, this rotation's
    prefix, and the name and step it has); only owned checkpoints are ever
    pruned. ``sequence``: the rotation's write order of owned checkpoints (0
    for the others). ``writer``: the process that wrote an owned one.
    """

    path: Any
    step: int
    created_at: str
    metric: float | None
    owned: bool = False
    sequence: int = 0
    writer: str | None = None


class Rotation:
    """Step-numbered checkpoints in a directory (or below a prefix of an object store) with a retention policy.

    Args:
        directory: where the checkpoints live (created on first save): a local path, a URL
            (``s3://bucket/run``, ``memory://run``) or an ``FsPath``.
        keep_last: how many of the newest checkpoints to keep (>= 1).
        keep_best: ``(metadata_key, "min" | "max")``: also keep the checkpoint
            whose manifest metadata has the best value of that key.
        prefix: file name prefix; names are ``{prefix}-{step:012d}`` (``.ocp`` for archives).

    What pruning deletes: only checkpoints this rotation wrote (recorded in
    their manifest metadata under :data:`ROTATION_KEY` when they were
    written: the directory's random rotation id, the prefix, the checkpoint's
    own name and step), beyond the ``keep_last`` most recently written and
    the best; never the checkpoint just saved, never the newest valid one,
    never the newest one of another writer process that still runs, never a
    checkpoint made by hand, copied under another name, moved in from
    another run's directory or written by another tool. Debris of killed
    saves goes too (only when its writer is gone). Locally, a save's
    bookkeeping and pruning hold an advisory lock on the directory, so
    concurrent rotations of one folder take turns; writing the checkpoint
    does not, so a suspended or slow writer never blocks another. On an
    object store (no lock, nothing renamed) a step's valid checkpoint is
    never overwritten in place, and a failed prune never fails the save.

    Which checkpoint is the latest: the one this rotation wrote most
    recently, whatever its step (directories with none of its own: the
    highest step). After resuming from an older step, checkpoints with
    higher steps from the abandoned run stay, untouched, until they fall out
    of the ``keep_last`` most recently written.

    >>> import tempfile
    >>> from opencheckpoint import Checkpoint
    >>> rotation = Rotation(tempfile.mkdtemp(), keep_last=1, keep_best=("loss", "min"))
    >>> ckpt = Checkpoint(value={"x": 1})
    >>> for step, loss in [(1, 0.5), (2, 0.1), (3, 0.9)]:
    ...     _ = rotation.save(ckpt, step, metadata={"loss": loss})
    >>> [p.name for p in rotation.checkpoints()], rotation.best().name
    (['checkpoint-000000000002', 'checkpoint-000000000003'], 'checkpoint-000000000002')
    """

    def __init__(self, directory: PathArg, keep_last: int = 3,
                 keep_best: tuple[str, Literal["min", "max"]] | None = None, prefix: str = "checkpoint") -> None:
        check_policy(keep_last, keep_best, prefix)
        self.store = store_for(resolve_location(directory))
        self.directory: Any = self.store.directory
        self.keep_last = keep_last
        self.keep_best = keep_best
        self.prefix = prefix
        self._pattern = name_pattern(prefix)
        #: Checkpoints that failed verification when resuming -> why (a later save over one says so).
        self.failed: dict[Any, str] = {}
        self._issued = 0  # the last write sequence number this object handed out
        #: Writer threads of async saves number their saves one at a time (the listing, then ``_issued``).
        self._numbering = threading.Lock()

    def path_for(self, step: int, format: CheckpointFormat = "directory") -> Any:
        """The name a checkpoint of ``step`` gets."""
        suffix = ARCHIVE_SUFFIX if format == "archive" else ""
        return self.directory / f"{self.prefix}-{step:0{STEP_DIGITS}d}{suffix}"

    # -- saving -------------------------------------------------------------------------
    def save(self, checkpoint: Checkpoint, step: int, metadata: Mapping[str, Any] | None = None,
             format: CheckpointFormat | None = None, *, components: Collection[str] | None = None,
             metric_required: bool = True) -> Any:
        """Save ``checkpoint`` as the checkpoint of ``step``, then prune; return its path (which exists).

        With ``keep_best``, ``metadata`` needs a finite metric (``ValueError`` otherwise) unless
        ``metric_required=False``: a checkpoint saved without one is kept by ``keep_last`` only.
        """
        meta = save_metadata(step, metadata, self.keep_best if metric_required else None)
        output = format or checkpoint.format

        def write(target: Any) -> Any:
            path = checkpoint.save(target, components=components, metadata=meta, format=output)
            return self._published(step, output, target, path)

        with self.store.errors(f"save step {step}"):
            return self._begin(step, meta, output, write)

    def save_async(self, checkpoint: Checkpoint, step: int, metadata: Mapping[str, Any] | None = None,
                   format: CheckpointFormat | None = None, *, components: Collection[str] | None = None,
                   progress: ProgressArg = None, metric_required: bool = True) -> SaveHandle:
        """:meth:`save` in the background (:meth:`Checkpoint.save_async`); pruning follows publication, and the
        handle's ``result()`` is the checkpoint's path once published and pruned.

        On an object store the call sends no request: listing the rotation (to number the save), creating its
        id, and refusing a step that already has a valid checkpoint (:class:`TargetExists`) happen in the
        writer thread before anything is uploaded, and their errors are raised by the handle's ``wait()``.
        Saves in flight at once are numbered in the order their writers start."""
        meta = save_metadata(step, metadata, self.keep_best if metric_required else None)
        output = format or checkpoint.format
        # On an object store the bookkeeping (the rotation id, the listing that numbers the save, the step's old
        # checkpoint) is a request per checkpoint kept: it runs in the writer thread, before the first upload,
        # so the training loop waits only for the plan and the snapshot (issue 22).
        deferred = self.store.bookkeeping_in_writer

        def start(target: Any) -> SaveHandle:
            request = checkpoint._request(components=components, metadata=meta, format=output, checkpoint_id=None,
                                          created_at=None, overwrite=True, producer=None, component_options=None)

            def publish(save: Callable[[], Any]) -> Any:  # in the writer thread: prune once published
                with self.store.errors(f"save step {step}"):
                    if deferred:  # the request holds its own copy of the metadata: mark that one
                        self._mark(step, request.fields["metadata"], target)
                    return self._published(step, output, target, save())

            return save_in_background(target, request, progress=progress, around=publish)

        with self.store.errors(f"save step {step}"):
            return self._begin(step, meta, output, start, mark=not deferred)

    def _begin(self, step: int, meta: dict[str, Any], output: CheckpointFormat, write: Callable[[Any], _T],
               *, mark: bool = True) -> _T:
        """Mark ``meta`` as this rotation's (unless ``mark`` is False: the writer thread does), then
        ``write(target)`` (a save, or the start of an async one)."""
        self.store.check_form(output)
        target = self.path_for(step, output)
        if mark:
            self._mark(step, meta, target)
        return write(target)

    def _mark(self, step: int, meta: dict[str, Any], target: Any) -> None:
        """Record in ``meta`` that this rotation writes ``target`` (its id, and the save's sequence number), and
        make room for it when the step already has a checkpoint here (:meth:`RotationStore.make_room`)."""
        # The bookkeeping and the pruning hold the directory's lock; writing the checkpoint does not, so a
        # writer suspended mid-write never blocks another (rotation_state).
        with self.store.locked(), self._numbering:
            rotation_id = self.store.rotation_id(create=True)
            entries = self.entries()
            # An async save of this rotation may not be on disk yet: its number counts too.
            sequence = 1 + max(self._issued, max((e.sequence for e in entries), default=0))
            self._issued = sequence
        meta[ROTATION_KEY] = {"prefix": self.prefix, "step": step, "sequence": sequence, "rotation": rotation_id,
                              "name": target.name, "writer": process_token()}
        reason = self.failed.get(target) or self.store.failures().get(target.name)
        self.store.make_room(target, step, any(e.path == target and e.owned for e in entries), reason)
        self.failed.pop(target, None)
        if reason is not None:
            logger.warning("replacing %s, which failed verification when a run resumed from this directory (%s)",
                           target, reason)

    def _published(self, step: int, output: CheckpointFormat, target: Any, path: Any) -> Any:
        """After the checkpoint of ``step`` is published at ``path``: bookkeeping and pruning. A failed prune
        never fails the save (the checkpoint is published and valid): the next save prunes again."""
        try:
            with self.store.locked() as held:
                if target.name in self.store.failures():
                    self.store.record_failures({target.name: None}, lock=False)
                if not held:
                    logger.warning("pruning of %s skipped: another process holds its lock (the next save prunes)",
                                   self.directory)
                    return path
                other = self.path_for(step, "directory" if output == "archive" else "archive")
                if self.store.exists(other) and self._owns(other, step):
                    self.store.delete(other)  # one checkpoint per step: the new one replaces the other form
                self._prune_locked(protect=[path])
        except Exception as exc:
            if not (is_storage_error(exc) or isinstance(exc, CheckpointError)):
                raise
            logger.warning("saved %s, but pruning %s failed (the next save prunes again): %s", path,
                           self.directory, exc)
        return path

    # -- listing ------------------------------------------------------------------------
    def _owns(self, path: Any, step: int) -> bool:
        try:
            with CheckpointReader(path) as reader:
                metadata = reader.manifest.get("metadata")
        except (CheckpointError, OSError):
            return False
        return owned_sequence(metadata, path.name, self.prefix, step, self.store.rotation_id(create=False)) \
            is not None

    def _entry(self, path: Any, step: int, manifest: Mapping[str, Any], rotation_id: str | None) -> RotationEntry:
        metadata = manifest.get("metadata") or {}
        sequence = owned_sequence(metadata, path.name, self.prefix, step, rotation_id)
        mark = metadata.get(ROTATION_KEY) if isinstance(metadata, dict) else None
        writer = mark.get("writer") if sequence is not None and isinstance(mark, dict) else None
        score = metric(metadata.get(self.keep_best[0])) if self.keep_best and isinstance(metadata, dict) else None
        return RotationEntry(path, step, str(manifest.get("created_at", "")), score, owned=sequence is not None,
                             sequence=sequence or 0, writer=writer if isinstance(writer, str) else None)

    def _scan(self) -> tuple[list[RotationEntry], list[tuple[Any, CheckpointError]]]:
        """The readable checkpoints (oldest step first), and the names that do not open.

        A run saving meanwhile may prune every name one listing found before each is opened (it keeps
        newer ones): a scan that found none, and lost some of its names, lists the directory again.
        """
        for _ in range(_SCANS):
            found, broken = self._scan_once()
            if found or not any(not self.store.exists(path) for path, _error in broken):
                break
        return found, broken

    def _scan_once(self) -> tuple[list[RotationEntry], list[tuple[Any, CheckpointError]]]:
        names = [name for name in self.store.names() if self._pattern.fullmatch(name)]
        rotation_id = self.store.rotation_id(create=False) if names else None
        found: list[RotationEntry] = []
        broken: list[tuple[Any, CheckpointError]] = []
        for name in names:
            path = self.directory / name
            try:
                with CheckpointReader(path) as reader:
                    manifest = reader.manifest
            except CheckpointError as exc:
                broken.append((path, exc))  # unreadable, unfinished or foreign: never listed, never pruned
                continue
            except OSError as exc:  # removed or replaced while being looked at
                broken.append((path, CheckpointError(f"cannot be read: {exc.strerror or exc}", file=str(path))))
                continue
            found.append(self._entry(path, self._step_of(path), manifest, rotation_id))
        found.sort(key=lambda e: (e.step, e.created_at, e.path.name))
        broken.sort(key=lambda item: item[0].name)
        return found, broken

    def entries(self) -> list[RotationEntry]:
        """Every readable checkpoint of the rotation, oldest step first."""
        return self._scan()[0]

    def checkpoints(self) -> list[Any]:
        """Paths of the readable checkpoints, oldest step first."""
        return [e.path for e in self.entries()]

    def latest(self) -> Any:
        """The checkpoint this rotation wrote most recently (none of its own: the highest step), or None."""
        entries = newest_first(self.entries())
        return entries[0].path if entries else None

    def best(self) -> Any:
        """The checkpoint with the best metric (ties: the newer one), or None."""
        entry = best_entry(self.entries(), self.keep_best)
        return None if entry is None else entry.path

    # -- pruning ------------------------------------------------------------------------
    def prune(self, protect: Collection[Any] = ()) -> list[Any]:
        """Delete this rotation's checkpoints beyond the policy, and ended writers' debris; return the deleted paths.

        ``protect``: checkpoints known valid (a save passes the one it just
        wrote). Pruning keeps the ``keep_last`` most recently written, the
        best, the newest one of every other writer process that still runs
        (it may just have returned its path), a checkpoint served from its old
        copy (R-PUB-13: the only copy), and the newest one that passes
        :func:`~opencheckpoint.read.validate`, and never touches a checkpoint it did
        not write. A checkpoint that failed verification when a run resumed
        from the directory is deleted with a warning naming it and why.
        """
        if isinstance(self.directory, Path) and not self.directory.is_dir():
            return []  # nothing to prune, and no directory made for the lock
        with self.store.locked() as held:
            if not held:
                logger.warning("pruning of %s skipped: another process holds its lock", self.directory)
                return []
            return self._prune_locked(protect)

    def _prune_locked(self, protect: Collection[Any]) -> list[Any]:
        self.store.clean_debris()
        owned = newest_first(e for e in self.entries() if e.owned)
        keep = {e.path for e in owned[: self.keep_last]} | set(protect) | self._newest_of_live_writers(owned)
        best = best_entry(owned, self.keep_best)
        if best is not None:
            keep.add(best.path)
        removable = [e for e in owned if e.path not in keep and self.store.exists(e.path)]
        if not removable:
            return []
        # Never delete the newest valid checkpoint: find it among the newest (usually the one just written).
        for entry in owned:
            if (self.store.trusts_protected and entry.path in protect) or validate(entry.path).ok:
                keep.add(entry.path)
                break
            logger.warning("%s fails verification: pruning keeps an older valid checkpoint", entry.path)
        return self._delete([e for e in reversed(removable) if e.path not in keep])  # oldest first

    def _delete(self, entries: list[RotationEntry]) -> list[Any]:
        recorded = self.store.failures()
        removed: list[Any] = []
        forget: dict[str, str | None] = {}
        for entry in entries:
            try:
                self.store.delete(entry.path)
            except FileNotFoundError:  # removed by someone else meanwhile: nothing left to prune
                continue
            removed.append(entry.path)
            reason = self.failed.pop(entry.path, None) or recorded.get(entry.path.name)
            if reason is not None:
                logger.warning("pruned %s, which failed verification when a run resumed from this directory (%s)",
                               entry.path, reason)
                forget[entry.path.name] = None
            else:
                logger.info("pruned %s (step %d)", entry.path, entry.step)
        if forget:
            self.store.record_failures(forget, lock=False)
        return removed

    def _newest_of_live_writers(self, owned: list[RotationEntry]) -> set[Any]:
        """The newest checkpoint (of ``owned``, newest first) of every other writer process that still runs.

        Another process's :meth:`save` returned that path to its caller; pruning it would hand that caller a
        path that does not exist. A writer on another machine instance cannot be asked about: it counts as
        running while its newest checkpoint is less than :data:`STALE_AFTER_S` old.
        """
        mine = process_token()
        newest: dict[str, RotationEntry] = {}
        for entry in owned:
            if entry.writer is not None and entry.writer != mine:
                newest.setdefault(entry.writer, entry)
        kept: set[Any] = set()
        for writer, entry in newest.items():
            running = process_running(writer)
            if running is None:
                running = time.time() - self.store.modified(entry.path) < STALE_AFTER_S
            if running:
                kept.add(entry.path)
        return kept

    # -- resuming -------------------------------------------------------------------------
    def load_newest(self, load: Callable[[Any], _T]) -> tuple[Any, _T] | None:
        """Call ``load`` on the newest checkpoint, falling back past those that fail verification.

        Candidates come in :meth:`latest` order. A candidate whose ``load``
        raises a :class:`CheckpointError` (corrupt, truncated, unsupported) is
        skipped with a warning naming it and the reason; it is never deleted,
        and the failure is recorded (locally in the directory's state file),
        so that a later process that prunes or replaces it says so.
        :class:`IncompatibleComponent` (the live objects do not fit) is raised
        at once: an older checkpoint would not fit better. Returns
        ``(path, result)``, None when there is no checkpoint (an empty folder
        of a checkpoint's name, a prefix without a manifest hold none). If
        every candidate fails, including names that do not even open (a torn
        manifest, a newer format version), raises the newest one's error.
        """
        entries, broken = self._scan()
        broken = [(path, exc) for path, exc in broken if not self.store.ignorable(path, exc)]
        for path, error in broken:
            logger.warning("skipping %s: not a readable checkpoint (%s)", path, error)
        first_error: CheckpointError | None = None
        failures: dict[str, str | None] = {}
        try:
            for entry in newest_first(entries):
                try:
                    return entry.path, load(entry.path)
                except IncompatibleComponent:
                    raise
                except CheckpointError as exc:
                    logger.warning("skipping %s: it fails verification (%s); falling back to an older checkpoint",
                                   entry.path, exc)
                    self.failed[entry.path] = str(exc)
                    failures[entry.path.name] = str(exc)
                    first_error = first_error or exc
        finally:
            if failures:
                self.store.record_failures(failures)
        if first_error is not None:
            raise first_error
        if broken:  # the highest step's error: what the run would have resumed from
            raise max(broken, key=lambda item: (self._step_of(item[0]), item[0].name))[1]
        return None

    def _step_of(self, path: Any) -> int:
        match = self._pattern.fullmatch(path.name)
        return int(match.group(1)) if match else -1

    def load_latest(self, checkpoint: Checkpoint, **load_kwargs: Any) -> LoadResult:
        """Restore ``checkpoint`` from the newest checkpoint that loads (:class:`NotACheckpoint` if there is none).

        Falls back past checkpoints that fail verification (see :meth:`load_newest`).
        """
        found = self.load_newest(lambda path: checkpoint.load(path, **load_kwargs))
        if found is None:
            raise NotACheckpoint(f"no {self.prefix}-<step> checkpoint in the directory", file=str(self.directory))
        return found[1]


__all__ = ["ARCHIVE_SUFFIX", "ROTATION_KEY", "Rotation", "RotationEntry"]
