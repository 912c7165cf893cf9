"""Training runs of tests/integrations/test_hf.py, in a child process: ``python hf_runs.py WORKDIR``.

The libraries are imported once; then two forked children train (Trainer, then an Accelerate loop),
checkpoint, and SIGKILL themselves at a fixed step; this process then resumes both killed runs to the
end and runs both uninterrupted from scratch. Each run's final model and optimizer state is saved as
an OpenCheckpoint checkpoint under WORKDIR for the test to compare.

A tiny GPT-2 built from a local config (no hub access), dropout on, synthetic token data, CPU, deterministic.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch
from transformers import GPT2Config, GPT2LMHeadModel, TrainerCallback, TrainingArguments
from transformers.trainer_utils import set_seed

from opencheckpoint import Checkpoint
from opencheckpoint.integrations.hf_accelerate import OpenCheckpointAccelerator
from opencheckpoint.integrations.hf_trainer import OpenCheckpointTrainer

SAMPLES, LENGTH, BATCH = 24, 8, 4  # 6 steps per epoch
TRAINER_STEPS, TRAINER_KILL = 9, 5  # checkpoints at steps 3, 6, 9 (save_total_limit=1); killed after step 5
ACCEL_EPOCHS, ACCEL_KILL = 2, 8  # save_state after epoch 0 (step 6); killed after step 8


class TokenData(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(1234)
        self.tokens = torch.randint(0, 64, (SAMPLES, LENGTH), generator=generator)

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.tokens[index], "labels": self.tokens[index]}


def tiny_gpt2() -> GPT2LMHeadModel:
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=LENGTH,
                        resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1)
    return GPT2LMHeadModel(config)


class KillAt(TrainerCallback):
    """SIGKILL the process at the end of a fixed step: no clean-up, no exit handlers."""

    def __init__(self, step: int | None) -> None:
        self.step = step

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


def trainer_run(output_dir: Path, *, kill_at: int | None = None, resume: bool = False) -> Any:
    set_seed(7)
    args = TrainingArguments(output_dir=str(output_dir), max_steps=TRAINER_STEPS, per_device_train_batch_size=BATCH,
                             learning_rate=1e-3, warmup_steps=2, save_strategy="steps", save_steps=3,
                             save_total_limit=1, logging_steps=1, report_to=[], seed=7, use_cpu=True,
                             dataloader_num_workers=0, disable_tqdm=True)
    trainer = OpenCheckpointTrainer(model=tiny_gpt2(), args=args, train_dataset=TokenData(),
                                    callbacks=[KillAt(kill_at)])
    trainer.train(resume_from_checkpoint=True if resume else None)
    return trainer


def accelerate_run(project: Path, *, kill_at: int | None = None, resume: bool = False) -> tuple[Any, Any]:
    set_seed(11)
    accelerator = OpenCheckpointAccelerator(cpu=True)
    model = tiny_gpt2()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    loader = torch.utils.data.DataLoader(TokenData(), batch_size=BATCH, shuffle=True)
    model, optimizer, scheduler, loader = accelerator.prepare(model, optimizer, scheduler, loader)
    first_epoch = 0
    if resume:
        accelerator.load_state(project / "state")
        first_epoch = 1
    step = first_epoch * len(loader)
    model.train()
    for _epoch in range(first_epoch, ACCEL_EPOCHS):
        for batch in loader:
            loss = model(**batch).loss
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            step += 1
            if step == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
        if step == len(loader):
            accelerator.save_state(project / "state")
    return model, optimizer


def save_final(path: Path, model: Any, optimizer: Any) -> None:
    Checkpoint(model=model, optimizer=getattr(optimizer, "optimizer", optimizer)).save(path)


def killed_child(run: Any) -> None:
    """``run()`` in a forked child that must end by SIGKILL (the parent has trained nothing yet)."""
    pid = os.fork()
    if pid == 0:
        try:
            run()
        finally:
            os._exit(3)  # ran to the end, or raised: not killed
    _, status = os.waitpid(pid, 0)
    if not (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL):
        raise SystemExit(f"{run}: the child was not killed (wait status {status})")


def main(workdir: Path) -> None:
    torch.use_deterministic_algorithms(True)
    killed_child(lambda: trainer_run(workdir / "trainer", kill_at=TRAINER_KILL))
    killed_child(lambda: accelerate_run(workdir / "accelerate", kill_at=ACCEL_KILL))
    resumed = trainer_run(workdir / "trainer", resume=True)
    save_final(workdir / "final-trainer-resumed", resumed.model, resumed.optimizer)
    reference = trainer_run(workdir / "trainer-reference")
    save_final(workdir / "final-trainer-reference", reference.model, reference.optimizer)
    save_final(workdir / "final-accelerate-resumed", *accelerate_run(workdir / "accelerate", resume=True))
    save_final(workdir / "final-accelerate-reference", *accelerate_run(workdir / "accelerate-reference"))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
