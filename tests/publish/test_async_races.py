"""Async saves against the ways a program can trip them: a fork with a save in flight, one target spelled
two ways, a progress callback that waits for its own save or starts another to its target, the manifest's
``created_at`` of a save that waited, and ``max_pending_bytes`` values that are not a positive int."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from write_hold import hold_writes, reset_fault_hook  # noqa: F401  (an autouse fixture)

from opencheckpoint import Checkpoint, read_component
from opencheckpoint.write import async_save as async_module
from opencheckpoint.write.async_save import target_key


def _python(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], capture_output=True, text=True,
                          timeout=60)


def test_a_forked_child_exits_without_waiting_for_the_parents_save(tmp_path: Path) -> None:
    result = _python("""
        import os, sys, time
        import numpy as np
        from opencheckpoint import Checkpoint
        handle = Checkpoint(s={"w": np.ones(1000)}).save_async(sys.argv[1], progress=lambda d, t: time.sleep(0.3))
        pid = os.fork()
        if pid == 0:
            try:
                handle.wait()
            except RuntimeError as exc:
                print("child:", exc, flush=True)
            sys.exit(0)  # a normal exit: the exit hook must not wait for a thread the child does not have
        for _ in range(200):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            print("child hung", flush=True)
        print("parent:", handle.result(30).name, os.waitstatus_to_exitcode(status) if done else None)
    """, str(tmp_path / "c"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("child:") and "forked child" in lines[0] and f"process {os.getpid()}" not in lines[0]
    assert lines[1] == "parent: c 0"


def test_one_target_spelled_through_a_symlinked_parent_is_one_target(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    (tmp_path / "link").symlink_to(real)
    assert target_key(tmp_path / "link" / "c") == target_key(real / "c") == target_key(real / "sub" / ".." / "c")
    reached, release = hold_writes("old")
    first = Checkpoint(old=np.zeros(3)).save_async(real / "c")
    assert reached.wait(30)
    later = threading.Thread(target=lambda: Checkpoint(new=np.ones(3)).save(tmp_path / "link" / "c"))
    later.start()
    later.join(2)  # before the fix the later save published here, and the held older one then replaced it
    release.set()
    first.result(30)
    later.join(30)
    assert read_component(real / "c", "new").tolist() == [1.0, 1.0, 1.0]


def test_a_progress_callback_cannot_wait_for_its_own_save_or_start_one_to_its_target(tmp_path: Path) -> None:
    result = _python("""
        import sys, threading
        import numpy as np
        from opencheckpoint import Checkpoint
        ckpt, handles, ready = Checkpoint(s={"w": np.zeros(10)}), {}, threading.Event()
        def waits(done, total):
            ready.wait(30)  # the handle is known once save_async returned
            handles["wait"].wait()
        def saves(done, total):
            ckpt.save_async(sys.argv[1] + "/s")
        for name, callback in (("wait", waits), ("save", saves)):
            handles[name] = ckpt.save_async(sys.argv[1] + "/" + name[0], progress=callback)
            ready.set()
            try:
                handles[name].wait()
            except RuntimeError as exc:
                print(name, exc)
    """, str(tmp_path))
    assert result.returncode == 0, result.stderr
    wait, save = result.stdout.splitlines()
    assert wait.startswith("wait ") and "cannot wait for itself" in wait
    assert save.startswith("save ") and "cannot start from the progress callback" in save


def test_created_at_is_the_snapshot_time_after_waiting_for_the_earlier_save(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    waiting = threading.Event()

    class Observed(threading.Condition):
        def wait(self, timeout: float | None = None) -> bool:
            waiting.set()  # the later save waits for the earlier one to the same target
            return super().wait(timeout)

    monkeypatch.setattr(async_module, "_lock", Observed())
    reached, release = hold_writes("w")
    first = Checkpoint(w=np.zeros(3)).save_async(tmp_path / "c")
    assert reached.wait(30)
    handles: list[Any] = []
    later = threading.Thread(target=lambda: handles.append(Checkpoint(w=np.ones(3)).save_async(tmp_path / "c")))
    later.start()
    assert waiting.wait(30)
    released_at = datetime.now(UTC)
    release.set()
    first.result(30)
    later.join(30)
    handles[0].result(30)
    created = json.loads((tmp_path / "c" / "manifest.json").read_text())["created_at"]
    assert datetime.fromisoformat(created.replace("Z", "+00:00")) >= released_at


@pytest.mark.parametrize(("cap", "error"), [(0, ValueError), (-1, ValueError), (1.5, TypeError),
                                            ("1024", TypeError), (True, TypeError)])
def test_max_pending_bytes_must_be_a_positive_int(tmp_path: Path, cap: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="max_pending_bytes"):
        Checkpoint(w=np.zeros(3)).save_async(tmp_path / "c", max_pending_bytes=cap)
    assert not os.path.lexists(tmp_path / "c")
