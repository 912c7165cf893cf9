"""Every code block of the README and the docs runs as written, page by page, in order.

Each page runs in one fresh interpreter (``tests/snippet_blocks.py``), in a working directory of its own (a
later block may read a file an earlier one wrote, as a reader following the page would): each Python block in
a namespace of its own and checked to define every name it uses (so it cannot lean on names defined by an
earlier block: it is standalone code); each shell block made of ``opencheckpoint`` commands through the
command line's ``main()``, with the environment and directory a new shell would have. The only blocks not run
are command synopses with UPPERCASE placeholders (``PATH``, ``DIR``), ``make`` targets (the build itself) and
commands of a hypothetical other implementation (``mytool``), listed by :func:`not_runnable`. (One interpreter
per page, not per run of Python blocks and per command: a page like ``migrating.md`` imported torch and JAX
two dozen times, 58 s of CPU; decision 0023.)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
_PLACEHOLDER = re.compile(r"\b[A-Z][A-Z_]{2,}\b")


def blocks(page: Path) -> list[tuple[str, str]]:
    """(language, code) of every fenced block of a page, in order."""
    return [(m.group(1), m.group(2)) for m in _FENCE.finditer(page.read_text(encoding="utf-8"))]


def commands(code: str) -> list[str]:
    """The command lines of a shell block, without comments."""
    joined = code.replace("\\\n", " ")  # continuation lines
    lines = [line.split(" #")[0].strip().removeprefix("$ ") for line in joined.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def not_runnable(language: str, code: str) -> str | None:
    """Why a block is not run, or None when it is run."""
    if language in ("python", "py"):
        return None
    if language not in ("sh", "bash", "console", "shell"):
        return f"{language or 'plain'} text, not code"
    lines = commands(code)
    if any(line.startswith("make ") or line == "make" for line in lines):
        return "make targets: the build itself"
    if any("mytool" in line for line in lines):
        return "another implementation's command (mytool)"
    if any(_PLACEHOLDER.search(line) for line in lines):
        return "a synopsis with placeholders"
    if not all(line.startswith("opencheckpoint ") for line in lines):
        return "not an opencheckpoint command"
    return None


def runnable_pages() -> list[Path]:
    return [page for page in PAGES if any(not_runnable(lang, code) is None for lang, code in blocks(page))]


RUNNER = Path(__file__).resolve().parent / "snippet_blocks.py"


def runs(page: Path) -> list[tuple[int, str, str | list[str]]]:
    """The page's runnable blocks in order: ``(index, "python", code)`` or ``(index, "shell", command lines)``."""
    runnable: list[tuple[int, str, str | list[str]]] = []
    for index, (language, code) in enumerate(blocks(page)):
        if not_runnable(language, code) is not None:
            continue
        if language in ("python", "py"):
            runnable.append((index, "python", code))
        else:
            runnable.append((index, "shell", commands(code)))
    return runnable


@pytest.mark.slow(seconds=8)  # one interpreter per page, most import torch or JAX
@pytest.mark.parametrize("page", runnable_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_page_code_blocks_run_as_written(page: Path, tmp_path: Path) -> None:
    """The page's blocks run in order in one fresh interpreter: Python blocks each in a namespace of its own and
    checked to define every name it uses, shell blocks command by command (tests/snippet_blocks.py)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONWARNINGS": "ignore", "JAX_PLATFORMS": "cpu"}
    page_blocks = runs(page)
    assert page_blocks
    done = subprocess.run([sys.executable, str(RUNNER)], input=json.dumps(page_blocks), cwd=tmp_path, env=env,
                          capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, f"{page.name}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"


def test_a_block_leaning_on_an_earlier_block_is_refused(tmp_path: Path) -> None:
    group = [(0, "python", "import math\nvalue = math.pi"), (1, "python", "print(value)")]
    done = subprocess.run([sys.executable, str(RUNNER)], input=json.dumps(group), cwd=tmp_path, capture_output=True,
                          text=True, check=False, timeout=60)
    assert done.returncode == 3 and "BLOCK 1 IS NOT STANDALONE" in done.stdout and "value" in done.stdout


def test_a_failing_block_is_named(tmp_path: Path) -> None:
    group = [(4, "python", "x = 1"), (7, "python", "raise ValueError('boom')")]
    done = subprocess.run([sys.executable, str(RUNNER)], input=json.dumps(group), cwd=tmp_path, capture_output=True,
                          text=True, check=False, timeout=60)
    assert done.returncode == 1 and "BLOCK 7 FAILED" in done.stdout and "boom" in done.stderr


def test_a_failing_command_is_named_and_stops_the_page(tmp_path: Path) -> None:
    group = [(2, "shell", ["opencheckpoint migrations", "opencheckpoint validate no-such-checkpoint"]),
             (3, "python", "open('reached', 'w')")]
    done = subprocess.run([sys.executable, str(RUNNER)], input=json.dumps(group), cwd=tmp_path, capture_output=True,
                          text=True, check=False, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "BLOCK 2 FAILED: opencheckpoint validate no-such-checkpoint exited 1" in done.stdout
    assert '"current_version"' in done.stdout and not (tmp_path / "reached").exists()


def test_only_synopses_and_make_targets_are_skipped() -> None:
    reasons = {not_runnable(lang, code) for page in PAGES for lang, code in blocks(page)} - {None}
    assert reasons <= {"make targets: the build itself", "a synopsis with placeholders", "plain text, not code",
                       "another implementation's command (mytool)",
                       "text text, not code", "json text, not code", "toml text, not code", "yaml text, not code",
                       "xml text, not code"}, reasons
