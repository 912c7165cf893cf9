"""The methods of ``OpenCheckpointIO`` shared by the ``lightning`` and ``pytorch_lightning`` packages.

Each package has its own ``CheckpointIO`` base class (``Trainer`` checks its
plugins against its own), so each gets a two-line class,
:mod:`.lightning` and :mod:`.pytorch_lightning`, over this one; nothing here
imports Lightning.
"""

from __future__ import annotations

from typing import Any, Literal

from ..location import PathArg
from . import lightning_io


class OpenCheckpointIOBase:
    """``save_checkpoint``, ``load_checkpoint`` and ``remove_checkpoint`` through :mod:`.lightning_io`."""

    def __init__(self, format: Literal["directory", "archive"] = "archive", *, sha256: bool = False,
                 durable: bool = True) -> None:
        if format not in ("directory", "archive"):
            raise ValueError(f"format must be 'directory' or 'archive', not {format!r}")
        self.format: Literal["directory", "archive"] = format
        self.sha256 = sha256
        self.durable = durable

    def save_checkpoint(self, checkpoint: dict[str, Any], path: PathArg,
                        storage_options: Any | None = None) -> None:
        """Save ``checkpoint`` at ``path`` atomically (see :func:`.lightning_io.save_checkpoint_dict`)."""
        if storage_options is not None:
            # As Lightning's TorchCheckpointIO: no option is silently ignored.
            raise TypeError("Trainer.save_checkpoint(..., storage_options=...) is not supported by "
                            f"{type(self).__name__}: its format, sha256 and durable are set when it is made")
        lightning_io.save_checkpoint_dict(checkpoint, path, format=self.format, sha256=self.sha256,
                                          durable=self.durable)

    def load_checkpoint(self, path: PathArg, map_location: Any | None = None,
                        weights_only: bool | None = None) -> dict[str, Any]:
        """The checkpoint dict at ``path``, verified (``weights_only`` changes nothing: no pickle is ever read)."""
        return lightning_io.load_checkpoint_dict(path, map_location=map_location)

    def remove_checkpoint(self, path: PathArg) -> None:
        """Delete ``path`` only if this plugin wrote it (see :func:`.lightning_io.remove_checkpoint`)."""
        lightning_io.remove_checkpoint(path)
