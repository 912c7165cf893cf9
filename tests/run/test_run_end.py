"""The end of a run: the final and the stop save carry the latest metadata, never raise on the way out, and a
run stopped by a real SIGTERM or SIGINT (sent by another process) resumes from the step it stopped at.

Each run is a child process; the parent sends the signal once the child says it is at the stop step.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from opencheckpoint import Checkpoint, manifest
from opencheckpoint.run import Rotation, RunCheckpointer

#: The child's training loop: ``w`` grows by one per step, the loss is the step; it waits at ``stop_at``
#: until a stop is requested (the parent's signal), then breaks after that step's ``save`` as users write it.
CHILD = r"""
import json, sys, time
import numpy as np
from opencheckpoint import Checkpoint
from opencheckpoint.run import RunCheckpointer, StopOnSignal

run_dir, stop_at, total, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
state = {"w": np.zeros(4)}
options = {"keep_best": ("loss", "min"), "keep_last": 1} if "best" in mode else {"keep_last": 2}
run = RunCheckpointer(Checkpoint(state=state), run_dir, interval=10, async_save="async" in mode, **options)
start = run.restore() or 0
print(json.dumps({"resumed": start, "w": state["w"].tolist()}), flush=True)
step = start
with StopOnSignal() as stop, run:
    for step in range(start + 1, total + 1):
        state["w"] += 1
        run.save(step, metadata={"loss": float(step)})
        if step == stop_at:
            print(json.dumps({"waiting": step}), flush=True)
            deadline = time.monotonic() + 60
            while not stop.requested and time.monotonic() < deadline:
                time.sleep(0.01)
        if stop.requested:
            break
print(json.dumps({"stopped": stop.signal_name, "step": step}), flush=True)
"""


def run_child(tmp_path: Path, run_dir: Path, mode: str, total: int, stop_at: int = 0,
              signum: int | None = None) -> list[dict[str, Any]]:
    """Run the child to its end (signalled at ``stop_at`` if asked); return its JSON lines. Bounded: 120 s."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    child = subprocess.Popen([sys.executable, str(script), str(run_dir), str(stop_at), str(total), mode],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[dict[str, Any]] = []
    try:
        assert child.stdout is not None
        for line in child.stdout:
            lines.append(json.loads(line))
            if "waiting" in lines[-1] and signum is not None:
                os.kill(child.pid, signum)
        _, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, err
    return lines


@pytest.mark.parametrize(("mode", "signame"), [("best", "SIGTERM"), ("last", "SIGINT"),
                                               ("best-async", "SIGTERM"), ("last-async", "SIGINT")])
def test_signal_stopped_run_saves_its_step_with_metadata_and_resumes_there(
        tmp_path: Path, mode: str, signame: str) -> None:
    signum = signal.Signals[signame]
    run_dir = tmp_path / "run"
    first = run_child(tmp_path, run_dir, mode, total=40, stop_at=23, signum=signum)
    assert first[-1] == {"stopped": signame, "step": 23}
    latest = Rotation(run_dir).latest()
    assert latest is not None and latest.name == "checkpoint-000000000023"
    metadata = manifest(latest)["metadata"]
    assert (metadata["step"], metadata["loss"]) == (23, 23.0)  # the stop save carries the last save's metadata

    second = run_child(tmp_path, run_dir, mode, total=25)
    assert second[0] == {"resumed": 23, "w": [23.0] * 4}
    assert second[-1] == {"stopped": None, "step": 25}
    steps = [entry.step for entry in Rotation(run_dir, keep_best=("loss", "min")).entries()]
    final = manifest(Rotation(run_dir).latest())["metadata"]  # type: ignore[arg-type]
    assert (final["step"], final["loss"]) == (25, 25.0)
    # keep_best keeps the best (lowest loss: step 10) and the newest; keep_last=2 the two newest.
    assert steps == ([10, 25] if "best" in mode else [23, 25])


def test_final_save_without_any_metric_is_written_with_a_warning(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    state = {"w": np.zeros(2)}
    run = RunCheckpointer(Checkpoint(state=state), tmp_path / "run", interval=10, keep_best=("loss", "min"))
    with caplog.at_level(logging.WARNING, "opencheckpoint.run"), run:
        for step in range(1, 6):  # no scheduled save yet, and no metric passed
            state["w"] += 1
            run.save(step)
    assert run.last_saved_step == 5
    assert "no finite 'loss'" in caplog.text
    rotation = Rotation(tmp_path / "run", keep_best=("loss", "min"))
    assert [e.step for e in rotation.entries()] == [5] and rotation.best() is None
    with pytest.raises(ValueError, match="finite number under 'loss'"):  # a scheduled save still needs it
        run.save(20)


def test_finish_uses_the_latest_metadata_passed_to_save(tmp_path: Path) -> None:
    run = RunCheckpointer(Checkpoint(state={"w": np.zeros(1)}), tmp_path / "run", interval=10)
    run.save(9, metadata={"loss": 0.5, "epoch": 2})
    run.save(10, metadata={"loss": 0.25})
    run.save(11)  # no metadata: the latest given stays
    path = run.finish()
    assert path is not None and manifest(path)["metadata"] | {"opencheckpoint.rotation": None} == {
        "loss": 0.25, "step": 11, "opencheckpoint.rotation": None}
    assert run.finish() is None  # step 11 is saved already
