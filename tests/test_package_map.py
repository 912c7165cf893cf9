"""docs/development.md's package map lists exactly the modules the package has (one row each)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "reference_impl" / "opencheckpoint"
ROW = re.compile(r"^\| `([\w/]+\.py)` \| (.+) \|$")


def _map_rows() -> list[tuple[str, str]]:
    text = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    section = text.split("## Package map", 1)[1].split("\n## ", 1)[0]
    return [(m.group(1), m.group(2)) for line in section.splitlines() if (m := ROW.match(line))]


def _modules() -> set[str]:
    """Every module file of the package at test time (other branches add modules), minus ``__init__``/``__main__``."""
    return {path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")
            if path.name != "__init__.py" and path.relative_to(PACKAGE).as_posix() != "__main__.py"}


def test_every_module_has_exactly_one_row_and_every_row_a_module() -> None:
    rows = [module for module, _ in _map_rows()]
    assert len(rows) == len(set(rows)), f"listed twice: {sorted({m for m in rows if rows.count(m) > 1})}"
    missing = sorted(_modules() - set(rows))
    stale = sorted(set(rows) - _modules())
    assert not missing, f"add a row to the package map of docs/development.md for: {missing}"
    assert not stale, f"the package map of docs/development.md lists modules that no longer exist: {stale}"


def test_every_row_says_what_the_module_owns() -> None:
    assert all(len(owns.strip()) >= 10 for _, owns in _map_rows())


def test_every_test_folder_is_described_in_the_layout() -> None:
    """The ``tests/`` row of the layout table names every test folder (the suite mirrors the package)."""
    text = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `tests/` |"))
    folders = sorted(p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and any(p.glob("test_*.py")))
    assert [f for f in folders if f"`{f}/`" not in row] == []
