"""A tiny deterministic Lightning run through ``OpenCheckpointIO``, for the kill-and-resume tests.

``python lightning_train.py RUN_DIR [--kill-at STEP] [--resume]``: trains a small MLP
(dropout on, shuffled data, Adam, a StepLR scheduler, a callback with state) for
two epochs on CPU, ``ModelCheckpoint`` saving every epoch (``save_top_k=1`` and
``save_last``) into ``RUN_DIR/checkpoints``; ``--kill-at`` SIGKILLs the process at
that global step (after the first epoch's checkpoint was saved); ``--resume``
fits with ``ckpt_path="last"``. The final state goes to ``RUN_DIR/final.ckpt``
through ``trainer.save_checkpoint``; the last line printed names the checkpoint
resumed from and the number of batches this process trained.

The torch RNG (dropout, the sampler's shuffle) is part of the run's state: the
``RngState`` callback carries it in the checkpoint, so a resumed run draws what
the uninterrupted one drew.
"""

from __future__ import annotations

import argparse
import os
import signal
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from opencheckpoint.integrations.lightning import OpenCheckpointIO

BATCHES_PER_EPOCH = 4


class TinyMLP(L.LightningModule):
    """An MLP with dropout; ``kill_at``: the global step whose training step SIGKILLs the process."""

    def __init__(self, hidden: int = 8, lr: float = 0.05, kill_at: int = -1) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["kill_at"])
        self.kill_at = kill_at
        self.net = nn.Sequential(nn.Linear(4, hidden), nn.Tanh(), nn.Dropout(0.25), nn.Linear(hidden, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.global_step == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        inputs, targets = batch
        loss = nn.functional.mse_loss(self.net(inputs), targets)
        self.log("train_loss", loss, on_step=False, on_epoch=True)
        return loss

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams["lr"])
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]


class RngState(L.Callback):
    """A callback with state: batches seen, and the torch RNG state at the checkpoint."""

    def __init__(self) -> None:
        self.batches = 0
        #: batches trained by this process (not part of the state): what a resumed run trained itself
        self.here = 0

    def on_train_batch_end(self, *args: Any) -> None:
        self.batches += 1
        self.here += 1

    def state_dict(self) -> dict[str, Any]:
        return {"batches": self.batches, "torch_rng": torch.get_rng_state()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.batches = state_dict["batches"]
        torch.set_rng_state(state_dict["torch_rng"])


def data() -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(7)
    inputs = torch.randn(BATCHES_PER_EPOCH * 8, 4, generator=generator)
    targets = inputs.sum(dim=1, keepdim=True).sin()
    return DataLoader(TensorDataset(inputs, targets), batch_size=8, shuffle=True, num_workers=0)


def trainer(run_dir: str, io: Any = None, rng: RngState | None = None, **overrides: Any) -> L.Trainer:
    """The run's trainer: CPU, deterministic, no logger, checkpoints every epoch through ``io``."""
    checkpoints = ModelCheckpoint(dirpath=os.path.join(run_dir, "checkpoints"), monitor="train_loss",
                                  save_top_k=1, save_last=True, every_n_epochs=1)
    options: dict[str, Any] = dict(
        default_root_dir=run_dir, max_epochs=2, accelerator="cpu", devices=1, deterministic=True, logger=False,
        enable_progress_bar=False, enable_model_summary=False, callbacks=[checkpoints, rng or RngState()],
        plugins=[io or OpenCheckpointIO()])
    options.update(overrides)
    return L.Trainer(**options)


def fit(run_dir: str, io: Any = None, *, kill_at: int = -1, resume: bool = False) -> tuple[L.Trainer, RngState]:
    """The whole run (seeded, deterministic algorithms on for the process), resumed from ``last`` with
    ``resume``; the final state saved to ``RUN_DIR/final.ckpt``. The tests run it in their own process too
    (the uninterrupted run, the resumed one): only the killed run needs a process of its own."""
    torch.use_deterministic_algorithms(True)
    L.seed_everything(0, verbose=False)
    rng = RngState()
    run = trainer(run_dir, io, rng=rng)
    run.fit(TinyMLP(kill_at=kill_at), data(), ckpt_path="last" if resume else None)
    run.save_checkpoint(os.path.join(run_dir, "final.ckpt"))
    return run, rng


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("--kill-at", type=int, default=-1)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    run, rng = fit(args.run_dir, kill_at=args.kill_at, resume=args.resume)
    print(f"resumed from: {run.ckpt_path}; batches trained here: {rng.here}")


if __name__ == "__main__":
    main()
