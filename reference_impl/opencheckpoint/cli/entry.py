"""The process of the command line: what ``opencheckpoint`` and ``python -m opencheckpoint`` run.

:func:`run` answers Ctrl-C (SIGINT) the same way wherever it lands: one line,
``interrupted``, on stderr and exit status 130 (docs/cli.md, "Exit codes").

* While the command line's modules import (the first tens of milliseconds):
  this module imports nothing but :mod:`signal`, :mod:`sys` and
  :mod:`.exit_codes`, and :func:`run` imports :mod:`.main` inside its
  ``try``, so an interrupt there is caught like one in a command. (Before
  any code of the package runs, the interpreter's own start-up and the
  package ``__init__``, which imports only the error classes, remain.)
* While a command runs: :func:`~opencheckpoint.cli.main.main` catches it; the
  ``finally`` blocks on the way out have removed what the command had half
  written (``export``'s hidden ``.partial`` file, a save's staging directory).
* A Ctrl-C caught inside code built by ``exec`` (dataclasses, named tuples):
  :func:`_forget_caught_interrupt` keeps CPython from killing the process
  with SIGINT at exit for an interrupt that was caught and answered.
* A Ctrl-C that a C extension turned into another exception: NumPy's import,
  interrupted while it imports ``datetime`` from C, raises ``ImportError``
  instead of ``KeyboardInterrupt``. :func:`run` installs a SIGINT handler
  that notes the signal before raising ``KeyboardInterrupt`` as Python's own
  does, and any exception that escapes the command after a noted SIGINT is
  answered as the interrupt it came from.
* After the command returned: Python restores the default action of SIGINT
  when it shuts down, and a shutdown can take a few hundred milliseconds
  (tearing down the modules of a large export). A Ctrl-C then
  would end the process by the signal instead of with the command's status,
  so :func:`run` ignores SIGINT once the command's result is known: what was
  done is done and the status says so. (The interpreter keeps an ignored
  signal ignored through its shutdown.)

A command started with SIGINT ignored (in the background of a script, under
``nohup``) keeps it ignored: :func:`run` installs its handler only in place of
Python's default one.

``main()`` itself changes no signal handler: tests and scripts call it in
their own process; :func:`run` owns the process, so it may.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import NoReturn

from .exit_codes import interrupted

#: NumPy's OpenBLAS starts one thread per core when NumPy is imported, which cost 0.08 s of CPU of the 0.2 s
#: that ``import numpy`` takes here (benchmarks/cli_startup.py, decision 0024). The command line does no linear
#: algebra, so it asks for one BLAS thread unless the user chose a number.
BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "1")


def run() -> NoReturn:
    """Run the command line on ``sys.argv`` and exit with its status (the console script's entry point)."""
    status: int | str | None
    os.environ.setdefault(*BLAS_THREADS)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # an ignored SIGINT stays ignored (nohup, &)
        signal.signal(signal.SIGINT, _note_interrupt)
    try:
        try:
            from .main import main

            status = main()
        except SystemExit as exc:  # argparse ends --help, --version and usage errors so
            status = exc.code
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # from here on a Ctrl-C must not replace the status
    except KeyboardInterrupt:  # outside main()'s own handler: while importing, or as main() returned
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        status = interrupted()
    except BaseException:
        if not _interrupts:
            raise
        # The interrupt, turned into another exception by a C extension (an ImportError from NumPy's import).
        status = interrupted()
    _forget_caught_interrupt()
    sys.exit(status)


#: SIGINTs this process received while :func:`run` listened (one entry each).
_interrupts: list[int] = []


def _note_interrupt(signum: int, frame: object) -> None:
    """Python's own SIGINT action (raise KeyboardInterrupt), noting first that the signal came."""
    _interrupts.append(signum)
    raise KeyboardInterrupt


def _forget_caught_interrupt() -> None:
    """Keep CPython from ending the process by SIGINT for a KeyboardInterrupt that was caught.

    CPython marks a KeyboardInterrupt that leaves code run by ``exec`` of a string as unhandled, and a
    ``python -m`` process so marked kills itself with SIGINT after its shutdown, whatever its status.
    ``dataclasses`` and ``collections.namedtuple`` build their methods with ``exec``, so a Ctrl-C during
    a command's imports often lands there: the command caught it and printed ``interrupted``, and the
    process still died by the signal (status -2: ``export``, whose imports are the longest, lost its
    130). Every ``exec`` of a string clears the mark before it runs: this one runs nothing else.
    """
    exec("pass")  # allowed: a constant string, never data (see the docstring)
