"""Docs pages run in processes forked from one interpreter that imported NumPy, torch, JAX and opencheckpoint once.

``python snippet_server.py``, started with the environment a page's run gets, imports :data:`PRELOAD` and then
reads requests, one JSON object per line on standard input: ``{"blocks": [...], "cwd": DIR, "out": FILE,
"err": FILE}``. For each it forks a child that changes to ``cwd``, writes its standard output and error to the
two files, runs the blocks (:func:`snippet_blocks.run_page`) and ends as an interpreter ends (``sys.exit``:
its threads joined, its ``atexit`` handlers run, an async save in flight finished), and answers with the child's
exit status on a line of standard output (negative: killed by that signal).

A child is a new process with nothing of another page's (each page has its own), started from an interpreter
that ran nothing but those imports: what a fresh interpreter running the page would have imported anyway
(most pages import torch or JAX, 1.5 s of CPU each; decision 0023). Nothing in :data:`PRELOAD` starts a thread
at import but OpenBLAS, whose pool is rebuilt in a forked child.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys

#: Imported once, before the first page; each must import without starting work a fork would lose.
PRELOAD = ["numpy", "torch", "jax", "jax.numpy", "flax.nnx", "optax", "opencheckpoint", "opencheckpoint.checkpoint",
           "snippet_blocks"]


def _child(request: dict[str, object]) -> None:
    """In the forked child: the page's directory and output files, then the page; never returns."""
    import snippet_blocks

    os.chdir(str(request["cwd"]))
    for fd, name in ((1, request["out"]), (2, request["err"])):
        target = os.open(str(name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(target, fd)
        os.close(target)
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    os.close(stdin)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115  # fd 0 stays open for the child's life
    blocks = request["blocks"]
    assert isinstance(blocks, list)
    sys.exit(snippet_blocks.run_page(blocks))  # unwinds to the interpreter's own exit, as a script's end does


def serve() -> None:
    for name in PRELOAD:
        # A framework that is not installed: the pages that need it fail on their own, as they would anyway.
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), flush=True)


if __name__ == "__main__":
    serve()
