"""Training scripts of the integration tests run as child processes: started side by side, and each one's
end checked (a clean exit, or the SIGKILL the script sends itself at its kill step). A script may do several
runs one after the other in one process (``MODE ARGS... + MODE ARGS...``, :func:`split_runs`): a resumed run and
the uninterrupted reference share one interpreter, which costs more CPU to start than the tiny runs."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

#: A script's whole run on two busy cores, imports included.
RUN_BOUND = 240


def start(script: Path, *args: Any) -> subprocess.Popen[bytes]:
    """``python script args...`` in a child process (its stderr kept for the failure message)."""
    return subprocess.Popen([sys.executable, str(script), *map(str, args)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


def finish(process: subprocess.Popen[bytes]) -> int:
    """The child's exit code once it ended: 0, or -SIGKILL for a run that killed itself; else its stderr."""
    try:
        _, err = process.communicate(timeout=RUN_BOUND)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    if process.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(err.decode()[-3000:])
    return process.returncode


def split_runs(argv: list[str]) -> list[list[str]]:
    """A script's command line split into its runs at each ``+``.

    >>> split_runs(["resume", "a", "a.ocp", "+", "full", "b", "b.ocp"])
    [['resume', 'a', 'a.ocp'], ['full', 'b', 'b.ocp']]
    """
    found: list[list[str]] = [[]]
    for arg in argv:
        if arg == "+":
            found.append([])
        else:
            found[-1].append(arg)
    return found
