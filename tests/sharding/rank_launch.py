"""Rank processes of the gloo tests started from a preloaded interpreter: ``launch(script, argvs)``.

Each rank is a real process of its own (its own process group member, killed or stalled on its own), but it
is forked from multiprocessing's forkserver, which imported torch, its distributed packages, NumPy and
opencheckpoint once per test process: a fresh interpreter pays about 3.5 s of CPU for those imports before its
first line, more than most scenarios cost (decision 0023). The script runs as ``__main__`` with its own
``sys.argv``, environment, and stdout/stderr (files, read back when it ended); its exit code is a
subprocess's (``-9`` when SIGKILLed, the code of ``sys.exit``, 1 after an uncaught exception). Unlike a new
interpreter's, its ``atexit`` handlers do not run (multiprocessing ends a child with ``os._exit``): a script that
needs them (an async save left to finish at exit) is started with ``subprocess`` instead.
"""

from __future__ import annotations

import multiprocessing
import os
import runpy
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

#: What every rank script imports first (forkserver preloads them; nothing in them starts a thread at import).
PRELOAD = ["numpy", "torch", "torch.distributed", "torch.distributed.fsdp", "torch.distributed.tensor",
           "opencheckpoint"]

_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(PRELOAD)


def _run_script(script: str, argv: list[str], env: dict[str, str], out: str, err: str) -> None:
    """In the forked rank: its environment, its output files on fds 1 and 2, then the script as ``__main__``."""
    os.environ.clear()
    os.environ.update(env)
    for fd, name in ((1, out), (2, err)):
        target = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(target, fd)
        os.close(target)
    sys.argv = [script, *argv]
    sys.path.insert(0, os.path.dirname(script))
    runpy.run_path(script, run_name="__main__")


def launch(script: Path, argvs: Sequence[Sequence[str]], timeout: float,
           env: Mapping[str, str] | None = None) -> list[subprocess.CompletedProcess[str]]:
    """Run one process of ``script`` per argument list, all at once; each one's exit code and output. A process
    still running after ``timeout`` seconds is killed (its exit code then ``-9``)."""
    environment = dict(os.environ if env is None else env)
    with tempfile.TemporaryDirectory(prefix="ranks-") as scratch:
        outputs = [(os.path.join(scratch, f"{i}.out"), os.path.join(scratch, f"{i}.err")) for i in range(len(argvs))]
        ranks = [_CONTEXT.Process(target=_run_script, args=(str(script), list(argv), environment, out, err))
                 for argv, (out, err) in zip(argvs, outputs, strict=True)]
        try:
            for rank in ranks:
                rank.start()
            for rank in ranks:
                rank.join(timeout)
        finally:
            for rank in ranks:
                if rank.exitcode is None:
                    rank.kill()
                    rank.join()
        return [subprocess.CompletedProcess([str(script), *argv], rank.exitcode, Path(out).read_text(),
                                            Path(err).read_text())
                for argv, rank, (out, err) in zip(argvs, ranks, outputs, strict=True)]
