"""PyTorch Lightning (the ``lightning`` package, 2.x): ``Trainer(plugins=[OpenCheckpointIO()])``.

Every checkpoint Lightning writes or reads through its ``CheckpointIO``
(``ModelCheckpoint`` with ``save_top_k``/``save_last``, ``trainer.save_checkpoint``,
``Trainer.fit(ckpt_path=...)``, ``ckpt_path="last"``) becomes an OpenCheckpoint
checkpoint, by default one archive file at the ``*.ckpt`` path Lightning chose.
The whole checkpoint dict comes back exactly (see :mod:`.lightning_io`); what
cannot is refused, naming the key; ``remove_checkpoint`` deletes only
checkpoints this plugin wrote. For the standalone ``pytorch_lightning``
package, import the same class from :mod:`opencheckpoint.integrations.pytorch_lightning`.

>>> import os, tempfile, torch
>>> io = OpenCheckpointIO()
>>> path = os.path.join(tempfile.mkdtemp(), "last.ckpt")
>>> io.save_checkpoint({"state_dict": {"w": torch.zeros(2)}, "global_step": 4}, path)
>>> io.load_checkpoint(path)["global_step"]
4
"""

from __future__ import annotations

from lightning.fabric.plugins.io.checkpoint_io import CheckpointIO

from .lightning_plugin import OpenCheckpointIOBase

__all__ = ["OpenCheckpointIO"]


class OpenCheckpointIO(OpenCheckpointIOBase, CheckpointIO):
    """Lightning's ``CheckpointIO`` writing and reading OpenCheckpoint checkpoints.

    Args:
        format: ``"archive"`` (default: one ZIP file at the ``.ckpt`` path, what
            Lightning expects of a checkpoint) or ``"directory"``.
        sha256: also record SHA-256 of every file.
        durable: fsync before publishing (default True).
    """
