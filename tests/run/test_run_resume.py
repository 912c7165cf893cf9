"""A torch training run stopped by a real SIGTERM and resumed in a new process equals an uninterrupted run,
bit for bit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from opencheckpoint import read_component
from opencheckpoint.examples.demo import bit_differences
from opencheckpoint.run.checkpointer import Rotation, resolve_checkpoint_path

UPDATES, INTERVAL, SIGTERM_AT = 30, 10, 13


def arguments(run_dir: Path, *extra: str) -> list[str]:
    return [str(run_dir), "--updates", str(UPDATES), "--interval", str(INTERVAL), *extra]


def train(run_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "opencheckpoint.examples.train", *arguments(run_dir, *extra)]
    return subprocess.run(command, check=True, capture_output=True, text=True, timeout=300)


#: The example's ``main`` for each argument list, one after the other in one process: each run builds its
#: objects and seeds every generator itself (``make_deterministic``), and a process importing torch costs more
#: CPU than these runs.
RUNS = ("import json, sys\nfrom opencheckpoint.examples.train import main\n"
        "for argv in json.loads(sys.argv[1]): main(argv)")


@pytest.mark.slow(seconds=10)  # two torch processes
def test_sigterm_then_resume_is_bitwise_identical(tmp_path: Path) -> None:
    interrupted, reference = tmp_path / "interrupted", tmp_path / "reference"
    stopped = train(interrupted, "--sigterm-at", str(SIGTERM_AT))
    assert f"SIGTERM: stopped cleanly at update {SIGTERM_AT}" in stopped.stdout
    assert [e.step for e in Rotation(interrupted).entries()] == [10, SIGTERM_AT]

    # resumed in a new process, then the uninterrupted reference run in that process after it
    both = subprocess.run([sys.executable, "-c", RUNS, json.dumps([arguments(interrupted), arguments(reference)])],
                          check=True, capture_output=True, text=True, timeout=300)
    assert f"resumed at update {SIGTERM_AT}" in both.stdout.split("\n", 1)[0]

    final, expected = resolve_checkpoint_path(interrupted), resolve_checkpoint_path(reference)
    assert final.name == expected.name == f"checkpoint-{UPDATES:012d}"
    for name in ("policy", "optimizer", "env", "rng", "progress"):
        assert bit_differences(read_component(final, name), read_component(expected, name)) == [], name
