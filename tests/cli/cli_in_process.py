"""Run the ``opencheckpoint`` command line in the test process: its exit code, standard output and error.

A subprocess pays the interpreter and the package's imports again (about a second of CPU when a command
reads a checkpoint); most CLI tests check what a command prints and returns, not the process around it, so
they call ``main()`` here with standard output and error captured as pipes (not terminals, as for
``| grep``). Tests about the process itself (a real pipe, Ctrl-C, start-up imports) keep a subprocess.

>>> done = run_cli("migrations")
>>> done.returncode, '"current_version": 2' in done.stdout
(0, True)
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import warnings
from os import PathLike

from opencheckpoint.cli.main import main


def run_cli(*args: str | PathLike[str]) -> subprocess.CompletedProcess[str]:
    """``opencheckpoint ARGS...`` in this process, as :func:`subprocess.run` with ``capture_output`` reports it
    (warnings printed to standard error once per place, as an interpreter does by default)."""
    argv = [str(arg) for arg in args]
    out, err = io.StringIO(), io.StringIO()

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: object = None,
             line: str | None = None) -> None:
        err.write(warnings.formatwarning(message, category, filename, lineno, line))

    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = show
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse: --help (0) and usage errors (2)
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return subprocess.CompletedProcess(["opencheckpoint", *argv], code, out.getvalue(), err.getvalue())
