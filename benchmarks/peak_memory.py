"""Peak memory of OpenCheckpoint save and load, each in a fresh process (the child's peak RSS).

Run as a script it is the child: ``peak_memory.py save|load PATH --size-bytes N --count K``
prints one JSON object. ``base`` is the peak RSS after imports, ``state`` the
peak RSS after the arrays exist (save) or the base (load), ``peak`` the peak
after the operation; all in bytes. The overhead of an operation is what it
adds beyond one copy of the state: ``peak - base - state_bytes``.

The parent side (:func:`measure_peak`) starts the child with the same
interpreter and parses that object.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

MIB = 1 << 20
COMPONENT = "model"


def _maxrss() -> int:
    """Peak RSS of this process so far, in bytes.

    On Linux ``ru_maxrss`` survives ``exec``: a child started from a big
    parent reports the parent's high-water mark until it outgrows it. So
    the high-water mark of this process's own address space (``VmHWM``,
    the same counter ``ru_maxrss`` reads for a process not started from a
    bigger one) is used where /proc has it.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    # ru_maxrss is in KiB on Linux (bytes on macOS, where /proc is absent and this is approximate).
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _state(size_bytes: int, count: int) -> dict[str, Any]:
    import numpy as np

    per = size_bytes // count // 4
    return {f"t{i:04d}": np.full(per, 0.5 + i, dtype=np.float32) for i in range(count)}


def child(operation: str, path: Path, size_bytes: int, count: int) -> dict[str, Any]:
    """Do one operation in this (fresh) process and report its memory."""
    import numpy as np

    import opencheckpoint

    base = _maxrss()
    if operation == "save":
        arrays = _state(size_bytes, count)
        state_bytes = sum(a.nbytes for a in arrays.values())
        state = _maxrss()
        opencheckpoint.Checkpoint(model=arrays, durable=False).save(path)
        peak = _maxrss()
        correct = True
    elif operation == "load":
        state = base
        loaded = opencheckpoint.read_component(path, COMPONENT)
        peak = _maxrss()
        state_bytes = sum(a.nbytes for a in loaded.values())
        # The bytes must be the ones the save child wrote (first and last element of each array).
        correct = len(loaded) == count and all(
            a[0] == np.float32(0.5 + i) and a[-1] == np.float32(0.5 + i)
            for i, a in enumerate(loaded[k] for k in sorted(loaded)))
    else:
        raise SystemExit(f"unknown operation {operation!r}")
    return {"operation": operation, "base": base, "state": state, "peak": peak, "state_bytes": state_bytes,
            "overhead": peak - base - state_bytes, "correct": bool(correct),
            "ru_maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def measure_peak(operation: str, path: Path, size_bytes: int, count: int, *, timeout: float = 600) -> dict[str, Any]:
    """Run :func:`child` in a fresh interpreter and return its report."""
    completed = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), operation, str(path), "--size-bytes", str(size_bytes),
         "--count", str(count)],
        capture_output=True, text=True, timeout=timeout, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"peak-memory child ({operation}) failed:\n{completed.stderr}")
    report: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("operation", choices=("save", "load"))
    parser.add_argument("path", type=Path)
    parser.add_argument("--size-bytes", type=int, default=512 * MIB)
    parser.add_argument("--count", type=int, default=256)
    args = parser.parse_args(argv)
    print(json.dumps(child(args.operation, args.path, args.size_bytes, args.count)))


if __name__ == "__main__":
    main()
