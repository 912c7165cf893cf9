"""Checkpoint rotation: a directory of step-numbered checkpoints with a retention policy (:class:`Rotation`).

It keeps the ``keep_last`` most recently written checkpoints plus the best by
a metric read from the manifest metadata, deletes only checkpoints it wrote
itself, never the one just written nor the newest valid one, and restoring
falls back past a newest checkpoint that fails verification. Split from
:mod:`opencheckpoint.run`, which re-exports every public name.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

from .async_save import SaveHandle, save_in_background
from .checkpoint import Checkpoint, CheckpointFormat, LoadResult
from .container.debris import (
    STALE_AFTER_S,
    parse,
    process_running,
    process_token,
    release,
    working_path,
)
from .container.publish import clean_debris, remove_tree
from .container.target import check_deletable, is_empty_directory
from .format.errors import CheckpointError, IncompatibleComponent, NotACheckpoint
from .location import PathArg, resolve_location
from .progress import ProgressArg
from .read.reader import CheckpointReader
from .read.validate import validate
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
from .rotation_state import ensure_identity, locked, read_state, record_failures

logger = logging.getLogger("opencheckpoint.run")

_STEP_DIGITS = STEP_DIGITS
_T = TypeVar("_T")


@dataclass(frozen=True)
class RotationEntry:
    """One recognised checkpoint of a rotation directory.

    ``owned``: the rotation wrote it (its manifest metadata records, under
    :data:`ROTATION_KEY`, this directory's rotation id, this rotation's
    prefix, and the name and step it has); only owned checkpoints are ever
    pruned. ``sequence``: the rotation's write order of owned checkpoints (0
    for the others). ``writer``: the process that wrote an owned one.
    """

    path: Path
    step: int
    created_at: str
    metric: float | None
    owned: bool = False
    sequence: int = 0
    writer: str | None = None


class Rotation:
    """A directory of step-numbered checkpoints with a retention policy.

    Args:
        directory: where the checkpoints live (created on first save).
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
    saves in the directory goes too (only when its writer is gone). A save's
    bookkeeping and pruning hold an advisory lock on the directory, so
    concurrent rotations of one folder take turns; writing the checkpoint
    does not, so a suspended or slow writer never blocks another.

    Which checkpoint is the latest: the one this rotation wrote most
    recently, whatever its step (directories with none of its own: the
    highest step). After resuming from an older step, checkpoints with
    higher steps from the abandoned run stay on disk, untouched, until they
    fall out of the ``keep_last`` most recently written; they are never
    taken for the latest once a newer save exists.

    >>> import tempfile
    >>> from opencheckpoint import Checkpoint
    >>> rotation = Rotation(tempfile.mkdtemp(), keep_last=1, keep_best=("loss", "min"))
    >>> ckpt = Checkpoint(value={"x": 1})
    >>> for step, loss in [(1, 0.5), (2, 0.1), (3, 0.9)]:
    ...     _ = rotation.save(ckpt, step, metadata={"loss": loss})
    >>> [p.name for p in rotation.checkpoints()], rotation.best().name
    (['checkpoint-000000000002', 'checkpoint-000000000003'], 'checkpoint-000000000002')
    """

    def __new__(cls, directory: PathArg | None = None, *args: Any, **kwargs: Any) -> Rotation:
        """A :class:`~.remote.rotation.RemoteRotation` (the same methods) for a URL or an ``FsPath``.

        (``directory`` is None only when :mod:`copy` or :mod:`pickle` make an instance.)
        """
        if cls is Rotation and directory is not None and not isinstance(resolve_location(directory), Path):
            from .remote.rotation import RemoteRotation

            return cast(Rotation, RemoteRotation(directory, *args, **kwargs))
        return super().__new__(cls)

    def __init__(
        self,
        directory: PathArg,
        keep_last: int = 3,
        keep_best: tuple[str, Literal["min", "max"]] | None = None,
        prefix: str = "checkpoint",
    ) -> None:
        check_policy(keep_last, keep_best, prefix)
        location = resolve_location(directory)
        if not isinstance(location, Path):  # a subclass given a remote location: Rotation's methods are local
            raise TypeError(f"{type(self).__name__} keeps checkpoints in a local directory, not at {location}")
        self.directory = location
        self.keep_last = keep_last
        self.keep_best = keep_best
        self.prefix = prefix
        self._pattern = name_pattern(prefix)
        #: Checkpoints that failed verification when resuming -> why (a later save over one says so).
        self.failed: dict[Path, str] = {}
        self._issued = 0  # the last write sequence number this object handed out

    def path_for(self, step: int, format: CheckpointFormat = "directory") -> Path:
        """The name a checkpoint of ``step`` gets."""
        suffix = ARCHIVE_SUFFIX if format == "archive" else ""
        return self.directory / f"{self.prefix}-{step:0{_STEP_DIGITS}d}{suffix}"

    def save(
        self,
        checkpoint: Checkpoint,
        step: int,
        metadata: Mapping[str, Any] | None = None,
        format: CheckpointFormat | None = None,
        *,
        components: Collection[str] | None = None,
        metric_required: bool = True,
    ) -> Path:
        """Save ``checkpoint`` as the checkpoint of ``step``, then prune; return its path (which exists).

        With ``keep_best``, ``metadata`` needs a finite metric (``ValueError`` otherwise) unless
        ``metric_required=False``: a checkpoint saved without one is kept by ``keep_last`` only.
        """
        meta = save_metadata(step, metadata, self.keep_best if metric_required else None)
        output = format or checkpoint.format

        def write(target: Path) -> Path:
            path = checkpoint.save(target, components=components, metadata=meta, format=output)
            return self._published(step, output, target, path)

        return self._guarded(step, lambda: self._begin(step, meta, output, write))

    def save_async(self, checkpoint: Checkpoint, step: int, metadata: Mapping[str, Any] | None = None,
                   format: CheckpointFormat | None = None, *, components: Collection[str] | None = None,
                   progress: ProgressArg = None, metric_required: bool = True) -> SaveHandle:
        """:meth:`save` in the background (:meth:`Checkpoint.save_async`); pruning follows publication, and the
        handle's ``result()`` is the checkpoint's path once published and pruned."""
        meta = save_metadata(step, metadata, self.keep_best if metric_required else None)
        output = format or checkpoint.format

        def start(target: Path) -> SaveHandle:
            def publish(save: Callable[[], Path]) -> Path:  # in the writer thread: prune once published
                return self._guarded(step, lambda: self._published(step, output, target, save()))

            return save_in_background(checkpoint, target, components=components, metadata=meta, format=output,
                                      progress=progress, around=publish)

        return self._guarded(step, lambda: self._begin(step, meta, output, start))

    def _guarded(self, step: int, work: Callable[[], _T]) -> _T:
        try:
            return work()
        except OSError as exc:  # a file system failure is reported as the library's error, naming the path
            where = exc.filename if isinstance(exc.filename, str) else str(self.directory)
            raise CheckpointError(f"the rotation could not save step {step}: {exc.strerror or exc}",
                                  file=where) from exc

    def _begin(self, step: int, meta: dict[str, Any], output: CheckpointFormat, write: Callable[[Path], _T]) -> _T:
        """Mark ``meta`` as this rotation's, then ``write(target)`` (a save, or the start of an async one)."""
        # The bookkeeping and the pruning hold the directory's lock; writing the checkpoint does not, so a
        # writer suspended mid-write never blocks another (rotation_state).
        with locked(self.directory):
            rotation_id = ensure_identity(self.directory)
            # An async save of this rotation may not be on disk yet: its number counts too.
            sequence = 1 + max(self._issued, max((e.sequence for e in self.entries()), default=0))
            self._issued = sequence
        target = self.path_for(step, output)
        meta[ROTATION_KEY] = {"prefix": self.prefix, "step": step, "sequence": sequence, "rotation": rotation_id,
                              "name": target.name, "writer": process_token()}
        reason = self.failed.pop(target, None) or read_state(self.directory).failed.get(target.name)
        if reason is not None:
            logger.warning("replacing %s, which failed verification when a run resumed from this directory (%s)",
                           target, reason)
        return write(target)

    def _published(self, step: int, output: CheckpointFormat, target: Path, path: Path) -> Path:
        """After the checkpoint of ``step`` is published at ``path``: bookkeeping and pruning."""
        with locked(self.directory) as held:
            if target.name in read_state(self.directory).failed:
                record_failures(self.directory, {target.name: None}, lock=False)
            if not held:
                logger.warning("pruning of %s skipped: another process holds its lock (the next save prunes)",
                               self.directory)
                return path
            other = self.path_for(step, "directory" if output == "archive" else "archive")
            if os.path.lexists(other) and self._owns(other, step):
                _remove(other)  # one checkpoint per step: the new one replaces the other form
            self._prune_locked(protect=[path])
        return path

    def _owned_by_us(self, metadata: Any, path: Path, step: int, rotation_id: str | None) -> int | None:
        """The write sequence if ``metadata`` records this rotation writing ``path`` as step ``step``, else None.

        The mark must name this directory's rotation id, this prefix, and the
        checkpoint's own name and step: a copy under another name, or a
        checkpoint moved in from another run's directory, is not ours.
        """
        return owned_sequence(metadata, path.name, self.prefix, step, rotation_id)

    def _owns(self, path: Path, step: int) -> bool:
        try:
            with CheckpointReader(path) as reader:
                metadata = reader.manifest.get("metadata")
        except (CheckpointError, OSError):
            return False
        return self._owned_by_us(metadata, path, step, read_state(self.directory).rotation_id) is not None

    def _candidate_names(self, names: list[str]) -> set[str]:
        """Names of the pattern, and those served from an old copy while the name is missing (R-PUB-13).

        A replacement killed between its two renames (file systems without an
        atomic exchange) leaves the checkpoint only at ``.NAME.oc-old-*``:
        it still is that step's checkpoint.
        """
        present = set(names)
        found = {name for name in names if self._pattern.fullmatch(name)}
        for name in names:
            entry = parse(self.directory / name) if name.startswith(".") else None
            if (entry is not None and entry.kind == "old" and entry.target_name not in present
                    and self._pattern.fullmatch(entry.target_name)):
                found.add(entry.target_name)
        return found

    def _scan(self) -> tuple[list[RotationEntry], list[tuple[Path, CheckpointError]]]:
        """The readable checkpoints of the directory (oldest step first), and the names that do not open."""
        try:
            names = os.listdir(self.directory)
        except (FileNotFoundError, NotADirectoryError):
            return [], []
        rotation_id = read_state(self.directory).rotation_id
        found: list[RotationEntry] = []
        broken: list[tuple[Path, CheckpointError]] = []
        for name in self._candidate_names(names):
            match = self._pattern.fullmatch(name)
            assert match is not None  # _candidate_names keeps only names of the pattern
            path = self.directory / name
            try:
                with CheckpointReader(path) as reader:
                    manifest = reader.manifest
            except CheckpointError as exc:
                broken.append((path, exc))  # unreadable or foreign: never listed, never pruned
                continue
            except OSError as exc:  # removed or replaced while being looked at
                broken.append((path, CheckpointError(f"cannot be read: {exc.strerror or exc}", file=str(path))))
                continue
            step = int(match.group(1))
            metadata = manifest.get("metadata") or {}
            score = metric(metadata.get(self.keep_best[0])) if self.keep_best else None
            sequence = self._owned_by_us(metadata, path, step, rotation_id)
            mark = metadata.get(ROTATION_KEY) if isinstance(metadata, dict) else None
            writer = mark.get("writer") if sequence is not None and isinstance(mark, dict) else None
            found.append(RotationEntry(path, step, str(manifest.get("created_at", "")), score,
                                       owned=sequence is not None, sequence=sequence or 0,
                                       writer=writer if isinstance(writer, str) else None))
        found.sort(key=lambda e: (e.step, e.created_at, e.path.name))
        broken.sort(key=lambda item: item[0])
        return found, broken

    def entries(self) -> list[RotationEntry]:
        """Every readable checkpoint of the directory, oldest step first."""
        return self._scan()[0]

    def checkpoints(self) -> list[Path]:
        """Paths of the readable checkpoints, oldest step first."""
        return [e.path for e in self.entries()]

    def latest(self) -> Path | None:
        """The checkpoint this rotation wrote most recently (none of its own: the highest step), or None."""
        entries = newest_first(self.entries())
        return entries[0].path if entries else None

    def best(self) -> Path | None:
        """The checkpoint with the best metric (ties: the newer one), or None."""
        entry = self._best(self.entries())
        return None if entry is None else entry.path

    def _best(self, entries: list[RotationEntry]) -> RotationEntry | None:
        return best_entry(entries, self.keep_best)

    def prune(self, protect: Collection[Path] = ()) -> list[Path]:
        """Delete this rotation's checkpoints beyond the policy, and ended writers' debris; return the deleted paths.

        ``protect``: checkpoints known valid (a save passes the one it just
        wrote). Pruning keeps the ``keep_last`` most recently written, the
        best, the newest one of every other writer process that still runs
        (it may just have returned its path), a checkpoint served from its old
        copy (R-PUB-13: the only copy), and the newest one that passes
        :func:`~opencheckpoint.validate` (checked only where the newest kept
        ones are not known valid), and never touches a checkpoint it did not
        write. A checkpoint that failed verification when a run resumed from
        the directory is deleted with a warning naming it and why.
        """
        if not self.directory.is_dir():
            return []
        with locked(self.directory) as held:
            if not held:
                logger.warning("pruning of %s skipped: another process holds its lock", self.directory)
                return []
            return self._prune_locked(protect)

    def _prune_locked(self, protect: Collection[Path]) -> list[Path]:
        clean_debris(self.directory)
        owned = newest_first(e for e in self.entries() if e.owned)
        keep = {e.path for e in owned[: self.keep_last]} | set(protect)
        best = self._best(owned)
        if best is not None:
            keep.add(best.path)
        keep |= _newest_of_live_writers(owned)
        removable = [e for e in owned if e.path not in keep and os.path.lexists(e.path)]
        if not removable:
            return []
        # Never delete the newest valid checkpoint: find it among the newest (usually the one just written).
        for entry in owned:
            if entry.path in protect or validate(entry.path).ok:
                keep.add(entry.path)
                break
            logger.warning("%s fails verification: pruning keeps an older valid checkpoint", entry.path)
        recorded = read_state(self.directory).failed
        removed: list[Path] = []
        forget: dict[str, str | None] = {}
        for entry in reversed(removable):  # oldest first
            if entry.path in keep:
                continue
            try:
                _remove(entry.path)
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
            record_failures(self.directory, forget, lock=False)
        return removed

    def load_newest(self, load: Callable[[Path], _T]) -> tuple[Path, _T] | None:
        """Call ``load`` on the newest checkpoint, falling back past those that fail verification.

        Candidates come in :meth:`latest` order. A candidate whose ``load``
        raises a :class:`CheckpointError` (corrupt, truncated, unsupported) is
        skipped with a warning naming it and the reason; it is never deleted,
        and the failure is recorded in the directory's state file, so that a
        later process that prunes or replaces it says so.
        :class:`IncompatibleComponent` (the live objects do not fit) is raised
        at once: an older checkpoint would not fit better. Returns
        ``(path, result)``, None when the directory holds no checkpoint (an
        empty folder of a checkpoint's name holds none). If every candidate
        fails, including names that do not even open (a torn manifest, a newer
        format version), raises the newest one's error: a run directory holding
        only failing checkpoints is not "nothing to resume".
        """
        entries, broken = self._scan()
        broken = [(path, exc) for path, exc in broken if not is_empty_directory(path)]
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
                record_failures(self.directory, failures)
        if first_error is not None:
            raise first_error
        if broken:  # the highest step's error: what the run would have resumed from
            path, error = max(broken, key=lambda item: (self._step_of(item[0]), item[0].name))
            raise error
        return None

    def _step_of(self, path: Path) -> int:
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


