"""CPU time of the command line's start-up: ``--help``, ``inspect``, ``validate`` and ``ls`` on a tiny checkpoint.

    .venv/bin/python benchmarks/cli_startup.py [--repeat 7] [--python .venv/bin/python]

Each command runs ``--repeat`` times as a fresh ``python -m opencheckpoint`` process; the figure is the
child's CPU time (user + system, from ``resource.getrusage(RUSAGE_CHILDREN)``), least and most over the
runs. CPU time, not wall time, because the machines this runs on are often shared: waiting for a core
does not count, work does. Python writes its bytecode cache (``__pycache__``, as an installed package
has) before the measured runs: ``PYTHONDONTWRITEBYTECODE`` is dropped from the children's environment
and each command runs once unmeasured (without the cache, compiling the package's sources is most of a
command's CPU time). The ``python -c pass`` row is the floor; ``import numpy, msgpack`` is the price
of the libraries ``inspect`` and ``validate`` need to decode a tree, and ``import pydantic`` the price of
what the read commands no longer import (decision 0024). Prints a Markdown table (docs/benchmarks.md,
"Start-up"); to compare two versions of the package, run it with each on ``PYTHONPATH``, alternately.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

#: The children's environment: bytecode cached, as it is for an installed package.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def cpu_seconds(command: list[str]) -> float:
    """User + system CPU seconds of one run of ``command`` (its output thrown away)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, timeout=300,
                   env=ENV)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def make_run(root: Path, python: str) -> tuple[Path, Path]:
    """A run directory with two small checkpoints (written by ``python``), and its first checkpoint."""
    script = (
        "import sys, numpy as np\n"
        "from opencheckpoint import Checkpoint\n"
        "from opencheckpoint.run import Rotation\n"
        "r = Rotation(sys.argv[1], keep_last=2)\n"
        "for step in (1, 2):\n"
        "    r.save(Checkpoint(model={'w': np.zeros((4, 4), np.float32), 'b': np.zeros(4, np.float32)}),"
        " step, metadata={'loss': 1.0 / step})\n"
    )
    run = root / "run"
    subprocess.run([python, "-c", script, str(run)], check=True, timeout=300, env=ENV)
    return run, sorted(run.glob("checkpoint-*"))[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--python", default=sys.executable, help="the interpreter whose package is measured")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run, checkpoint = make_run(Path(tmp), args.python)
        cli = [args.python, "-m", "opencheckpoint"]
        rows = {
            "`python -c pass`": [args.python, "-c", "pass"],
            "`python -c 'import numpy'`": [args.python, "-c", "import numpy"],
            "`python -c 'import pydantic'`": [args.python, "-c", "import pydantic"],
            "`python -c 'import numpy, msgpack'` (what `inspect` and `validate` need; `ls` needs neither)": [
                args.python, "-c", "import numpy, msgpack"],
            "`opencheckpoint --help`": [*cli, "--help"],
            "`opencheckpoint inspect CKPT`": [*cli, "inspect", str(checkpoint)],
            "`opencheckpoint validate CKPT`": [*cli, "validate", str(checkpoint)],
            "`opencheckpoint ls RUN_DIR`": [*cli, "ls", str(run)],
        }
        print(f"| command | CPU s, least of {args.repeat} | most |")
        print("|---|---|---|")
        for name, command in rows.items():
            cpu_seconds(command)  # writes the bytecode cache
            times = [cpu_seconds(command) for _ in range(args.repeat)]
            print(f"| {name} | {min(times):.3f} | {max(times):.3f} |", flush=True)


if __name__ == "__main__":
    main()
