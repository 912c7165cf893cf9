"""Every code block of the README and the docs runs as written, page by page, in order.

Each page runs in one new process of its own (``tests/snippet_blocks.py``, forked by ``tests/snippet_server.py``
from an interpreter that imported NumPy, torch, JAX and opencheckpoint once), in a working directory of its own (a
later block may read a file an earlier one wrote, as a reader following the page would): each Python block in
a namespace of its own and checked to define every name it uses (so it cannot lean on names defined by an
earlier block: it is standalone code); each shell block made of ``opencheckpoint`` commands through the
command line's ``main()``, with the environment and directory a new shell would have. The only blocks not run
are command synopses with UPPERCASE placeholders (``PATH``, ``DIR``), ``make`` targets (the build itself) and
commands of a hypothetical other implementation (``mytool``), listed by :func:`not_runnable`. (One process
per page, not per run of Python blocks and per command: a page like ``migrating.md`` imported torch and JAX
two dozen times, 58 s of CPU; and forked, not a new interpreter: the 17 pages spent 33 of their 74 s of CPU
importing frameworks; decision 0023.)
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
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


SERVER = Path(__file__).resolve().parent / "snippet_server.py"
#: Seconds a page may run before its process (and the server) is killed and the page fails.
PAGE_TIMEOUT = 600


class PageServer:
    """``tests/snippet_server.py``, started once with the environment every page gets: runs each page in a
    process forked from an interpreter that imported the frameworks once (restarted after a page that hung)."""

    def __init__(self) -> None:
        self.env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                    "PYTHONWARNINGS": "ignore", "JAX_PLATFORMS": "cpu"}
        self.process: subprocess.Popen[str] | None = None

    def run(self, page_blocks: list[tuple[int, str, str | list[str]]], directory: Path) -> tuple[int, str, str]:
        """The page's exit status (negative: killed by that signal), standard output and standard error."""
        if self.process is None or self.process.poll() is not None:
            self.process = subprocess.Popen([sys.executable, str(SERVER)], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, env=self.env, text=True, start_new_session=True)
        assert self.process.stdin is not None and self.process.stdout is not None
        out, err = directory / "page.out", directory / "page.err"
        work = directory / "page"
        work.mkdir()
        request = {"blocks": page_blocks, "cwd": str(work), "out": str(out), "err": str(err)}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], PAGE_TIMEOUT)
        if not ready:
            self.close()
            return -signal.SIGKILL, out.read_text(), err.read_text() + f"\n(killed after {PAGE_TIMEOUT} s)"
        status = int(self.process.stdout.readline())
        return status, out.read_text(), err.read_text()

    def close(self) -> None:
        if self.process is not None:
            os.killpg(self.process.pid, signal.SIGKILL)  # the server's session: a hung page's process goes too
            self.process.wait()
            self.process = None


@pytest.fixture(scope="session")
def page_server() -> Iterator[PageServer]:
    server = PageServer()
    try:
        yield server
    finally:
        server.close()


@pytest.mark.slow(seconds=3)  # a page's own work (most import torch or JAX, which the server did once)
@pytest.mark.parametrize("page", runnable_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_page_code_blocks_run_as_written(page: Path, tmp_path: Path, page_server: PageServer) -> None:
    """The page's blocks run in order in one new process of its own: Python blocks each in a namespace of its own
    and checked to define every name it uses, shell blocks command by command (tests/snippet_blocks.py)."""
    page_blocks = runs(page)
    assert page_blocks
    status, out, err = page_server.run(page_blocks, tmp_path)
    assert status == 0, f"{page.name}:\n{out[-2000:]}\n{err[-3000:]}"


def test_a_page_process_ends_as_an_interpreter_ends(tmp_path: Path, page_server: PageServer) -> None:
    """What separates a forked page from a fresh interpreter's run: its status is the page's, its threads are
    joined and its ``atexit`` handlers run before it ends (an async save in flight finishes), and nothing of a
    page reaches the next one."""
    first = [(0, "python", "import atexit, threading, time\n"
                           "threading.Thread(target=lambda: (time.sleep(0.2), open('thread', 'w'))).start()\n"
                           "atexit.register(lambda: open('atexit', 'w'))\n"
                           "import builtins\nbuiltins.LEAKED = 1")]
    (tmp_path / "a").mkdir()
    assert page_server.run(first, tmp_path / "a")[0] == 0
    assert (tmp_path / "a" / "page" / "thread").exists() and (tmp_path / "a" / "page" / "atexit").exists()
    second = [(0, "python", "import builtins\nassert not hasattr(builtins, 'LEAKED')"),
              (1, "python", "raise ValueError('boom')")]
    (tmp_path / "b").mkdir()
    status, out, err = page_server.run(second, tmp_path / "b")
    assert status == 1 and "BLOCK 1 FAILED" in out and "boom" in err, (status, out, err)


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
