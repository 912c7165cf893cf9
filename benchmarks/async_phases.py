"""CPU time of each phase of ``save_async`` in the caller's thread: the plan, the snapshot copy, the rest.

    .venv/bin/python benchmarks/async_phases.py [--size-gib 0.25] [--count 256] [--repeat 9] [--tmpdir DIR]
    PYTHONPATH=<old tree>/reference_impl .venv/bin/python benchmarks/async_phases.py   # older code, to compare

For a NumPy ``ArrayModule`` and a torch ``nn.Module`` sharing the same arrays (as in
:mod:`async_blocked`), saved to a local path and to ``memory://``: the caller's thread CPU time
(``time.thread_time``) of the plan stage (``write.stages.plan``), of the snapshot copy
(``write.snapshot.take``), of the whole ``save_async`` call, and of a memcpy of the state into touched
arrays (the target's reference), least and median over ``--repeat`` samples after one unmeasured save
that allocates the snapshot buffer; then the plan stage alone of an Adam optimizer's state over as
many parameters. Thread CPU time, not wall time: on a shared machine waiting for a
core does not count, work does (the wall-time verdicts stay with ``run.py --only async``). Prints a
Markdown table (docs/benchmarks.md, "Where the torch route spent its extra time").
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

import opencheckpoint
from opencheckpoint.write import snapshot, stages
from state import ArrayModule, make_arrays, torch_module, touched_like

PHASES = ("plan", "snapshot", "rest", "blocked", "memcpy")
#: A fresh prefix for every ``memory://`` save (an object store never overwrites a checkpoint).
_PREFIXES = itertools.count()


class PhaseClock:
    """Thread CPU seconds of the last call of each wrapped module function (looked up at call time)."""

    def __init__(self) -> None:
        self.last: dict[str, float] = {}

    def wrap(self, module: Any, name: str, phase: str) -> None:
        original: Callable[..., Any] = getattr(module, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                self.last[phase] = time.thread_time() - start

        setattr(module, name, timed)


def cpu(operation: Callable[[], Any]) -> tuple[float, Any]:
    """Thread CPU seconds of ``operation`` (garbage collection off while it runs) and its result."""
    gc.collect()
    gc.disable()
    try:
        start = time.thread_time()
        result = operation()
        return time.thread_time() - start, result
    finally:
        gc.enable()


def measure(live: Any, arrays: dict[str, np.ndarray], where: str, scratch: Path, repeat: int,
            clock: PhaseClock) -> dict[str, list[float]]:
    """``repeat`` samples of every phase for one state and target."""
    touched = touched_like(arrays)
    checkpoint = opencheckpoint.Checkpoint(model=live)
    samples: dict[str, list[float]] = {phase: [] for phase in PHASES}

    def target() -> str:
        if where == "local":
            shutil.rmtree(scratch / "c", ignore_errors=True)
            return str(scratch / "c")
        return f"memory://oc-async-phases/{next(_PREFIXES)}"

    checkpoint.save_async(target()).result()  # the first save of the process allocates the snapshot buffer
    for _ in range(repeat):
        samples["memcpy"].append(cpu(partial(_memcpy, touched, arrays))[0])
        blocked, handle = cpu(partial(checkpoint.save_async, target()))
        handle.result()
        samples["blocked"].append(blocked)
        samples["plan"].append(clock.last["plan"])
        samples["snapshot"].append(clock.last["snapshot"])
        samples["rest"].append(blocked - clock.last["plan"] - clock.last["snapshot"])
    return samples


def _memcpy(touched: dict[str, np.ndarray], arrays: dict[str, np.ndarray]) -> None:
    for key, array in arrays.items():
        np.copyto(touched[key], array)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gib", type=float, default=0.25)
    parser.add_argument("--count", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--tmpdir", type=Path, default=None)
    args = parser.parse_args()
    clock = PhaseClock()
    clock.wrap(stages, "plan", "plan")
    clock.wrap(snapshot, "take", "snapshot")
    arrays = make_arrays(int(args.size_gib * (1 << 30)), args.count)
    states: list[tuple[str, Any]] = [("NumPy", ArrayModule(arrays))]
    try:
        states.append(("torch", torch_module(arrays, share=True)))
    except ImportError:
        print("torch is not installed: NumPy only")
    print(f"`opencheckpoint` from {Path(opencheckpoint.__file__).parent}; {args.count} float32 arrays, "
          f"{args.size_gib} GiB; load average {os.getloadavg()[0]:.1f}; thread CPU ms, least / median of "
          f"{args.repeat}\n")
    print("| state | target | " + " | ".join(PHASES) + " |")
    print("|---|---|" + "---|" * len(PHASES))
    with tempfile.TemporaryDirectory(dir=args.tmpdir) as scratch:
        for label, live in states:
            for where in ("local", "memory://"):
                samples = measure(live, arrays, where, Path(scratch), args.repeat, clock)
                cells = [f"{min(samples[p]) * 1e3:.1f} / {statistics.median(samples[p]) * 1e3:.1f}" for p in PHASES]
                print(f"| {label} | {where} | " + " | ".join(cells) + " |")
        if len(states) > 1:
            plans = optimizer_plans(args.count, Path(scratch), args.repeat, clock)
            print(f"\nplan stage of an Adam optimizer's state over {args.count} small parameters (step, exp_avg, "
                  f"exp_avg_sq each: the plan costs per tensor, not per byte): {min(plans) * 1e3:.1f} / "
                  f"{statistics.median(plans) * 1e3:.1f} ms")
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


def optimizer_plans(count: int, scratch: Path, repeat: int, clock: PhaseClock) -> list[float]:
    """Thread CPU seconds of the plan stage of ``repeat`` async saves of a stepped Adam optimizer's state."""
    import torch

    parameters = [torch.nn.Parameter(torch.full((256,), 0.5)) for _ in range(count)]
    optimizer = torch.optim.Adam(parameters)
    for parameter in parameters:
        parameter.grad = torch.ones_like(parameter)
    optimizer.step()
    checkpoint = opencheckpoint.Checkpoint(optimizer=optimizer)
    samples = []
    for _ in range(repeat):
        shutil.rmtree(scratch / "optimizer", ignore_errors=True)
        checkpoint.save_async(scratch / "optimizer").result()
        samples.append(clock.last["plan"])
    return samples


if __name__ == "__main__":
    main()
