"""The command line shows a progress bar on a terminal (a pseudo-terminal here) and nothing when piped
or under ``--json``."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from opencheckpoint import Checkpoint

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")


def _env() -> dict[str, str]:
    # The bar's size threshold is lowered so that a small checkpoint shows one.
    return {**os.environ, "OPENCHECKPOINT_PROGRESS_MIN_BYTES": "0", "COLUMNS": "120", "TERM": "xterm",
            "NO_COLOR": "", "FORCE_COLOR": ""}


def _run_on_terminal(args: list[str]) -> tuple[int, str]:
    """Run the CLI with stdout and stderr on a pseudo-terminal; return its exit code and everything it showed."""
    leader, follower = pty.openpty()
    env = {k: v for k, v in _env().items() if v}
    process = subprocess.Popen([sys.executable, "-m", "opencheckpoint", *args], stdin=subprocess.DEVNULL,
                               stdout=follower, stderr=follower, env=env)
    os.close(follower)
    shown = bytearray()
    while True:
        ready, _, _ = select.select([leader], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(leader, 1 << 16)
        except OSError:  # the terminal closed: the process is done
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    return process.wait(60), shown.decode("utf-8", "replace")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli-progress") / "c"
    Checkpoint(w={"a": np.zeros(1 << 18, dtype=np.float32)}).save(path)
    return path


def test_validate_shows_a_bar_on_a_terminal(checkpoint: Path) -> None:
    code, shown = _run_on_terminal(["validate", str(checkpoint)])
    assert code == 0, shown
    assert "validating" in shown and "━" in shown  # the bar's description and its bar characters
    assert "valid" in shown


def test_validate_piped_or_json_shows_no_bar(checkpoint: Path) -> None:
    env = {k: v for k, v in _env().items() if v}
    piped = subprocess.run([sys.executable, "-m", "opencheckpoint", "validate", str(checkpoint)],
                           capture_output=True, text=True, env=env, timeout=60)
    assert piped.returncode == 0
    assert "validating" not in piped.stdout + piped.stderr and "━" not in piped.stdout + piped.stderr
    assert "\x1b" not in piped.stdout + piped.stderr
    code, shown = _run_on_terminal(["validate", "--json", str(checkpoint)])
    assert code == 0 and "validating" not in shown and "━" not in shown
    assert '"ok": true' in shown


def test_convert_shows_a_bar_on_a_terminal_only(tmp_path: Path) -> None:
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    source = tmp_path / "model.safetensors"
    safetensors_numpy.save_file({"w": np.ones(1 << 16, dtype=np.float32)}, str(source))
    code, shown = _run_on_terminal(["convert", str(source), str(tmp_path / "on-terminal")])
    assert code == 0, shown
    assert "saving on-terminal" in shown and "━" in shown
    env = {k: v for k, v in _env().items() if v}
    piped = subprocess.run([sys.executable, "-m", "opencheckpoint", "convert", str(source), str(tmp_path / "piped")],
                           capture_output=True, text=True, env=env, timeout=60)
    assert piped.returncode == 0, piped.stderr
    assert "saving" not in piped.stdout + piped.stderr and "━" not in piped.stdout + piped.stderr
