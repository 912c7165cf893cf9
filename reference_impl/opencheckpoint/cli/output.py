"""Console output for the command line: rich on a terminal, plain unwrapped text when piped or redirected.

When stdout is not a terminal, lines are never wrapped or truncated (a long
array name survives ``| grep``), colour and markup are dropped, and a table is
printed as tab-separated lines (a header line, then one line per row) that
``cut``/``awk`` can read.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

#: A width no line reaches: rich never wraps or ellipsizes below it.
_UNBOUNDED = 1 << 20


class PlainConsole(Console):
    """A :class:`rich.console.Console` for pipes: soft-wrapped text, tables as tab-separated lines."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        if len(objects) == 1 and isinstance(objects[0], Table):
            # Written as is: rich would expand the tabs into spaces.
            self.file.write("".join(line + "\n" for line in table_lines(objects[0])))
            self.file.flush()
            return
        kwargs.setdefault("soft_wrap", True)
        super().print(*objects, **kwargs)


def table_lines(table: Table) -> list[str]:
    """A rich table as plain text: an optional ``# title`` line, the header, one tab-separated line per row."""
    def plain(cell: Any) -> str:
        return cell.plain if isinstance(cell, Text) else str(cell)

    lines = [f"# {plain(table.title)}"] if table.title else []
    lines.append("\t".join(plain(column.header) for column in table.columns))
    columns = [[plain(cell) for cell in column.cells] for column in table.columns]
    lines.extend("\t".join(row) for row in zip(*columns, strict=True))
    return lines


def output_console(*, stderr: bool = False) -> Console:
    """The console a command prints its results on (see the module docstring)."""
    if Console(stderr=stderr).is_terminal:
        return Console(stderr=stderr, highlight=False)
    return PlainConsole(stderr=stderr, highlight=False, no_color=True, width=_UNBOUNDED, soft_wrap=True)
