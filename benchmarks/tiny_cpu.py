"""20,000 tiny arrays in CPU time: OpenCheckpoint's save and load against safetensors', in one process.

Wall-clock ratios swing with the load of a shared machine; CPU time (``time.process_time``, user + system
of this process, best of ``--repeat``) much less. Each line of output is one fresh process per mode, the
modes alternating: ``compiled`` (the C extension, ``tree/_ctree.c``) and ``python`` (the pure-Python fallback,
``OPENCHECKPOINT_PURE_PYTHON=1``); every process measures safetensors beside OpenCheckpoint, so each ratio
is taken within one process.

    .venv/bin/python benchmarks/tiny_cpu.py --rounds 3 --repeat 9
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

MODES = {"compiled": {}, "python": {"OPENCHECKPOINT_PURE_PYTHON": "1"}}


def best_cpu_ms(action: Callable[[], object], repeat: int, setup: Callable[[], object] = lambda: None) -> float:
    """The least CPU time of ``repeat`` runs of ``action`` in ms (the collector paused, as in timing.py)."""
    times = []
    for _ in range(repeat):
        setup()
        gc.collect()
        gc.disable()
        start = time.process_time()
        action()
        times.append(time.process_time() - start)
        gc.enable()
    return min(times) * 1e3


def measure(repeat: int) -> dict[str, float]:
    """This process's figures: OpenCheckpoint and safetensors, save (not durable) and load (verified)."""
    import safetensors.numpy

    import opencheckpoint
    from opencheckpoint.tree import ctree
    from state import make_tiny_arrays

    arrays = make_tiny_arrays(20_000)
    scratch = Path(tempfile.mkdtemp(prefix="tiny-cpu-"))
    ours, theirs = scratch / "ours", scratch / "theirs.safetensors"
    checkpoint = opencheckpoint.Checkpoint(tiny=arrays, durable=False)
    try:
        figures = {
            "compiled": float(ctree.AVAILABLE),
            "save": best_cpu_ms(lambda: checkpoint.save(ours), repeat, lambda: shutil.rmtree(ours, ignore_errors=True)),
            "safetensors save": best_cpu_ms(lambda: safetensors.numpy.save_file(arrays, theirs), repeat,
                                            lambda: theirs.unlink(missing_ok=True)),
            "load": best_cpu_ms(lambda: opencheckpoint.read_component(ours, "tiny"), repeat),
            "safetensors load": best_cpu_ms(lambda: safetensors.numpy.load_file(theirs), repeat),
        }
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes per mode (alternating)")
    parser.add_argument("--repeat", type=int, default=9, help="runs per figure in each process (best taken)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.repeat)))
        return 0
    print(f"load average {os.getloadavg()[0]:.1f}; CPU ms, best of {args.repeat} per process")
    for _ in range(args.rounds):
        for mode, env in MODES.items():
            out = subprocess.run([sys.executable, __file__, "--child", "--repeat", str(args.repeat)],
                                 env={**os.environ, **env}, check=True, capture_output=True, text=True).stdout
            f = json.loads(out)
            print(f"{mode:8} (C used: {bool(f['compiled'])!s:5}) save {f['save']:6.1f} vs {f['safetensors save']:6.1f}"
                  f" = {f['safetensors save'] / f['save']:.2f} x   load {f['load']:6.1f} vs"
                  f" {f['safetensors load']:6.1f} = {f['safetensors load'] / f['load']:.2f} x")
    print(f"load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
