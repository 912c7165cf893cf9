"""The documentation site builds without a single warning, and the API reference covers every public name."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import opencheckpoint

ROOT = Path(__file__).resolve().parents[1]


def build(root: Path, out: Path) -> tuple[bool, str]:
    """``mkdocs build --strict`` (never ``-q``, which hid warnings): clean when it exits 0 and logs no
    WARNING or ERROR line. Returns (clean, log)."""
    mkdocs = Path(sys.executable).with_name("mkdocs")
    done = subprocess.run([str(mkdocs), "build", "--strict", "-d", str(out)], cwd=root, capture_output=True,
                          text=True, check=False, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    log = done.stdout + done.stderr
    # Broken anchors are only INFO in mkdocs' default validation: counted as warnings here.
    noisy = [line for line in log.splitlines()
             if "WARNING" in line or "ERROR" in line or "contains a link" in line]
    return done.returncode == 0 and not noisy, log


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    clean, log = build(ROOT, out)
    assert clean, log
    return out


@pytest.mark.slow(seconds=15)  # the site's build (its module fixture: the group's cost)
def test_mkdocs_builds_without_warnings(site: Path) -> None:
    assert (site / "index.html").exists()


def test_build_check_fails_on_a_broken_link(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# x\n\n[gone](../conformance/README.md)\n")
    (tmp_path / "mkdocs.yml").write_text("site_name: t\n")
    clean, log = build(tmp_path, tmp_path / "site")
    assert not clean and "../conformance/README.md" in log


def test_api_reference_documents_every_public_name(site: Path) -> None:
    html = (site / "api" / "index.html").read_text(encoding="utf-8")
    anchors = set(re.findall(r'id="([^"]+)"', html))
    missing = []
    for name in opencheckpoint.__all__:
        if name == "__version__":
            continue
        obj = getattr(opencheckpoint, name)
        if not (obj.__doc__ or "").strip():
            missing.append(f"{name}: no docstring")
        if not {f"opencheckpoint.{name}", f"{obj.__module__}.{name}"} & anchors:
            missing.append(f"{name}: not in docs/api.md")
    assert not missing, missing


def test_cli_reference_documents_every_command() -> None:
    from opencheckpoint.cli.main import build_parser

    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    parser = build_parser()
    commands = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    names = list(commands.choices)
    assert {"convert", "export", "diff", "ls", "validate", "inspect"} <= set(names)
    missing = [name for name in names if f"## `opencheckpoint {name}" not in text]
    assert not missing, missing
