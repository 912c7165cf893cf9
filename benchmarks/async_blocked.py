"""How long a training loop is blocked by ``save_async``, against a synchronous ``save`` and an in-memory copy.

For NumPy arrays and for a torch ``nn.Module`` holding the same bytes, one run measures side by side:

* ``memcpy``: the state copied into arrays already touched (no page faults), the in-memory copy
  the target is measured against;
* ``copy into fresh memory``: the state copied into newly allocated arrays (``np.array(copy=True)`` /
  ``tensor.clone()``), what any snapshot of the state must at least do;
* ``save``: ``Checkpoint.save`` (durable, the default), the time a synchronous save blocks;
* ``save_async blocked``: the time ``Checkpoint.save_async`` takes to return (the snapshot); the
  background write is then waited for, untimed, before the next sample.

The target (DESIGN.md): blocked time <= 1.5 x the in-memory copy (memcpy).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

import opencheckpoint
from common import Context, remove
from state import ArrayModule, torch_module, touched_like
from timing import Timing, measure, settle_writes

GROUP = "async save"


def states(ctx: Context, group: str = GROUP) -> list[tuple[str, Any, Callable[[], Any]]]:
    """(label, live object, function copying its state into fresh memory) per framework (torch skipped in
    ``group`` where it is not installed); the remote async benchmark measures the same states."""
    arrays = ctx.arrays
    result: list[tuple[str, Any, Callable[[], Any]]] = [
        ("numpy", ArrayModule(arrays), lambda: {k: np.array(v, copy=True) for k, v in arrays.items()})]
    try:
        module = torch_module(arrays, share=True)
    except ImportError:
        ctx.skip(group, "torch", "torch is not installed")
    else:
        result.append(("torch", module, lambda: {k: v.detach().clone() for k, v in module.state_dict().items()}))
    return result


def run(ctx: Context) -> None:
    """Measure memcpy / copy / save / save_async blocked time for each framework's state, interleaved.

    One sample of each operation in turn, ``ctx.repeat`` rounds: on a shared machine the load changes
    from second to second, and only numbers taken side by side compare.
    """
    total = ctx.nbytes
    target = ctx.tmp / "async"

    def before() -> None:
        remove(target)
        settle_writes()

    touched = touched_like(ctx.arrays)
    for label, live, copy_state in states(ctx):
        with ctx.guard(GROUP, label):
            checkpoint = opencheckpoint.Checkpoint(model=live)
            operations: list[tuple[str, Callable[[], Any], Any, Any, str]] = [
                (f"memcpy ({label})", partial(_memcpy, touched, ctx.arrays), None, None,
                 "np.copyto into touched arrays, measured beside the others"),
                (f"copy into fresh memory ({label})", copy_state, None, None, ""),
                (f"save ({label})", partial(checkpoint.save, target), before, None, "durable (the default)"),
                (f"save_async blocked ({label})", partial(checkpoint.save_async, target), before, _finish,
                 "until save_async returns (snapshot taken); the first save of a process allocates its buffer"),
            ]
            timings = {name: Timing() for name, *_ in operations}
            for _ in range(ctx.repeat):
                for name, operation, setup, teardown, _note in operations:
                    ctx.step(f"async save: {name}")
                    timings[name].samples += measure(operation, repeat=1, setup=setup, teardown=teardown).samples
            for name, *_, note in operations:
                ctx.record(GROUP, name, timings[name], total, note=note)
    remove(target)


def _memcpy(touched: dict[str, np.ndarray], arrays: dict[str, np.ndarray]) -> None:
    for key, array in arrays.items():
        np.copyto(touched[key], array)


def _finish(handle: Any) -> None:
    """Untimed, after each sample: the background write completes (and a failed one raises)."""
    handle.result()
