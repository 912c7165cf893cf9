"""Periodic saves and resuming a run: :class:`RunCheckpointer` and :func:`resolve_checkpoint_path`.

Framework-neutral: works with any :class:`~opencheckpoint.Checkpoint`. Re-exported,
with :class:`Rotation` and :class:`StopOnSignal`, by :mod:`opencheckpoint.run`.

* :class:`Rotation` keeps a directory of ``checkpoint-000000001234`` checkpoints
  (archives end in ``.ocp``): the ``keep_last`` most recently written, plus the
  best by a metric read from the manifest metadata. It deletes only checkpoints
  it wrote itself, never the one just written nor the newest valid one, and
  restoring falls back past a newest checkpoint that fails verification.
* :class:`RunCheckpointer` saves every ``interval`` steps and restores a run.
* :class:`StopOnSignal` turns SIGINT/SIGTERM into a stop request checked at
  loop boundaries.
* :func:`resolve_checkpoint_path` accepts a checkpoint or a run directory.

>>> import tempfile
>>> from opencheckpoint import Checkpoint
>>> state = {"step": 0}
>>> run = RunCheckpointer(Checkpoint(state=state), tempfile.mkdtemp(), interval=10)
>>> run.save(5) is None, run.save(10).name
(True, 'checkpoint-000000000010')
>>> state["step"] = 99
>>> run.restore(), state["step"]
(10, 0)
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from ..checkpoint import Checkpoint, LoadResult
from ..format.errors import CheckpointError, NotACheckpoint
from ..location import Location, PathArg, resolve_location
from ..read.reader import CheckpointReader
from ..write.async_save import SaveHandle
from .rotation import Rotation, RotationEntry
from .rotation_policy import ARCHIVE_SUFFIX, ROTATION_KEY, metric
from .stop_signal import StopOnSignal

logger = logging.getLogger("opencheckpoint.run")

#: The component :meth:`RunCheckpointer.restore` leaves alone unless ``overwrite_config=True``.
CONFIG = "config"
#: The components :class:`RunCheckpointer` restores only if a checkpoint has them, unless ``optional=`` says
#: otherwise (torchrl's default: a run resumed from a checkpoint saved without its logger or buffer).
DEFAULT_OPTIONAL = ("logger", "replay_buffer")
#: The rotation's file name prefix when none is given.
DEFAULT_PREFIX = "checkpoint"


def resolve_checkpoint_path(path: PathArg, prefix: str = "checkpoint") -> Location:
    """``path`` if it is a checkpoint, else the latest checkpoint of the run directory ``path``.

    Raises :class:`NotACheckpoint` when it is neither.

    >>> import tempfile
    >>> from opencheckpoint import Checkpoint
    >>> run_dir = tempfile.mkdtemp()
    >>> saved = Rotation(run_dir).save(Checkpoint(value=[1]), 7)
    >>> resolve_checkpoint_path(run_dir) == saved == resolve_checkpoint_path(saved)
    True
    """
    candidate = resolve_location(path)
    if _is_checkpoint(candidate):
        return candidate
    if candidate.is_dir():
        latest: Location | None = Rotation(candidate, prefix=prefix).latest()
        if latest is not None:
            return latest
    raise NotACheckpoint(f"neither a checkpoint nor a run directory holding {prefix}-<step> checkpoints",
                         file=str(candidate))


class RunCheckpointer:
    """Periodic saves of a run's :class:`Checkpoint`, a final save when the loop ends, and resuming it.

    Args:
        checkpoint: the run's components.
        directory: the rotation directory; ``None`` disables saving (every
            :meth:`save` returns ``None``, as in torchrl's ``RunCheckpointer``),
            for example in evaluation scripts that only resume.
        interval: save when at least this many steps passed since the last save.
        keep_last, keep_best: the :class:`Rotation` policy.
        exclude: components never saved (e.g. a replay buffer rebuilt on resume).
        optional: components restored only if the checkpoint has them; default
            :data:`DEFAULT_OPTIONAL` (``logger`` and ``replay_buffer``, as in torchrl), those of them registered.
        resume_path: a checkpoint or run directory to resume from; default: ``directory``'s latest.
        overwrite_config: whether :meth:`restore` restores the component named
            ``"config"``. Default ``False``: the configuration the script was
            started with stays in force on resume (a changed learning rate or
            step budget is not silently reverted), as in torchrl.
        async_save: save in the background (:meth:`Checkpoint.save_async`): :meth:`save` returns once the
            state is copied; it first waits for the previous save (raising its error), as do
            :meth:`restore`, :meth:`wait` and leaving a ``with`` block. Pruning follows publication.

    Used as a context manager, leaving the ``with`` block normally saves the
    last step :meth:`save` was called with (:meth:`finish`), so the steps
    after the last scheduled save are never lost; leaving it by an exception
    saves nothing (the state may be half-updated). Either way the pending
    async save is waited for first; on a normal exit its error is raised
    after the final save was attempted, on an exception it is logged (the
    exception that ended the block is the one raised).

    The final save carries the metadata of the latest :meth:`save` call that
    passed some (the loss of the last step, say), so ``ls`` and ``keep_best``
    see its metric. A loop stopped by :class:`StopOnSignal` (SIGTERM from a
    scheduler, Ctrl-C) that breaks after ``save(step)`` leaves the block
    normally: the stop save is written and the next run resumes at ``step``.
    With ``keep_best``, a final save whose metadata has no metric is still
    written (kept by ``keep_last`` only, never chosen as best), with a warning.

    Examples:
        >>> import tempfile
        >>> from opencheckpoint import Checkpoint
        >>> from opencheckpoint.run import RunCheckpointer
        >>> state = {"step": 0}
        >>> with RunCheckpointer(Checkpoint(state=state), tempfile.mkdtemp(), interval=10) as run:
        ...     for step in range(1, 26):
        ...         state["step"] = step
        ...         _ = run.save(step)
        >>> run.last_saved_step  # 10 and 20 by the schedule, 25 when the block ended
        25
    """

    def __init__(
        self,
        checkpoint: Checkpoint,
        directory: PathArg | None,
        interval: int,
        keep_last: int = 3,
        exclude: Collection[str] = (),
        optional: Collection[str] | None = None,
        resume_path: PathArg | None = None,
        keep_best: tuple[str, Literal["min", "max"]] | None = None,
        overwrite_config: bool = False,
        async_save: bool = False,
    ) -> None:
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
            raise ValueError(f"interval must be an int >= 1, got {interval!r}")
        if optional is None:
            optional = [name for name in DEFAULT_OPTIONAL if name in checkpoint.components]
        unknown = (set(exclude) | set(optional)) - set(checkpoint.components)
        if unknown:
            raise KeyError(f"exclude/optional name unregistered components: {sorted(unknown)}")
        self.checkpoint = checkpoint
        #: the rotation saves go to; None when saving is disabled (``directory=None``)
        self.rotation = None if directory is None else Rotation(directory, keep_last=keep_last, keep_best=keep_best)
        self.interval = interval
        self.exclude = frozenset(exclude)
        self.optional = frozenset(optional)
        self.overwrite_config = overwrite_config
        self.resume_path = None if resume_path is None else resolve_location(resume_path)
        self.last_saved_step: int | None = None
        #: the last step :meth:`save` was called with (saved or not): what :meth:`finish` saves
        self.last_step: int | None = None
        #: the metadata of the latest :meth:`save` call that passed some: what :meth:`finish` saves with
        self.last_metadata: dict[str, Any] | None = None
        #: the :class:`LoadResult` of the last :meth:`restore` (``conversions``, ``unused``), None before one
        self.last_load: LoadResult | None = None
        self.async_save = async_save
        #: the unfinished async save, if any
        self.pending: SaveHandle | None = None

    def wait(self) -> Location | None:
        """Wait for the pending async save; return its path (None if there was none), raise its error."""
        pending, self.pending = self.pending, None
        return None if pending is None else pending.result()

    @property
    def components(self) -> list[str]:
        """The components each save writes."""
        return [name for name in self.checkpoint.components if name not in self.exclude]

    def save(self, step: int, force: bool = False, metadata: Mapping[str, Any] | None = None) -> Location | None:
        """Save if ``interval`` steps passed since the last save (or ``force``); return the path or None.

        With ``async_save`` the path is where the checkpoint will be published (:attr:`pending`).

        A forced save of the step just saved writes nothing; with
        ``directory=None`` nothing is ever written. The manifest metadata gets
        ``{"step": step}`` plus ``metadata`` (and the rotation's mark,
        :data:`ROTATION_KEY`).
        """
        self.last_step = step
        if metadata is not None:
            self.last_metadata = dict(metadata)
        if not self._due(step, force):
            return None
        return self._write(step, {**(metadata or {}), "step": step}, metric_required=True)

    def _due(self, step: int, force: bool) -> bool:
        """Whether ``save(step, force)`` writes: saving is enabled, and ``interval`` steps passed (or
        ``force``) and ``step`` is not the step saved last."""
        last = self.last_saved_step
        if self.rotation is None:
            return False
        if force:
            return last != step
        return step - (last if last is not None else 0) >= self.interval

    def _write(self, step: int, meta: dict[str, Any], *, metric_required: bool) -> Location:
        assert self.rotation is not None  # _due said saving is enabled
        self.wait()
        if self.async_save:
            self.pending = self.rotation.save_async(self.checkpoint, step, metadata=meta, components=self.components,
                                                    metric_required=metric_required)
            path = self.pending.target
        else:
            path = self.rotation.save(self.checkpoint, step, metadata=meta, components=self.components,
                                      metric_required=metric_required)
        self.last_saved_step = step
        logger.info("saved %s", path)
        return path

    def finish(self, step: int | None = None, metadata: Mapping[str, Any] | None = None) -> Location | None:
        """The final save of a loop that ended: ``save(step, force=True)`` with ``metadata``, by default
        :attr:`last_metadata`; ``step`` defaults to the last one :meth:`save` was called with. Returns None
        when that step is already saved or there is none.

        Unlike :meth:`save`, a missing ``keep_best`` metric does not raise: the step is saved without
        one (a warning says so), since losing the run's last steps is worse than a checkpoint ``keep_best``
        cannot rank.
        """
        step = self.last_step if step is None else step
        if step is None or not self._due(step, force=True):
            return None
        meta = {**((self.last_metadata if metadata is None else metadata) or {}), "step": step}
        keep_best = self.rotation.keep_best if self.rotation is not None else None
        has_metric = keep_best is None or metric(meta.get(keep_best[0])) is not None
        if not has_metric:
            logger.warning("final save of step %d: its metadata has no finite %r, so keep_best cannot rank it; "
                           "saved anyway (kept by keep_last)", step, keep_best[0])  # type: ignore[index]
        return self._write(step, meta, metric_required=has_metric)

    def __enter__(self) -> RunCheckpointer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is not None:  # the block's exception wins; the pending save still finishes
            try:
                self.wait()
            except Exception as error:  # reported, not raised over the block's exception
                logger.error("the pending async save failed while the run ended by an exception: %r", error)
            return
        try:
            self.wait()
        except BaseException:
            self.finish()  # the newest state is still saved, then the earlier save's error is raised
            self.wait()
            raise
        self.finish()
        self.wait()

    def restore(self, **load_kwargs: Any) -> int | None:
        """Resume from ``resume_path`` (or the directory's latest); return its step, None if nothing to resume.

        From a run directory, the newest checkpoint that loads wins: one that
        fails verification is skipped with a warning naming it and why, and
        left on disk (:meth:`Rotation.load_newest`). An explicit
        ``resume_path`` that is a checkpoint is loaded as asked (no fallback);
        one that is neither a checkpoint nor a run directory raises
        :class:`NotACheckpoint`. Global RNG state restores last (its
        adapter's ``restore_last``); the ``"config"`` component only with
        ``overwrite_config=True``.
        """
        self.wait()
        rotation = self.rotation
        prefix = DEFAULT_PREFIX if rotation is None else rotation.prefix
        if self.resume_path is not None:
            candidate = self.resume_path
            if _is_checkpoint(candidate) or not candidate.is_dir():
                return self._restore_from(resolve_checkpoint_path(candidate, prefix=prefix), load_kwargs)
            if rotation is None or not _same_directory(candidate, rotation.directory):
                rotation = Rotation(candidate, prefix=prefix)
        if rotation is None:
            return None
        found = rotation.load_newest(lambda path: self._restore_from(path, load_kwargs))
        if found is None:
            if self.resume_path is not None:
                raise NotACheckpoint(f"no {rotation.prefix}-<step> checkpoint in the run directory",
                                     file=str(rotation.directory))
            return None
        return found[1]

    def _restore_from(self, path: Location, load_kwargs: Mapping[str, Any]) -> int:
        with CheckpointReader(path) as reader:
            stored = set(reader.components)
            step = reader.manifest.get("metadata", {}).get("step")
        if not isinstance(step, int) or isinstance(step, bool):
            match = (self.rotation or Rotation(path.parent))._pattern.fullmatch(path.name)
            if match is None:
                raise CheckpointError("checkpoint metadata has no integer 'step'", file=str(path),
                                      field="$.metadata.step")
            step = int(match.group(1))
        wanted = [n for n in self.components if (n not in self.optional or n in stored)
                  and (n != CONFIG or self.overwrite_config)]
        # kept for the caller: conversions made by cast= and entries left unused by rename=/subtree=
        self.last_load = self.checkpoint.load(path, components=wanted, **load_kwargs)
        self.last_saved_step = step
        logger.info("resumed from %s at step %d", path, step)
        return step


def _same_directory(a: Location, b: Location) -> bool:
    if not isinstance(a, Path) or not isinstance(b, Path):
        return a == b
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _is_checkpoint(path: Location) -> bool:
    try:
        CheckpointReader(path).close()
    except NotACheckpoint:
        return False
    return True



__all__ = ["ARCHIVE_SUFFIX", "ROTATION_KEY", "Rotation", "RotationEntry", "RunCheckpointer", "StopOnSignal",
           "resolve_checkpoint_path"]
