"""Peak memory of save and load stays within one copy of the state plus 64 MiB (DESIGN: never a second copy).

Each operation runs in a fresh interpreter (benchmarks/peak_memory.py), which
reports its peak RSS after its imports, after building the state, and after
the operation. The peak is ``VmHWM``: the counter behind ``ru_maxrss``, but
for this process's own address space, since on Linux ``ru_maxrss`` carries
the parent's high-water mark across ``exec`` (a big pytest process would
otherwise hide the child's peak). This is a memory bound, not a timing one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "peak_memory.py"
MIB = 1 << 20
STATE_BYTES = 512 * MIB
ALLOWANCE = 64 * MIB


def _child(operation: str, path: Path) -> dict[str, Any]:
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), operation, str(path), "--size-bytes", str(STATE_BYTES), "--count", "64"],
        capture_output=True, text=True, timeout=120, check=False)
    assert completed.returncode == 0, completed.stderr
    report: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return report


@pytest.fixture(scope="module")
def checkpoint_reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    path = tmp_path_factory.mktemp("peak") / "ckpt"
    saved = _child("save", path)
    assert (path / "manifest.json").is_file()
    return {"save": saved, "load": _child("load", path)}


def test_save_peak_rss_within_state_plus_64_mib(checkpoint_reports: dict[str, dict[str, Any]]) -> None:
    report = checkpoint_reports["save"]
    assert report["state_bytes"] == STATE_BYTES
    # The state is built before the save: the save itself may add at most the allowance.
    assert report["peak"] - report["state"] <= ALLOWANCE, report
    assert report["peak"] - report["base"] <= STATE_BYTES + ALLOWANCE, report


def test_load_peak_rss_within_state_plus_64_mib(checkpoint_reports: dict[str, dict[str, Any]]) -> None:
    report = checkpoint_reports["load"]
    assert report["correct"], "read_component returned other bytes than the save wrote"
    assert report["state_bytes"] == STATE_BYTES
    assert report["peak"] - report["base"] <= STATE_BYTES + ALLOWANCE, report
