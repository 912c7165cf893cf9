"""``conformance impl read`` streams the rendering: byte for byte what ``dumps(render_checkpoint())`` gives."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from opencheckpoint.conformance.canonical import render_checkpoint, write_checkpoint_rendering
from opencheckpoint.conformance.impl import dumps

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
