"""No debris left behind (spec R-PUB-17, R-PUB-18): what killed saves leave (``.NAME.oc-staging-*``,
``.NAME.oc-old-*``, ``.NAME.oc-delete-*``) is removed by the next save into the directory and by rotation
pruning once its writer is gone, and nothing else is ever touched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from opencheckpoint import Checkpoint, read_component, validate
from opencheckpoint.container import debris, publish
from opencheckpoint.run import Rotation
from opencheckpoint.run.rotation_state import STATE_NAME


@pytest.fixture(autouse=True)
def _reset_hooks() -> Iterator[None]:
    yield
    publish.FAULT_HOOK = None
    publish.USE_EXCHANGE = True


def hidden(directory: Path) -> list[str]:
    """Hidden entries, without a rotation's own state file (not debris)."""
    return sorted(n for n in os.listdir(directory) if n.startswith(".") and n != STATE_NAME)


def token(pid: int, *, machine: str | None = None, start: str | None = None) -> str:
    """A writer token as the library writes it, for process ``pid`` of this (or another) machine."""
    return (f"{pid}-{machine or debris.machine_token()}{start or debris.process_start(pid) or '0' * 8}"
            f"{'ab' * 6}")


def own_style_entry(path: Path) -> Path:
    """A directory holding what a writer of ours writes (a partial checkpoint)."""
    (path / "components" / "model").mkdir(parents=True)
    (path / "components" / "model" / "data.bin").write_bytes(b"\0" * 64)
    return path


def age(path: Path, seconds: float) -> None:
    """Make ``path`` and everything in it look unmodified for ``seconds``."""
    then = time.time() - seconds
    for directory, dirs, files in os.walk(path):
        for name in dirs + files:
            os.utime(Path(directory) / name, (then, then), follow_symlinks=False)
    os.utime(path, (then, then), follow_symlinks=False)


# A writer that blocks at a chosen filesystem step, says so, and waits to be SIGKILLed there.
_BLOCKING_WRITER = """
import os, sys, time
import numpy as np
from opencheckpoint import Checkpoint
from opencheckpoint.container import publish
from opencheckpoint.run import Rotation

directory, step, form, stop_at = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

def block(operation):
    if operation == stop_at and (stop_at != "remove" or any(".oc-delete-" in n for n in os.listdir(directory))):
        print("blocked", operation, flush=True)
        time.sleep(60)

rotation = Rotation(directory, keep_last=1)
publish.FAULT_HOOK = block
rotation.save(Checkpoint(model={"w": np.full(4096, step, np.float32), "step": step}, format=form), step)
print("finished", flush=True)
"""


