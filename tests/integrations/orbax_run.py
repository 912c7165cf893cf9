"""A tiny Flax NNX / optax regression run checkpointed by an orbax ``CheckpointManager`` whose item is an
OpenCheckpoint checkpoint: ``python orbax_run.py MODE ROOT OUT [KILL_AT]``.

MODE ``full`` trains ``STEPS`` steps; ``kill`` SIGKILLs itself after step ``KILL_AT`` (once that step's save
finished); ``kill-in-save`` SIGKILLs itself inside the save of step ``KILL_AT``, once the OpenCheckpoint item is
published in orbax's temporary step directory but before orbax finalizes the step; ``resume`` restores
``manager.latest_step()`` into an abstract target (``nnx.eval_shape``) and trains to the end. Every
``SAVE_EVERY`` steps the state is saved (``max_to_keep=2``). At the end the final state is written to ``OUT``
(an OpenCheckpoint checkpoint, component ``final``) for the test to compare. RNG-driven parts: dropout (the
model's ``nnx.Rngs``) and the batch order (a typed JAX key in the state).

Several runs one after the other in one process: ``MODE ROOT OUT + MODE ROOT OUT`` (``run_scripts.split_runs``);
each builds its own model, optimizer and manager from the seeds.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax import nnx
from run_scripts import split_runs

from opencheckpoint import Checkpoint
from opencheckpoint.integrations.orbax import OpenCheckpointHandler, OpenCheckpointRestore, OpenCheckpointSave

STEPS = 8
SAVE_EVERY = 2
BATCH = 8


class Model(nnx.Module):  # type: ignore[misc]  # flax is untyped here
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.hidden = nnx.Linear(4, 16, rngs=rngs)
        self.dropout = nnx.Dropout(0.2, rngs=rngs)
        self.out = nnx.Linear(16, 1, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(self.dropout(nnx.relu(self.hidden(x))))


def build() -> tuple[Model, nnx.Optimizer]:
    model = Model(nnx.Rngs(0, dropout=1))
    return model, nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)


@nnx.jit  # type: ignore[misc]
def train_step(model: Model, optimizer: nnx.Optimizer, x: jax.Array, y: jax.Array) -> jax.Array:
    def loss_fn(model: Model) -> jax.Array:
        return jnp.mean((model(x) - y) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


def state_of(model: Model, optimizer: nnx.Optimizer, data_key: jax.Array) -> dict[str, Any]:
    return {"model": nnx.state(model), "optimizer": nnx.state(optimizer), "data_key": data_key}


def die_after_item_written(kill_at: int) -> None:
    """Kill the process inside orbax's save of step ``kill_at``: the item written, the step not finalized."""
    handler = OpenCheckpointHandler.save

    def save(self: OpenCheckpointHandler, directory: Any, args: OpenCheckpointSave) -> None:
        handler(self, directory, args)
        if args.metadata == {"step": kill_at}:
            os.kill(os.getpid(), signal.SIGKILL)

    OpenCheckpointHandler.save = save  # type: ignore[method-assign]  # the test's crash point


def main(mode: str, root: str, out: str, kill_at: int = 0) -> None:
    if mode == "kill-in-save":
        die_after_item_written(kill_at)
    data = np.random.default_rng(0)
    x = data.normal(size=(64, 4)).astype(np.float32)
    y = (x @ np.arange(1, 5, dtype=np.float32)[:, None]).astype(np.float32)
    model, optimizer = build()
    data_key, start = jax.random.key(7), 0
    manager = ocp.CheckpointManager(root, options=ocp.CheckpointManagerOptions(max_to_keep=2))
    if mode == "resume":
        start = manager.latest_step()
        abstract_model, abstract_optimizer = nnx.eval_shape(build)
        target = state_of(abstract_model, abstract_optimizer, jax.eval_shape(lambda: jax.random.key(0)))
        restored = manager.restore(start, args=ocp.args.Composite(state=OpenCheckpointRestore(target))).state
        nnx.update(model, restored["model"])
        nnx.update(optimizer, restored["optimizer"])
        data_key = restored["data_key"]
    for step in range(start, STEPS):
        data_key, order = jax.random.split(data_key)
        batch = jax.random.permutation(order, len(x))[:BATCH]
        train_step(model, optimizer, x[batch], y[batch])
        if (step + 1) % SAVE_EVERY == 0:
            manager.save(step + 1, args=ocp.args.Composite(
                state=OpenCheckpointSave(state_of(model, optimizer, data_key), metadata={"step": step + 1})))
        if mode == "kill" and step + 1 == kill_at:
            manager.wait_until_finished()
            os.kill(os.getpid(), signal.SIGKILL)
    manager.wait_until_finished()
    manager.close()
    Checkpoint(final=state_of(model, optimizer, data_key)).save(out)


if __name__ == "__main__":
    for mode, root, out, *kill_at in split_runs(sys.argv[1:]):
        main(mode, root, out, int(kill_at[0]) if kill_at else 0)
