"""Runs consecutive Python code blocks of one docs page in one fresh interpreter, each block standalone.

``python snippet_blocks.py`` reads a JSON list of ``[index, code]`` pairs on standard input and executes each
block in order, each in a namespace of its own (``__name__ == "__main__"``), in the current directory. Before
anything runs, every block is checked to be standalone: a name it reads at module level (or from a function
it defines) that it neither assigns nor imports, and that is no builtin, would come from an earlier block, so
the run stops there with exit 3 naming the block and the name. A block that raises stops the run with exit 1
and the traceback, after a line ``BLOCK <index> FAILED``. Paying the interpreter start and the framework
imports once per run of blocks, not once per block, is what keeps the docs tests fast.
"""

from __future__ import annotations

import builtins
import json
import symtable
import sys
import traceback

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


def main() -> int:
    blocks = json.load(sys.stdin)
    for index, code in blocks:
        borrowed = sorted(borrowed_names(code))
        if borrowed:
            print(f"BLOCK {index} IS NOT STANDALONE: it uses {', '.join(borrowed)} without defining them", flush=True)
            return 3
    for index, code in blocks:
        try:
            namespace = {"__name__": "__main__", "__builtins__": builtins}
            exec(compile(code, f"<block {index}>", "exec"), namespace)  # allowed: runs our own docs
        except BaseException:  # SystemExit(0) included: a block that exits ends the page's run like a script
            if isinstance(sys.exc_info()[1], SystemExit) and sys.exc_info()[1].code in (0, None):
                continue
            print(f"BLOCK {index} FAILED", flush=True)
            traceback.print_exc()
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
