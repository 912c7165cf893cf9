"""The standalone ``pytorch_lightning`` package (2.x): ``Trainer(plugins=[OpenCheckpointIO()])``.

The same plugin as :mod:`.lightning`, over ``pytorch_lightning``'s own ``CheckpointIO``
base class (its ``Trainer`` accepts only plugins of its own package's classes).

>>> import pytorch_lightning as pl
>>> trainer = pl.Trainer(plugins=[OpenCheckpointIO()], logger=False, enable_progress_bar=False)
>>> type(trainer.strategy.checkpoint_io).__name__
'OpenCheckpointIO'
"""

from __future__ import annotations

from lightning_fabric.plugins.io.checkpoint_io import CheckpointIO

from .lightning_plugin import OpenCheckpointIOBase

__all__ = ["OpenCheckpointIO"]


class OpenCheckpointIO(OpenCheckpointIOBase, CheckpointIO):
    """``pytorch_lightning``'s ``CheckpointIO`` writing and reading OpenCheckpoint checkpoints (:mod:`.lightning`)."""
