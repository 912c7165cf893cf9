"""Integrations: the checkpoint hooks of the trainers users already run, pointed at OpenCheckpoint.

One module per trainer library (PyTorch Lightning's ``CheckpointIO``, Hugging Face
Accelerate and ``transformers.Trainer``, orbax's ``CheckpointManager`` handlers,
torchrl's trainer hooks), each switching a user over in one line while keeping
the library's guarantees: verify-first restores, deleting only checkpoints the
library wrote, old-or-new under crashes. Each module imports its trainer
library when it is imported, so nothing here is imported by ``import
opencheckpoint``; import the module you need, e.g.
``from opencheckpoint.integrations.lightning import OpenCheckpointIO``.

A layer above the public API and ``run/``: it may import ``checkpoint``,
``loading``, ``options``, ``run/``, ``write/``, ``read/``, ``adapters/`` and the
format core; only ``tools/``, ``cli/``, ``examples/`` and ``testing/`` may import it.
"""