def _newest_of_live_writers(owned: list[RotationEntry]) -> set[Path]:
    """The newest checkpoint (of ``owned``, newest first) of every other writer process that still runs.

    Another process's :meth:`Rotation.save` returned that path to its caller;
    pruning it would hand that caller a path that does not exist. A writer on
    another machine instance cannot be asked about: it counts as running while
    its newest checkpoint is less than :data:`STALE_AFTER_S` old.
    """
    mine = process_token()
    newest: dict[str, RotationEntry] = {}
    for entry in owned:
        if entry.writer is not None and entry.writer != mine:
            newest.setdefault(entry.writer, entry)
    kept: set[Path] = set()
    for writer, entry in newest.items():
        running = process_running(writer)
        if running is None:
            try:
                running = time.time() - os.lstat(entry.path).st_mtime < STALE_AFTER_S
            except OSError:
                running = False
        if running:
            kept.add(entry.path)
    return kept


def _remove(path: Path) -> None:
    """Delete a checkpoint: renamed out of the rotation's namespace first, so a crash never leaves a
    half-deleted checkpoint under its name (the ``.NAME.oc-delete-*`` tombstone is debris, cleaned later)."""
    check_deletable(path)  # only ever a checkpoint (R-PUB-16), whatever the name says
    tombstone = working_path(path, "delete")
    try:
        os.replace(path, tombstone)
        remove_tree(tombstone)
    finally:
        release(tombstone)
