"""20,000 tiny arrays: user-space instructions per save, counted by valgrind's callgrind (needs ``valgrind``).

CPU time on a shared machine moves with its load (and this machine has a slow mode where every phase
takes ~1.7 x longer); an instruction count does not. Each figure is the difference between a process
that saves 3 times and one that saves once, halved: the imports and the first save's warm-up cancel.
The kernel's share (writing 20 MiB into the page cache) is not counted, so this complements the CPU
times of ``tiny_cpu.py``; it does not replace them.

    .venv/bin/python benchmarks/tiny_instructions.py
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WHO = {"compiled": {}, "python": {"OPENCHECKPOINT_PURE_PYTHON": "1"}, "safetensors": {}}


def save_times(who: str, count: int) -> None:
    """Save the 20,000 arrays ``count`` times (the collector paused, as the benchmarks do)."""
    from state import make_tiny_arrays

    arrays = make_tiny_arrays(20_000)
    scratch = Path(tempfile.mkdtemp(prefix="tiny-instructions-"))
    target = scratch / "c"
    if who == "safetensors":
        import safetensors.numpy

        def save() -> None:
            safetensors.numpy.save_file(arrays, target)
    else:
        import opencheckpoint

        checkpoint = opencheckpoint.Checkpoint(tiny=arrays, durable=False)

        def save() -> None:
            checkpoint.save(target)
    gc.disable()
    try:
        for _ in range(count):
            if target.is_dir():
                shutil.rmtree(target)
            target.unlink(missing_ok=True)
            save()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def instructions(who: str, count: int) -> int:
    """The instructions callgrind counts in a process that saves ``count`` times."""
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__,
               "--child", who, str(count)]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", **WHO[who]}
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in callgrind's output:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("WHO", "COUNT"), help=argparse.SUPPRESS)
    parser.add_argument("--only", choices=sorted(WHO), nargs="*", default=sorted(WHO))
    args = parser.parse_args(argv)
    if args.child:
        save_times(args.child[0], int(args.child[1]))
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed")
        return 1
    per_save = {who: (instructions(who, 3) - instructions(who, 1)) / 2 for who in args.only}
    for who, count in per_save.items():
        ratio = f" ({per_save['safetensors'] / count:.2f} x fewer than safetensors)" if "safetensors" in per_save \
            and who != "safetensors" else ""
        print(f"{who:12} {count / 1e6:7.1f} M instructions per save{ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