def kill_while_blocked(directory: Path, step: int, form: str, stop_at: str) -> None:
    """Run a save in a child process and SIGKILL it while it is inside ``stop_at``."""
    child = subprocess.Popen([sys.executable, "-c", _BLOCKING_WRITER, str(directory), str(step), form, stop_at],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().startswith("blocked"), "the writer never reached " + stop_at
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_killed_saves_leave_debris_that_the_next_save_removes_and_nothing_else(tmp_path: Path) -> None:
    run = tmp_path / "run"
    rotation = Rotation(run, keep_last=1)
    # Step 1 by a writer that has ended: pruning keeps the newest checkpoint of a writer that still runs.
    subprocess.run([sys.executable, "-c", _BLOCKING_WRITER, str(run), "1", "directory", "never"], check=True,
                   stdout=subprocess.DEVNULL, timeout=60)
    gone = token(2**22 + 1, start="12345678")  # above the default pid_max: no process has that pid
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        # Things that look like debris but are not ours to delete, and things that plainly are not:
        foreign = {
            # a live writer on this machine (pid and start time of a running process)
            own_style_entry(run / f".checkpoint-000000000009.oc-staging-{token(sleeper.pid)}"),
            # a user's folder that happens to carry our naming, its "writer" long gone
            run / f".notes.oc-staging-{gone}",
            # the only copy of a checkpoint while its name is missing (R-PUB-13)
            own_style_entry(run / f".ckpt.oc-old-{gone}"),
            # a writer on another machine, active within the hour
            own_style_entry(run / f".checkpoint-000000000010.oc-staging-{token(7, machine='0badc0de')}"),
            run / "notes.txt",
            run / "checkpoint-5",  # a hand-made look-alike (not a checkpoint at all)
        }
        (run / f".notes.oc-staging-{gone}").mkdir()
        (run / f".notes.oc-staging-{gone}" / "thesis.tex").write_text("mine")
        age(run / f".notes.oc-staging-{gone}", 2 * 3600)
        (run / "notes.txt").write_text("mine")
        (run / "checkpoint-5").mkdir()
        # debris of another machine, untouched for two hours: its writer counts as gone
        stale = own_style_entry(run / f".checkpoint-000000000011.oc-staging-{token(7, machine='0badc0de')}")
        age(stale, 2 * 3600)

        def debris_now() -> list[str]:
            return [n for n in hidden(run) if run / n not in foreign]

        # Three real SIGKILLs: mid-write of a directory checkpoint, mid-packing of an archive, mid-pruning.
        # Each following save removes what the previous kill left.
        kill_while_blocked(run, 2, "directory", "write-manifest")
        assert [n.split(".oc-")[1].split("-")[0] for n in debris_now()] == ["staging"], debris_now()
        assert not stale.exists()
        kill_while_blocked(run, 3, "archive", "fsync-archive")
        left = debris_now()
        # one staging file: the archive form is written in one pass, without a staging directory
        assert len(left) == 1 and ".checkpoint-000000000003.ocp.oc-staging-" in left[0], left
        kill_while_blocked(run, 4, "directory", "remove")
        left = debris_now()
        assert len(left) == 1 and left[0].startswith(".checkpoint-000000000001.oc-delete-"), left

        saved = rotation.save(Checkpoint(model={"step": 5}), 5)
        assert sorted(p.name for p in run.iterdir() if p not in foreign and p.name != STATE_NAME) == [saved.name]
        assert all(os.path.lexists(p) for p in foreign)
        assert (run / f".notes.oc-staging-{gone}" / "thesis.tex").read_text() == "mine"
        assert validate(saved).ok and read_component(saved, "model") == {"step": 5}
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_plain_save_cleans_debris_of_every_name_in_its_directory(tmp_path: Path) -> None:
    dead = 2**22 + 3  # above the default pid_max: no process has it
    left = [own_style_entry(tmp_path / f".a.oc-staging-{token(dead, start='12345678')}"),
            tmp_path / f".b.oc-delete-{token(dead, start='12345678')}",
            own_style_entry(tmp_path / f".c.oc-old-{token(dead, start='12345678')}")]
    left[1].write_bytes(b"PK\x03\x04")  # an archive being deleted
    Checkpoint(model={"step": 1}).save(tmp_path / "c")  # c exists now: its old copy is superseded
    Checkpoint(model={"step": 2}).save(tmp_path / "d")
    assert sorted(os.listdir(tmp_path)) == ["c", "d"]


def test_debris_of_saves_in_progress_in_this_process_is_left_alone(tmp_path: Path) -> None:
    """A save that runs while another is writing (a second thread, a callback) cleans the debris of ended
    writers of every name, and nothing in use."""
    inner: list[Path] = []
    dead = own_style_entry(tmp_path / f".ckpt.oc-staging-{token(2**22 + 4, start='12345678')}")

    def meanwhile(operation: str) -> None:
        if operation == "write-manifest" and not inner:
            inner.append(tmp_path / "other")
            Checkpoint(model={"step": 2}).save(inner[0])  # cleans the dead writer's staging, not ours
            assert not dead.exists()

    publish.FAULT_HOOK = meanwhile
    outer = Checkpoint(model={"w": np.ones(10), "step": 1}).save(tmp_path / "ckpt")
    publish.FAULT_HOOK = None
    assert read_component(outer, "model")["step"] == 1 and read_component(inner[0], "model") == {"step": 2}
    assert sorted(os.listdir(tmp_path)) == ["ckpt", "other"]


def test_a_recycled_pid_does_not_keep_debris_alive(tmp_path: Path) -> None:
    """Same pid, other start time: the process that wrote the debris has ended."""
    mine = debris.process_start(os.getpid())
    if mine is None:
        pytest.skip("no /proc: start times cannot be read here")
    reused = own_style_entry(tmp_path / f".x.oc-staging-{token(os.getpid(), start='%08x' % (int(mine, 16) ^ 1))}")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        other = own_style_entry(
            tmp_path / f".y.oc-staging-{token(sleeper.pid, start='%08x' % (int(token(sleeper.pid)[-20:-12], 16) ^ 1))}")
        Checkpoint(model={"step": 1}).save(tmp_path / "z")
        assert not reused.exists() and not other.exists()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_look_alikes_of_debris_are_never_deleted(tmp_path: Path) -> None:
    """Only names that parse as a writer token (or R-PUB-1's PID-RANDOM) and hold exactly what a writer writes."""
    dead = token(2**22 + 5, start="12345678")
    backup = tmp_path / ".notes.txt.oc-old-2024"  # the user's own backup naming
    backup.write_text("my old notes, only copy")
    webapp = tmp_path / ".webapp.oc-staging-draft"
    (webapp / "components" / "ui").mkdir(parents=True)
    (webapp / "manifest.json").write_text('{"name": "my pwa"}')
    (webapp / "components" / "ui" / "Button.jsx").write_text("export default ...")
    # Writer-token names whose content is not ours: a manifest that does not name the format, a text file.
    pwa = tmp_path / f".site.oc-staging-{dead}"
    (pwa / "components").mkdir(parents=True)
    (pwa / "manifest.json").write_text('{"name": "my pwa"}')
    text = tmp_path / f".draft.oc-delete-{dead}"
    text.write_text("not a zip")
    for path in (backup, webapp, pwa, text):
        age(path, 2 * 3600)
    before = {p: sorted(str(q.relative_to(p)) for q in p.rglob("*")) if p.is_dir() else p.read_text()
              for p in (backup, webapp, pwa, text)}
    Checkpoint(w=np.zeros(3)).save(tmp_path / "ckpt")
    assert {p: sorted(str(q.relative_to(p)) for q in p.rglob("*")) if p.is_dir() else p.read_text()
            for p in (backup, webapp, pwa, text)} == before
    assert debris.parse(backup) is None and debris.parse(webapp) is None


def test_an_old_copy_stays_while_its_name_holds_no_checkpoint(tmp_path: Path) -> None:
    """An empty folder appearing at NAME does not make the old copy (the only copy, R-PUB-13) removable."""
    old = tmp_path / f".ckpt.oc-old-{token(2**22 + 7, start='12345678')}"
    Checkpoint(model={"step": 3}).save(tmp_path / "source")
    os.rename(tmp_path / "source", old)  # a whole checkpoint, moved aside by a writer that died
    (tmp_path / "ckpt").mkdir()  # e.g. a launcher's `mkdir -p`
    Checkpoint(x=np.zeros(1)).save(tmp_path / "unrelated")
    assert read_component(old, "model") == {"step": 3}
