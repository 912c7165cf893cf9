"""What a rotation owns and how it shares its folder (spec R-PUB-19): a checkpoint is its own only if the
directory's rotation id and the checkpoint's own name are in its mark; verification failures outlive the
process that found them; an old copy left by a kill is that step's checkpoint; every checkpoint failing is an
error, not a fresh start; two processes rotating one folder take turns and never lose what the other returned."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from opencheckpoint import Checkpoint, CheckpointError, UnsupportedVersion, read_component
from opencheckpoint.container import debris
from opencheckpoint.run import Rotation, RunCheckpointer
from opencheckpoint.run.rotation_state import STATE_NAME, read_state


def test_checkpoints_moved_in_or_copied_under_another_name_are_never_pruned(tmp_path: Path) -> None:
    ckpt = Checkpoint(w={"a": np.arange(4.0)})
    run_a, run_b = tmp_path / "runA", tmp_path / "runB"
    for step in (100, 500):
        Rotation(run_a, keep_last=3).save(ckpt, step)
    run_b.mkdir()
    moved = run_b / "checkpoint-000000000500"
    shutil.move(run_a / moved.name, moved)  # a warm start from another run (another rotation id)
    rotation = Rotation(run_b, keep_last=2)
    own = rotation.save(ckpt, 5)
    pinned = run_b / "checkpoint-5"
    shutil.copytree(own, pinned)  # the user pins a copy of one of the rotation's own, under another name
    for step in (501, 502, 503):
        rotation.save(ckpt, step)
    assert moved.exists() and pinned.exists()
    assert not own.exists()  # the rotation's own checkpoint is still pruned
    assert {e.path.name for e in rotation.entries() if e.owned} == {"checkpoint-000000000502",
                                                                    "checkpoint-000000000503"}


def test_every_checkpoint_unreadable_is_an_error_not_a_fresh_start(tmp_path: Path) -> None:
    state = {"w": np.zeros(3)}
    run = RunCheckpointer(Checkpoint(state=state), tmp_path, interval=10)
    for step in (10, 20):
        run.save(step)
    for step in (10, 20):
        manifest = tmp_path / f"checkpoint-{step:012d}" / "manifest.json"
        manifest.write_text(manifest.read_text().replace('"format_version": 1', '"format_version": 2'))
    before = {p.name: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(UnsupportedVersion) as caught:
        RunCheckpointer(Checkpoint(state=state), tmp_path, interval=10).restore()
    assert "checkpoint-000000000020" in str(caught.value) or "format_version 2" in caught.value.message
    assert {p.name: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    # An empty folder of a checkpoint's name holds nothing: that is still "nothing to resume".
    assert RunCheckpointer(Checkpoint(state=state), tmp_path / "fresh", interval=10).restore() is None
    (tmp_path / "fresh" / "checkpoint-000000000001").mkdir(parents=True)
    assert RunCheckpointer(Checkpoint(state=state), tmp_path / "fresh", interval=10).restore() is None


def test_a_failure_found_at_resume_is_remembered_when_a_later_process_prunes_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = {"w": np.zeros(3)}
    run = RunCheckpointer(Checkpoint(state=state), tmp_path, interval=1, keep_last=2)
    for step in (10, 20, 30):
        run.save(step)
    data = tmp_path / "checkpoint-000000000030" / "components" / "state" / "data.bin"
    raw = bytearray(data.read_bytes())
    raw[0] ^= 1
    data.write_bytes(bytes(raw))
    resumed = RunCheckpointer(Checkpoint(state=state), tmp_path, interval=1, keep_last=2)
    assert resumed.restore() == 20
    assert "crc32c" in read_state(tmp_path).failed["checkpoint-000000000030"]
    resumed.save(21)
    # A new process (a new object: nothing in memory) prunes the corrupt checkpoint: a warning says so.
    later = RunCheckpointer(Checkpoint(state=state), tmp_path, interval=1, keep_last=2)
    assert later.restore() == 21
    with caplog.at_level(logging.INFO, logger="opencheckpoint"):
        later.save(22)
    assert not (tmp_path / "checkpoint-000000000030").exists()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("pruned" in m and "checkpoint-000000000030" in m and "crc32c" in m for m in warnings), warnings
    assert read_state(tmp_path).failed == {}


def test_a_checkpoint_only_at_its_old_copy_is_resumed_and_never_pruned(tmp_path: Path) -> None:
    """A replacement killed between its two renames (no RENAME_EXCHANGE) leaves step 30 only at
    ``.NAME.oc-old-*``: resume reads it (R-PUB-13), and later saves never delete that only copy."""
    state = {"w": np.zeros(3)}
    run = RunCheckpointer(Checkpoint(state=state), tmp_path, interval=1, keep_last=1)
    for step in (10, 20, 30):
        state["w"][:] = step
        run.save(step, force=True)
    name = tmp_path / "checkpoint-000000000030"
    os.rename(name, tmp_path / f".{name.name}.oc-old-{2**22 + 9}-{debris.machine_token()}12345678{'ab' * 6}")
    state["w"][:] = -1
    resumed = RunCheckpointer(Checkpoint(state=state), tmp_path, interval=1, keep_last=1)
    assert resumed.restore() == 30 and state["w"].tolist() == [30.0] * 3
    resumed.save(31)
    assert read_component(name, "state")["w"].tolist() == [30.0] * 3  # still served from the old copy


_WRITER = r"""
import os, sys
import numpy as np
from opencheckpoint import Checkpoint
from opencheckpoint.run import Rotation
directory, who, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rotation = Rotation(directory, keep_last=1)
ckpt = Checkpoint(w={"a": np.zeros(1000, np.float32)})
for i in range(count):
    path = rotation.save(ckpt, 2 * i + who)
    if not os.path.exists(path):
        print("vanished", path, flush=True)
