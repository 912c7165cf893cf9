"""How long a training loop is blocked by ``save_async``, against a synchronous ``save`` and an in-memory copy.

For NumPy arrays and for a torch ``nn.Module`` holding the same bytes, one run measures side by side:

* ``copy into fresh memory``: the state copied into newly allocated arrays (``np.array(copy=True)`` /
  ``tensor.clone()``), what any snapshot of the state must at least do;
* ``save``: ``Checkpoint.save`` (durable, the default), the time a synchronous save blocks;
* ``save_async blocked``: the time ``Checkpoint.save_async`` takes to return (the snapshot); the
  background write is then waited for, untimed, before the next sample.

The target (DESIGN.md): blocked time <= 1.5 x the copy into fresh memory.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

import opencheckpoint
from common import Context, remove
from state import ArrayModule, torch_module
from timing import measure, settle_writes

GROUP = "async save"


def _states(ctx: Context) -> list[tuple[str, Any, Any]]:
    """(label, live object, function copying its state into fresh memory) per framework."""
    arrays = ctx.arrays
    states: list[tuple[str, Any, Any]] = [
        ("numpy", ArrayModule(arrays), lambda: {k: np.array(v, copy=True) for k, v in arrays.items()})]
    try:
        module = torch_module(arrays, share=True)
    except ImportError:
        ctx.skip(GROUP, "torch", "torch is not installed")
    else:
        states.append(("torch", module, lambda: {k: v.detach().clone() for k, v in module.state_dict().items()}))
    return states


def run(ctx: Context) -> None:
    """Measure copy / save / save_async blocked time for each framework's state."""
    total = ctx.nbytes
    target = ctx.tmp / "async"
    for label, live, copy_state in _states(ctx):
        with ctx.guard(GROUP, label):
            ctx.step(f"async save ({label}): copy into fresh memory")
            ctx.record(GROUP, f"copy into fresh memory ({label})", measure(copy_state, repeat=ctx.repeat), total)
            checkpoint = opencheckpoint.Checkpoint(model=live)

            def before() -> None:
                remove(target)
                settle_writes()

            ctx.step(f"async save ({label}): save")
            ctx.record(GROUP, f"save ({label})", measure(partial(checkpoint.save, target), repeat=ctx.repeat,
                                                         setup=before), total)
            ctx.step(f"async save ({label}): save_async blocked")
            ctx.record(GROUP, f"save_async blocked ({label})", measure(
                partial(checkpoint.save_async, target), repeat=ctx.repeat, setup=before, teardown=_finish), total,
                note="until save_async returns (snapshot taken); best sample: the first save of a process "
                     "allocates its buffer")
    remove(target)


def _finish(handle: Any) -> None:
    """Untimed, after each sample: the background write completes (and a failed one raises)."""
    handle.result()
