"""The command line's exit codes (docs/cli.md, "Exit codes"), shared by :mod:`.main` and :mod:`.entry`.

>>> EXIT_INTERRUPTED
130
"""

from __future__ import annotations

import sys

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2
#: Interrupted by Ctrl-C (SIGINT): 128 + the signal number, as shells report it.
EXIT_INTERRUPTED = 130


def interrupted() -> int:
    """Say so in one line on stderr (not the traceback of wherever the interrupt landed); return 130."""
    print("interrupted", file=sys.stderr)
    return EXIT_INTERRUPTED