if count == 1:
    print("saved", flush=True)
    sys.stdin.readline()  # stay alive until told to end
print("done", flush=True)
"""


def test_two_processes_rotating_one_folder_never_lose_what_the_other_returned(tmp_path: Path) -> None:
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path), str(who), "12"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for who in (0, 1)]
    outputs = [w.communicate(timeout=120) for w in writers]
    for writer, (out, err) in zip(writers, outputs, strict=True):
        assert writer.returncode == 0, err[-2000:]
        assert out.strip() == "done", out
    assert len([n for n in os.listdir(tmp_path) if n.startswith("checkpoint-")]) >= 1


def test_the_newest_checkpoint_of_a_writer_that_still_runs_is_kept(tmp_path: Path) -> None:
    other = subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path), "1", "1"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "saved"
        theirs = tmp_path / "checkpoint-000000000001"
        rotation = Rotation(tmp_path, keep_last=1)
        rotation.save(Checkpoint(w=[1]), 2)
        assert theirs.exists()  # its writer runs: Rotation.save returned this path to it
    finally:
        other.communicate("\n", timeout=60)
    rotation.save(Checkpoint(w=[1]), 4)
    assert not theirs.exists()  # its writer has ended: an ordinary old checkpoint of the rotation
    assert sorted(n for n in os.listdir(tmp_path) if n != STATE_NAME) == ["checkpoint-000000000004"]


def test_a_file_system_failure_in_a_rotation_save_is_a_checkpoint_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("mine")
    with pytest.raises(CheckpointError) as caught:
        Rotation(tmp_path / "file" / "run").save(Checkpoint(w=[1]), 1)
    assert caught.value.file is not None and "file" in caught.value.file
    assert json.dumps(sorted(os.listdir(tmp_path))) == '["file"]'


_SUSPENDED = r"""
import sys, time
from opencheckpoint import Checkpoint
from opencheckpoint.container import publish
from opencheckpoint.run import Rotation

def block(operation):
    if operation == "write-manifest":
        print("writing", flush=True)
        time.sleep(600)  # a writer suspended mid-write (SIGSTOP, a scheduler's suspend)

publish.FAULT_HOOK = block
Rotation(sys.argv[1], keep_last=1).save(Checkpoint(w=[1]), 1)
"""


def test_a_writer_suspended_mid_write_does_not_block_another(tmp_path: Path) -> None:
    frozen = subprocess.Popen([sys.executable, "-c", _SUSPENDED, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert frozen.stdout is not None and frozen.stdout.readline().strip() == "writing"
        other = subprocess.run([sys.executable, "-c", _WRITER, str(tmp_path), "0", "2"], capture_output=True,
                               text=True, timeout=120)
        assert other.returncode == 0 and other.stdout.strip() == "done", other.stderr[-2000:]
        assert (tmp_path / "checkpoint-000000000002").exists()
        assert any(".oc-staging-" in n for n in os.listdir(tmp_path))  # the frozen writer's work is left alone
    finally:
        frozen.kill()
        frozen.wait()
