"""A tiny torchrl DQN run (collector, replay buffer, loss with target parameters, Adam) under the OpenCheckpoint
``Trainer``: ``python torchrl_run.py MODE RUN_DIR [KILL_AT]``.

MODE ``full`` trains to the end; ``kill`` SIGKILLs itself once ``KILL_AT`` frames are collected (after the save of
the batch before); ``resume`` restores ``RUN_DIR``'s latest checkpoint and trains to the end. Every batch is
saved (``save_trainer_interval=1``), the last one at ``TOTAL_FRAMES``. Deterministic on CPU: fixed seeds,
deterministic algorithms, a deterministic environment whose episodes end where the policy walks off the chain;
the randomness that matters (epsilon-greedy exploration, replay sampling) comes from the global torch generator.
Several runs one after the other in one process: ``MODE RUN_DIR + MODE RUN_DIR`` (``run_scripts.split_runs``);
each builds its trainer and seeds every generator itself.
"""

from __future__ import annotations

import os
import random
import signal
import sys
from typing import Any

import numpy as np
import torch
from run_scripts import split_runs
from tensordict import TensorDict
from tensordict.nn import TensorDictSequential
from torchrl.collectors import Collector
from torchrl.data import Composite, LazyTensorStorage, OneHot, RandomSampler, ReplayBuffer, Unbounded
from torchrl.envs import EnvBase
from torchrl.modules import MLP, EGreedyModule, QValueActor
from torchrl.objectives import DQNLoss, SoftUpdate
from torchrl.trainers import ReplayBufferTrainer

from opencheckpoint.integrations.torchrl import Trainer
from opencheckpoint.run import Rotation

FRAMES_PER_BATCH = 8
TOTAL_FRAMES = 48


class Chain(EnvBase):  # type: ignore[misc]  # torchrl is untyped
    """A walk on a line: left or right by 0.1, done past 0.35; reward -|position|. No randomness of its own.

    Its whole state is in the step data (the position is the observation's first entry), as in torchrl's
    stateless environments: the collector's rollout carrier, which the checkpoint holds, is all it needs.
    """

    def __init__(self) -> None:
        super().__init__(batch_size=())
        self.observation_spec = Composite(observation=Unbounded(shape=(3,)))
        self.action_spec = OneHot(2)
        self.reward_spec = Unbounded(shape=(1,))

    @staticmethod
    def _observation(position: torch.Tensor) -> torch.Tensor:
        return torch.stack([position, position**2, torch.ones(())])

    def _reset(self, tensordict: Any) -> TensorDict:
        return TensorDict(observation=self._observation(torch.zeros(())))

    def _step(self, tensordict: TensorDict) -> TensorDict:
        position = tensordict["observation"][0] + (tensordict["action"].float().argmax() * 2 - 1) * 0.1
        done = (position.abs() >= 0.35).reshape(1)
        return TensorDict(observation=self._observation(position), reward=-position.abs().reshape(1), done=done,
                          terminated=done)

    def _set_seed(self, seed: int | None) -> None:
        pass


def build(run_dir: str) -> Trainer:
    """The run's trainer: the only line that differs from a torchrl script is the import of ``Trainer``."""
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    torch.use_deterministic_algorithms(True)
    env = Chain()
    actor = QValueActor(MLP(in_features=3, out_features=2, num_cells=[8]), in_keys=["observation"],
                        spec=env.action_spec)
    policy = TensorDictSequential(actor, EGreedyModule(env.action_spec, eps_init=0.5))
    collector = Collector(env, policy, frames_per_batch=FRAMES_PER_BATCH, total_frames=TOTAL_FRAMES)
    loss = DQNLoss(actor, action_space=env.action_spec, delay_value=True)
    trainer = Trainer(collector=collector, total_frames=TOTAL_FRAMES, frame_skip=1, optim_steps_per_batch=2,
                      loss_module=loss, optimizer=torch.optim.Adam(loss.parameters(), lr=1e-2),
                      progress_bar=False, save_trainer_interval=1, checkpoint_rotation=Rotation(run_dir, keep_last=2))
    buffer = ReplayBuffer(storage=LazyTensorStorage(TOTAL_FRAMES), sampler=RandomSampler(), batch_size=4)
    ReplayBufferTrainer(buffer, batch_size=4).register(trainer)
    trainer.register_op("post_optim", SoftUpdate(loss, eps=0.9).step)
    return trainer


def main(mode: str, run_dir: str, kill_at: int = 0) -> None:
    trainer = build(run_dir)
    if mode == "kill":
        def die() -> None:
            if trainer.collected_frames >= kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

        trainer.register_op("post_steps", die)
    elif mode == "resume":
        trainer.load_from_file(run_dir)
    trainer.train()


if __name__ == "__main__":
    for mode, run_dir, *kill_at in split_runs(sys.argv[1:]):
        main(mode, run_dir, int(kill_at[0]) if kill_at else 0)
