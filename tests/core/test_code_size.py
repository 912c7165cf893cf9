"""Issue 9's size bounds: every module of the package ≤ 500 lines, every function or method ≤ 60 lines.

Lengths are read with :mod:`ast`: a function spans ``end_lineno - lineno + 1`` lines, its signature,
docstring and nested functions included (decorators are not). A failure lists every offender, so a
split can be planned from the message alone.
"""

from __future__ import annotations

import ast
from pathlib import Path

import opencheckpoint

PACKAGE = Path(opencheckpoint.__file__).parent
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60

#: Functions over the bound that are being split on another branch (issue 9); each entry is removed when
#: that branch is merged, and an entry whose function is short enough (or gone) fails the test below.
BEING_SPLIT_ELSEWHERE: dict[str, str] = {}


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def module_lengths() -> dict[str, int]:
    """Each module of the package (relative path) -> its number of lines."""
    return {p.relative_to(PACKAGE).as_posix(): len(p.read_text(encoding="utf-8").splitlines()) for p in _modules()}


def function_lengths(source: str, module: str) -> dict[str, int]:
    """``module::name`` -> lines of every function and method in ``source`` (methods as ``Class.name``)."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                assert child.end_lineno is not None
                key = f"{module}::{prefix}{child.name}"
                # An overloaded or redefined name keeps its longest definition.
                out[key] = max(out.get(key, 0), child.end_lineno - child.lineno + 1)
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return out


def all_function_lengths() -> dict[str, int]:
    found: dict[str, int] = {}
    for path in _modules():
        found.update(function_lengths(path.read_text(encoding="utf-8"), path.relative_to(PACKAGE).as_posix()))
    return found


def test_function_lengths_count_signature_docstring_and_body() -> None:
    source = 'class A:\n    def m(self):\n        """Doc."""\n        return 1\n\n\ndef f(\n    x,\n):\n    pass\n'
    assert function_lengths(source, "m.py") == {"m.py::A.m": 3, "m.py::f": 4}


def test_nested_functions_are_counted_on_their_own_and_within_their_parent() -> None:
    source = "def outer():\n    def inner():\n        return 1\n    return inner\n"
    assert function_lengths(source, "m.py") == {"m.py::outer": 4, "m.py::outer.inner": 2}


def test_no_module_is_longer_than_500_lines() -> None:
    offenders = {name: n for name, n in module_lengths().items() if n > MAX_MODULE_LINES}
    assert not offenders, f"modules over {MAX_MODULE_LINES} lines (split them, one job each): {offenders}"


def test_no_function_is_longer_than_60_lines() -> None:
    offenders = {name: n for name, n in all_function_lengths().items()
                 if n > MAX_FUNCTION_LINES and name not in BEING_SPLIT_ELSEWHERE}
    assert not offenders, f"functions over {MAX_FUNCTION_LINES} lines (split along responsibilities): {offenders}"


def test_the_allow_list_only_holds_functions_still_too_long() -> None:
    # The allow-list only shrinks: a function split (or removed) on its branch leaves the list with the merge.
    lengths = all_function_lengths()
    stale = sorted(name for name in BEING_SPLIT_ELSEWHERE if lengths.get(name, 0) <= MAX_FUNCTION_LINES)
    assert not stale, f"no longer over {MAX_FUNCTION_LINES} lines, remove from BEING_SPLIT_ELSEWHERE: {stale}"
