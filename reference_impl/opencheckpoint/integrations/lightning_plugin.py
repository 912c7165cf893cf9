"""The methods of ``OpenCheckpointIO`` shared by the ``lightning`` and ``pytorch_lightning`` packages.

Each package has its own ``CheckpointIO`` base class (``Trainer`` checks its
plugins against its own), so each gets a two-line class,
:mod:`.lightning` and :mod:`.pytorch_lightning`, over this one; nothing here
imports Lightning.
"""

from __future__ import annotations

from typing import Any, Literal

from ..location import PathArg, resolve_location
from ..write.async_save import SaveHandle, wait_for_target
from . import lightning_io


class OpenCheckpointIOBase:
    """``save_checkpoint``, ``load_checkpoint`` and ``remove_checkpoint`` through :mod:`.lightning_io`.

    ``async_save=True``: each save snapshots the tensors (host copies) and
    returns; a thread writes and publishes (:meth:`Checkpoint.save_async
    <opencheckpoint.Checkpoint.save_async>`). Unlike Lightning's
    ``AsyncCheckpointIO``, a removal or a load of a path waits for the save to
    that path still in flight, so ``save_top_k`` never misses a file being
    written; a failed save is raised by the next ``save_checkpoint`` or by
    ``teardown`` (the end of ``fit``), which waits for every save.
    """

    def __init__(self, format: Literal["directory", "archive"] = "archive", *, sha256: bool = False,
                 durable: bool = True, async_save: bool = False) -> None:
        if format not in ("directory", "archive"):
            raise ValueError(f"format must be 'directory' or 'archive', not {format!r}")
        self.format: Literal["directory", "archive"] = format
        self.sha256 = sha256
        self.durable = durable
        self.async_save = async_save
        self._pending: list[SaveHandle] = []

    def save_checkpoint(self, checkpoint: dict[str, Any], path: PathArg,
                        storage_options: Any | None = None) -> None:
        """Save ``checkpoint`` at ``path`` atomically (see :func:`.lightning_io.save_checkpoint_dict`)."""
        if storage_options is not None:
            # As Lightning's TorchCheckpointIO: no option is silently ignored.
            raise TypeError("Trainer.save_checkpoint(..., storage_options=...) is not supported by "
                            f"{type(self).__name__}: its format, sha256 and durable are set when it is made")
        self._finished(wait=False)
        saved = lightning_io.save_checkpoint_dict(checkpoint, path, format=self.format, sha256=self.sha256,
                                                  durable=self.durable, background=self.async_save)
        if self.async_save:
            self._pending.append(saved)

    def load_checkpoint(self, path: PathArg, map_location: Any | None = None,
                        weights_only: bool | None = None) -> dict[str, Any]:
        """The checkpoint dict at ``path``, verified (``weights_only`` changes nothing: no pickle is ever read)."""
        wait_for_target(resolve_location(path))
        return lightning_io.load_checkpoint_dict(path, map_location=map_location)

    def remove_checkpoint(self, path: PathArg) -> None:
        """Delete ``path`` only if this plugin wrote it (see :func:`.lightning_io.remove_checkpoint`)."""
        wait_for_target(resolve_location(path))
        lightning_io.remove_checkpoint(path)

    def teardown(self) -> None:
        """Wait for every save still in flight; raise the first one's error."""
        self._finished(wait=True)

    def _finished(self, *, wait: bool) -> None:
        """Forget the finished saves (all of them, after waiting, with ``wait``); raise the first failure."""
        pending, self._pending = self._pending, []
        failure: BaseException | None = None
        for handle in pending:
            if not (wait or handle.done()):
                self._pending.append(handle)
                continue
            try:
                handle.wait()
            except BaseException as exc:  # the save's own error, raised again here
                failure = failure or exc
        if failure is not None:
            raise failure
