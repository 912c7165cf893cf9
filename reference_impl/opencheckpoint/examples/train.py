"""A resumable A2C run on CartPole: ``python -m opencheckpoint.examples.train RUN_DIR``.

The run saves every ``--interval`` updates through
:class:`~opencheckpoint.run.RunCheckpointer`, resumes from ``RUN_DIR``'s
latest checkpoint when there is one, and stops cleanly on SIGINT/SIGTERM
(:class:`~opencheckpoint.run.StopOnSignal`): it finishes the update, writes a
checkpoint and exits 0. ``--sigterm-at N`` makes the run send itself SIGTERM
after update N, to demonstrate (and test) the interruption.

Checkpoint components: ``policy`` (the actor-critic), ``optimizer`` (Adam),
``env`` (CartPole state and its generator), ``progress`` (JSON) and ``rng``
(global RNG state, restored last).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from .. import Checkpoint
from ..run.checkpointer import RunCheckpointer, StopOnSignal
from ..run.rng import GlobalRNGState
from .actor_critic import ActorCritic, a2c_update, make_deterministic
from .control import CartPole


def build(seed: int, num_envs: int = 8) -> tuple[ActorCritic, torch.optim.Optimizer, CartPole, dict[str, Any],
                                                 Checkpoint]:
    """The run's objects, freshly initialized from ``seed``, and the checkpoint that holds them."""
    make_deterministic(seed)
    model = ActorCritic()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    env = CartPole(num_envs=num_envs, seed=seed)
    progress: dict[str, Any] = {"update": 0, "episodes": 0, "recent_return": 0.0}
    checkpoint = Checkpoint(policy=model, optimizer=optimizer, env=env, progress=progress, rng=GlobalRNGState())
    return model, optimizer, env, progress, checkpoint


def train(run_dir: Path, updates: int, interval: int, seed: int = 0, sigterm_at: int | None = None,
          log_every: int = 0) -> int:
    """Train until ``updates`` or a stop signal; return the last completed update."""
    model, optimizer, env, progress, checkpoint = build(seed)
    run = RunCheckpointer(checkpoint, run_dir, interval=interval, keep_last=2)
    rotation = run.rotation
    assert rotation is not None  # a directory was given: saving is enabled
    start = run.restore() or 0
    if start:
        print(f"[train pid {os.getpid()}] resumed at update {start} from {rotation.latest()}", flush=True)
    update = start
    with StopOnSignal() as stop:
        while update < updates and not stop.requested:
            a2c_update(model, optimizer, env)
            update += 1
            returns = env.pop_finished()
            progress["update"] = update
            progress["episodes"] += len(returns)
            if returns:
                progress["recent_return"] = sum(returns) / len(returns)
            if log_every and update % log_every == 0:
                print(f"[train pid {os.getpid()}] update {update}: episodes {progress['episodes']}, "
                      f"mean return of recent episodes {progress['recent_return']:.1f}", flush=True)
            if update == sigterm_at:
                print(f"[train pid {os.getpid()}] sending myself SIGTERM after update {update}", flush=True)
                os.kill(os.getpid(), signal.SIGTERM)
            run.save(update)
        path = run.save(update, force=True)
    if stop.requested:
        print(f"[train pid {os.getpid()}] {stop.signal_name}: stopped cleanly at update {update}, "
              f"checkpoint {path or rotation.latest()}", flush=True)
    return update


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--updates", type=int, default=300)
    parser.add_argument("--interval", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sigterm-at", type=int, default=None)
    parser.add_argument("--log-every", type=int, default=0)
    args = parser.parse_args(argv)
    train(args.run_dir, args.updates, args.interval, args.seed, args.sigterm_at, args.log_every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
