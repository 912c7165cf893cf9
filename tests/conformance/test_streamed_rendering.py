"""``conformance impl read`` streams the rendering: byte for byte what ``dumps(render_checkpoint())`` gives."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from opencheckpoint import Checkpoint
from opencheckpoint.conformance.canonical import render_checkpoint, render_node
from opencheckpoint.conformance.impl import dumps
from opencheckpoint.conformance.json_text import LazyTree, write_checkpoint_rendering, write_json
from opencheckpoint.testing.strategies import trees

CASES = Path(__file__).resolve().parents[2] / "conformance" / "cases" / "v1"


def _valid_cases() -> list[Path]:
    return sorted(c for c in CASES.iterdir()
                  if (c / "case.json").is_file() and json.loads((c / "case.json").read_text())["valid"])


@pytest.mark.parametrize("case", _valid_cases(), ids=lambda c: c.name)
def test_streamed_rendering_is_the_expected_json(case: Path) -> None:
    meta = json.loads((case / "case.json").read_text())
    target = case / (meta.get("read_path") or ("checkpoint" if meta["form"] == "directory" else "checkpoint.zip"))
    out = io.StringIO()
    write_checkpoint_rendering(target, out)
    assert out.getvalue() == dumps(render_checkpoint(target)) == (case / "expected.json").read_text()


# -- the streamed writer: the same bytes as json.dumps, in work linear in the tree ---------------------------
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees(max_leaves=16))
def test_streamed_node_text_is_json_dumps_of_the_rendered_node(tree: Any) -> None:
    pieces: list[str] = []
    write_json(LazyTree(tree), pieces.append, 3)  # any level: the indentation of every line depends on it
    expected = json.dumps(render_node(tree), indent=2, ensure_ascii=False).replace("\n", "\n" + "  " * 3)
    assert "".join(pieces) == expected


class _CountingOut:
    """A text stream that keeps only how often and how much it was written to."""

    def __init__(self) -> None:
        self.writes = 0
        self.chars = 0
        self.longest = 0

    def write(self, text: str) -> int:
        self.writes += 1
        self.chars += len(text)
        self.longest = max(self.longest, len(text))
        return len(text)


def _rendering_work(tmp_path: Path, depth: int, width: int) -> tuple[int, int, int, int]:
    """(calls, writes, characters, longest write) of rendering ``depth`` 1000-character keys above ``width`` arrays."""
    tree: Any = [np.zeros(0, bool)] * width
    for level in range(depth):
        tree = {chr(97 + level % 26) * 1000: tree}
    path = Checkpoint(model=tree, durable=False).save(tmp_path / f"c-{depth}-{width}")
    calls = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        calls += event in ("call", "c_call")

    out = _CountingOut()
    sys.setprofile(count)
    try:
        write_checkpoint_rendering(path, out)  # type: ignore[arg-type]  # only write() is used
    finally:
        sys.setprofile(None)
    return calls, out.writes, out.chars, out.longest


def test_a_deep_wide_tree_renders_in_work_linear_in_its_nodes(tmp_path: Path) -> None:
    """Indentation is not rebuilt per line and leaf nodes are written whole: the work per node is bounded.

    The output of a deep tree is mostly indentation (Appendix B.1 fixes two spaces per level), so it grows
    with nodes x depth; the operations (function calls, writes) must grow with the nodes alone.
    """
    shallow, deep, wide = (_rendering_work(tmp_path, d, w) for d, w in ((4, 400), (100, 400), (4, 800)))
    assert deep[2] > 10 * shallow[2]  # 25 times the depth: the output is mostly indentation
    for (_, writes, _, longest), nodes in ((shallow, 404), (deep, 500), (wide, 804)):
        assert writes <= 2 * nodes + 150  # the old writer wrote every member of every node on its own (~14/leaf)
        assert longest <= 8_000  # one key or one leaf with its indentation: no piece carries the heads above it
    assert deep[0] <= 1.2 * shallow[0]  # 96 more dicts of 400 leaves: depth costs per level, not per line
    assert wide[0] <= 2.1 * shallow[0]
