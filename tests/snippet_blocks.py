"""Runs the code blocks of one docs page in one fresh interpreter, in order, each block standalone.

``python snippet_blocks.py`` reads a JSON list of ``[index, language, code]`` on standard input and runs each
block in order, in the current directory. A ``python`` block runs in a namespace of its own (``__name__ ==
"__main__"``); before anything runs, every one is checked to be standalone: a name it reads at module level
(or from a function it defines) that it neither assigns nor imports, and that is no builtin, would come from
an earlier block, so the run stops there with exit 3 naming the block and the name. A ``shell`` block's code
is a list of ``opencheckpoint ...`` command lines, each run through the command line's ``main()`` here, with
the environment and working directory the page started with (what a new shell would give it); one that exits
non-zero stops the run. A block that raises or fails stops the run with exit 1 after a line ``BLOCK <index>
FAILED`` (and the traceback, or the command line). Paying the interpreter start and the framework imports
once per page, not once per block or command, is what keeps the docs tests fast.
"""

from __future__ import annotations

import builtins
import json
import os
import shlex
import symtable
import sys
import traceback
from typing import Any

_BUILTINS = set(dir(builtins)) | {"__file__", "__name__", "__builtins__", "__doc__"}


def borrowed_names(code: str) -> set[str]:
    """Names the block reads without defining them (and that are not builtins).

    >>> sorted(borrowed_names("import numpy as np\\nx = np.ones(3)\\nprint(y)"))
    ['y']
    >>> sorted(borrowed_names("def f():\\n    return helper(1)\\nhelper = abs"))
    []
    """
    top = symtable.symtable(code, "<block>", "exec")
    defined = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    used: set[str] = set()
    pending = [top]
    while pending:
        table = pending.pop()
        for symbol in table.get_symbols():
            at_top = table is top and symbol.is_referenced()
            if at_top or (table is not top and symbol.is_global() and symbol.is_referenced()):
                used.add(symbol.get_name())
        pending.extend(table.get_children())
    return used - defined - _BUILTINS


def run_python(index: int, code: str) -> bool:
    """Run one Python block in a namespace of its own; False (after the traceback) when it raised."""
    try:
        namespace = {"__name__": "__main__", "__builtins__": builtins}
        exec(compile(code, f"<block {index}>", "exec"), namespace)  # allowed: runs our own docs
    except BaseException:  # SystemExit(0) included: a block that exits ends the page's run like a script
        if isinstance(sys.exc_info()[1], SystemExit) and sys.exc_info()[1].code in (0, None):
            return True
        print(f"BLOCK {index} FAILED", flush=True)
        traceback.print_exc()
        return False
    return True


def run_shell(index: int, lines: list[str], environ: dict[str, str], directory: str) -> bool:
    """Run each ``opencheckpoint ...`` line through the CLI's ``main()``, as from a new shell in the page's
    directory; False (after naming the line) at the first that exits non-zero."""
    from opencheckpoint.cli.main import main as cli

    for line in lines:
        os.environ.clear()
        os.environ.update(environ)
        os.chdir(directory)
        argv = shlex.split(line)
        try:
            code = cli(argv[1:])
        except SystemExit as exc:  # argparse's --help and usage errors
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        sys.stdout.flush()
        if code != 0:
            print(f"BLOCK {index} FAILED: {line} exited {code}", flush=True)
            return False
    return True


def main() -> int:
    return run_page(json.load(sys.stdin))


def run_page(blocks: list[tuple[int, str, Any]]) -> int:
    """Run a page's blocks in order in this process and directory: 0, 1 (a block failed) or 3 (not standalone)."""
    for index, language, code in blocks:
        borrowed = sorted(borrowed_names(code)) if language == "python" else []
        if borrowed:
            print(f"BLOCK {index} IS NOT STANDALONE: it uses {', '.join(borrowed)} without defining them", flush=True)
            return 3
    environ, directory = dict(os.environ), os.getcwd()
    for index, language, code in blocks:
        ran = run_python(index, code) if language == "python" else run_shell(index, code, environ, directory)
        if not ran:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
