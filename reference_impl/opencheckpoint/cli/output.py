r"""Console output for the command line: rich on a terminal, plain unwrapped text when piped or redirected.

When stdout is not a terminal, lines are never wrapped or truncated (a long
array name survives ``| grep``), there is no colour, and a table is printed
as tab-separated lines (an optional ``# title`` line, a header line, then one
line per row) that ``cut``/``awk`` can read. That plain output is written by
this module alone: rich is imported only for a terminal (start-up: rich's
console and table cost as much CPU as the rest of ``inspect``'s own code).

Commands print text pieces, each a string or a ``(string, style)`` pair
(the style is a rich style such as ``"green"``, used on a terminal only),
and :class:`Table` objects. Text is never read as rich markup, so a path
holding ``[red]`` prints as it is.

>>> import io
>>> out = PlainOutput(io.StringIO())
>>> table = Table("array", "dtype", title="model")
>>> table.add_row("$.w", "float32")
>>> out.print(("valid", "green"), ": ckpt")
>>> out.print(table)
>>> out.file.getvalue().splitlines()
['valid: ckpt', '# model', 'array\tdtype', '$.w\tfloat32']
"""

from __future__ import annotations

import sys
from typing import IO, TYPE_CHECKING, Protocol

from ..progress import may_be_terminal

if TYPE_CHECKING:
    from rich.console import Console

#: One piece of a printed line: plain text, or text and the rich style it has on a terminal.
Piece = str | tuple[str, str]


class Table:
    """A table of text cells: drawn by rich on a terminal, tab-separated lines when piped."""

    def __init__(self, *headers: str, title: str | None = None) -> None:
        self.headers = list(headers)
        self.title = title
        self.rows: list[list[str]] = []

    def add_row(self, *cells: str) -> None:
        if len(cells) != len(self.headers):
            raise ValueError(f"a row of {len(cells)} cells in a table of {len(self.headers)} columns")
        self.rows.append(list(cells))

    def lines(self) -> list[str]:
        """The piped form: an optional ``# title`` line, the header, one tab-separated line per row."""
        head = [f"# {self.title}"] if self.title else []
        return head + ["\t".join(self.headers)] + ["\t".join(row) for row in self.rows]


class Output(Protocol):
    """Where a command prints its results (:func:`output_console` picks one)."""

    is_terminal: bool

    def print(self, *pieces: Piece | Table, style: str | None = None) -> None: ...


class PlainOutput:
    """Piped or redirected output: each :meth:`print` writes one unwrapped line (or a table's lines)."""

    is_terminal = False

    def __init__(self, file: IO[str]) -> None:
        self.file = file

    def print(self, *pieces: Piece | Table, style: str | None = None) -> None:
        if len(pieces) == 1 and isinstance(pieces[0], Table):
            text = "".join(line + "\n" for line in pieces[0].lines())
        else:
            text = "".join(p if isinstance(p, str) else p[0] for p in pieces if not isinstance(p, Table)) + "\n"
        self.file.write(text)
        self.file.flush()


class RichOutput:
    """A terminal: text in its styles, tables drawn by rich."""

    is_terminal = True

    def __init__(self, console: Console) -> None:
        self.console = console

    def print(self, *pieces: Piece | Table, style: str | None = None) -> None:
        from rich.table import Table as RichTable
        from rich.text import Text

        if len(pieces) == 1 and isinstance(pieces[0], Table):
            table = pieces[0]
            drawn = RichTable(*table.headers, title=table.title, title_justify="left")
            for row in table.rows:
                drawn.add_row(*(Text(cell) for cell in row))
            self.console.print(drawn)
            return
        text = Text.assemble(*(p for p in pieces if not isinstance(p, Table)), style=style or "")
        self.console.print(text)


def output_console(*, stderr: bool = False) -> Output:
    """The output a command prints its results on (see the module docstring)."""
    stream = sys.stderr if stderr else sys.stdout
    if may_be_terminal(stream):
        from rich.console import Console

        console = Console(stderr=stderr, highlight=False)
        if console.is_terminal:
            return RichOutput(console)
    return PlainOutput(stream)
