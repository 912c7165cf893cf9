"""Training scripts of the integration tests run as child processes: started side by side, and each one's
end checked (a clean exit, or the SIGKILL the script sends itself at its kill step)."""

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
