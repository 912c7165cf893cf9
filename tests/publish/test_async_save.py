"""``Checkpoint.save_async``: the snapshot taken before it returns, errors handed to ``wait``/``result``,
one save in flight per target, the memory cap, and what a process exit does to a save in flight."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from write_hold import hold_writes, reset_fault_hook  # noqa: F401  (an autouse fixture)

from opencheckpoint import Checkpoint, LimitExceeded, SaveHandle, TargetExists, read_component, validate
from opencheckpoint.container import publish


class Counted:
    """A stateful object whose ``state_dict()`` calls are counted (when its state was captured)."""

    def __init__(self) -> None:
        self.value = np.zeros(4, dtype=np.float32)
        self.calls = 0

    def state_dict(self) -> dict[str, Any]:
        self.calls += 1
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value[...] = state["value"]


def test_snapshot_is_taken_before_save_async_returns(tmp_path: Path) -> None:
    weights = {"w": np.arange(1000, dtype=np.float32), "b": np.ones(3)}
    config = {"lr": 0.1}
    reached, release = hold_writes("weights")
    handle = Checkpoint(weights=weights, config=config).save_async(tmp_path / "ckpt", metadata={"step": 1})
    assert reached.wait(30) and not handle.done()
    weights["w"][:] = -1  # the training loop goes on while the save is in flight
    weights["b"] = np.zeros(3)
    config["lr"] = 5.0
    release.set()
    path = handle.result()
    assert handle.done() and path == (tmp_path / "ckpt").absolute()
    assert read_component(path, "weights")["w"].tolist() == list(range(1000))
    assert read_component(path, "weights")["b"].tolist() == [1.0, 1.0, 1.0]
    assert read_component(path, "config") == {"lr": 0.1}
    assert validate(path).ok



def test_the_writer_thread_starts_writing_only_once_save_async_has_the_interpreter_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``Thread.start`` returns once the writer runs; a writer that went straight on would hold the GIL and
    keep ``save_async`` (the training loop) waiting for it, up to the switch interval, on every save."""
    from opencheckpoint.write import async_save

    start_returned = threading.Event()
    seen: list[bool] = []

    class Watched(threading.Thread):
        def start(self) -> None:
            super().start()
            start_returned.set()

    real_run = async_save._run

    def spy(*args: Any) -> None:
        seen.append(start_returned.is_set())
        real_run(*args)

    monkeypatch.setattr(threading, "Thread", Watched)  # the writer is made by async_save through threading.Thread
    monkeypatch.setattr(async_save, "_run", spy)
    for step in range(5):
        start_returned.clear()
        Checkpoint(weights={"w": np.full(1000, step, dtype=np.float32)}).save_async(tmp_path / "c").result()
    assert seen == [True] * 5
    assert read_component(tmp_path / "c", "weights")["w"].tolist() == [4.0] * 1000

@pytest.mark.torch
def test_torch_module_state_is_copied_at_call_time(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(3, 2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    reached, release = hold_writes("model")
    handle = Checkpoint(model=model).save_async(tmp_path / "m")
    assert reached.wait(30)
    with torch.no_grad():
        model.weight.fill_(9.0)  # an optimizer step in place
    release.set()
    fresh = torch.nn.Linear(3, 2)
    Checkpoint(model=fresh).load(handle.result())
    assert all(torch.equal(fresh.state_dict()[k], before[k]) for k in before)


def test_background_error_is_raised_by_wait_and_result(tmp_path: Path) -> None:
    occupied = tmp_path / "not-a-checkpoint"
    occupied.write_text("user data")
    handle = Checkpoint(value=[1]).save_async(occupied)
    with pytest.raises(TargetExists):
        handle.wait()
    with pytest.raises(TargetExists):
        handle.result()
    assert handle.done() and occupied.read_text() == "user data"


def test_wait_with_timeout_reports_an_unfinished_save(tmp_path: Path) -> None:
    reached, release = hold_writes("value")
    handle = Checkpoint(value=np.ones(2)).save_async(tmp_path / "c")
    assert reached.wait(30)
    assert handle.wait(timeout=0) is False
    with pytest.raises(TimeoutError):
        handle.result(timeout=0)
    release.set()
    assert handle.wait() is True


def test_second_save_to_the_same_target_waits_for_the_first(tmp_path: Path) -> None:
    counted = Counted()
    checkpoint = Checkpoint(state=counted)
    reached, release = hold_writes("state")
    first = checkpoint.save_async(tmp_path / "c", metadata={"n": 1})
    assert reached.wait(30) and counted.calls == 1
    publish.FAULT_HOOK = None  # the second save is not held
    second: list[SaveHandle] = []
    starter = threading.Thread(target=lambda: second.append(checkpoint.save_async(tmp_path / "c", metadata={"n": 2})))
    starter.start()
    starter.join(0.3)
    # Still waiting for the first save: the second has not even taken its snapshot.
    assert starter.is_alive() and counted.calls == 1 and not first.done()
    release.set()
    starter.join(30)
    assert first.result() == second[0].result()
    assert counted.calls == 2
    from opencheckpoint import open_checkpoint

    with open_checkpoint(tmp_path / "c") as reader:
        assert reader.manifest["metadata"] == {"n": 2}


def test_synchronous_save_waits_for_an_async_save_to_the_same_target(tmp_path: Path) -> None:
    reached, release = hold_writes("value")
    handle = Checkpoint(value=np.zeros(2)).save_async(tmp_path / "c", metadata={"n": 1})
    assert reached.wait(30)
    publish.FAULT_HOOK = None
    saver = threading.Thread(target=lambda: Checkpoint(value=np.ones(2)).save(tmp_path / "c", metadata={"n": 2}))
    saver.start()
    saver.join(0.3)
    assert saver.is_alive() and not handle.done()
    release.set()
    saver.join(30)
    handle.wait()
    assert read_component(tmp_path / "c", "value").tolist() == [1.0, 1.0]


def test_a_snapshot_over_the_cap_raises_before_anything_is_copied_or_written(tmp_path: Path) -> None:
    state = {"w": np.zeros(1024, dtype=np.uint8)}
    with pytest.raises(LimitExceeded, match="max_pending_bytes=1000") as info:
        Checkpoint(state=state).save_async(tmp_path / "big", max_pending_bytes=1000)
    assert info.value.field == "max_pending_bytes" and str(tmp_path / "big") in str(info.value)
    assert not (tmp_path / "big").exists()
    # Within the cap it is saved.
    assert Checkpoint(state=state).save_async(tmp_path / "big", max_pending_bytes=1024).result().is_dir()


def test_pending_bytes_over_the_cap_make_the_next_save_wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from opencheckpoint.write import async_save as async_module

    waiting = threading.Event()  # set when the second save waits on the saves' condition (not after a guessed time)

    class Watched(threading.Condition):
        def wait(self, timeout: float | None = None) -> bool:
            if threading.current_thread() is starter:
                waiting.set()
            return super().wait(timeout)

    monkeypatch.setattr(async_module, "_lock", Watched())
    reached, release = hold_writes("a")
    first = Checkpoint(a=np.zeros(1024, dtype=np.uint8)).save_async(tmp_path / "one", max_pending_bytes=1500)
    assert reached.wait(30)
    counted = Counted()
    counted.value = np.zeros(1000, dtype=np.uint8)  # 1024 + 1000 pending bytes would exceed the cap
    second: list[SaveHandle] = []
    starter = threading.Thread(target=lambda: second.append(
        Checkpoint(b=counted).save_async(tmp_path / "two", max_pending_bytes=1500)))
    starter.start()
    assert waiting.wait(30)
    # The snapshot was planned (state_dict ran) but its copy waits for the first save to free its bytes.
    assert starter.is_alive() and not first.done() and counted.calls == 1
    release.set()
    starter.join(30)
    assert first.result().is_dir() and second[0].result().is_dir()


def test_dump_load_objects_are_dumped_at_call_time(tmp_path: Path) -> None:
    class Notes:
        def __init__(self) -> None:
            self.text = "first"

        def dump(self, directory: Path) -> None:
            (Path(directory) / "notes.txt").write_text(self.text)

        def load(self, directory: Path) -> None:
            self.text = (Path(directory) / "notes.txt").read_text()

    notes = Notes()
    reached, release = hold_writes("notes")
    handle = Checkpoint(notes=notes).save_async(tmp_path / "c", format="archive")
    assert reached.wait(30)
    notes.text = "changed"
    release.set()
    Checkpoint(notes=notes).load(handle.result())
    assert notes.text == "first"


def test_unsupported_values_raise_in_the_callers_thread(tmp_path: Path) -> None:
    from opencheckpoint import UnsupportedValue

    with pytest.raises(UnsupportedValue, match="component 'bad'"):
        Checkpoint(bad={"x": object()}).save_async(tmp_path / "c")
    assert not (tmp_path / "c").exists()
    # The target is free again: a later save is not blocked by the failed one.
    assert Checkpoint(good=[1]).save_async(tmp_path / "c").result().is_dir()


# -- process exit ----------------------------------------------------------------------------------------

_PRELUDE = """
import sys, time
import numpy as np
from opencheckpoint import Checkpoint
from opencheckpoint.container import publish
target = sys.argv[1]
"""


def _run(script: str, target: Path, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(_PRELUDE) + textwrap.dedent(script), str(target)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def test_normal_exit_finishes_a_save_in_flight(tmp_path: Path) -> None:
    target = tmp_path / "c"
    process = _run("""
        def slow(operation):
            if operation == "write-component:w":
                time.sleep(0.5)  # still writing when the main thread ends
        publish.FAULT_HOOK = slow
        Checkpoint(w=np.arange(10.0)).save_async(target, metadata={"step": 7})
        print("returned", flush=True)
    """, target)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert out.strip() == "returned"
    assert validate(target).ok
    assert read_component(target, "w").tolist() == list(np.arange(10.0))


@pytest.mark.parametrize(("ending", "status"), [("pass", 0), ("sys.exit(3)", 3), ("raise RuntimeError('x')", 1)])
def test_any_normal_exit_finishes_a_save_of_a_large_array_in_flight(tmp_path: Path, ending: str,
                                                                    status: int) -> None:
    # 1 MiB: the tree writer checksums it in a thread pool, which concurrent.futures stops at exit.
    target = tmp_path / "c"
    process = _run(f"""
        Checkpoint(w=np.zeros(1 << 17)).save(target, metadata={{"step": 1}})
        Checkpoint(w=np.ones(1 << 17)).save_async(target, metadata={{"step": 2}},
                                                  progress=lambda done, total: time.sleep(0.2))
        {ending}
    """, target)
    _, err = process.communicate(timeout=60)
    assert process.returncode == status, err
    assert "failed" not in err
    report = validate(target)
    assert report.ok and report.manifest["metadata"] == {"step": 2}
    assert read_component(target, "w").sum() == 1 << 17


def test_the_tree_writer_checksums_inline_when_its_pool_refuses_work(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from concurrent.futures import ThreadPoolExecutor

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("cannot schedule new futures after interpreter shutdown")

    monkeypatch.setattr(ThreadPoolExecutor, "submit", refuse)
    values = np.arange(1 << 17, dtype=np.float64)
    path = Checkpoint(w=values).save_async(tmp_path / "c").result()
    assert validate(path).ok and np.array_equal(read_component(path, "w"), values)


def test_sigkill_with_a_save_in_flight_leaves_the_previous_checkpoint_whole(tmp_path: Path) -> None:
    target = tmp_path / "c"
    process = _run("""
        Checkpoint(w=np.zeros(3)).save(target, metadata={"step": 1})
        def stall(operation):
            if operation == "write-component:w":
                print("in flight", flush=True)
                time.sleep(60)
        publish.FAULT_HOOK = stall
        Checkpoint(w=np.ones(3)).save_async(target, metadata={"step": 2})
        time.sleep(60)
    """, target)
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "in flight"
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(30)
    assert process.returncode == -signal.SIGKILL
    report = validate(target)
    assert report.ok and report.manifest["metadata"] == {"step": 1}
    assert read_component(target, "w").tolist() == [0.0, 0.0, 0.0]


def test_a_failed_save_nobody_waited_for_is_logged_at_exit(tmp_path: Path) -> None:
    target = tmp_path / "occupied"
    target.write_text("user data")
    process = _run("""
        Checkpoint(w=np.zeros(3)).save_async(target)
    """, target)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0
    assert "async save to" in err and "nobody waited" in err and "TargetExists" in err
    assert target.read_text() == "user data"


def test_a_failed_save_that_was_waited_for_is_not_logged_again(tmp_path: Path) -> None:
    target = tmp_path / "occupied"
    target.write_text("user data")
    process = _run("""
        handle = Checkpoint(w=np.zeros(3)).save_async(target)
        try:
            handle.wait()
        except Exception as exc:
            print(type(exc).__name__)
    """, target)
    out, err = process.communicate(timeout=60)
    assert out.strip() == "TargetExists" and "nobody waited" not in err


@pytest.mark.jax
def test_jax_arrays_are_copied_to_host_at_call_time(tmp_path: Path) -> None:
    jnp = pytest.importorskip("jax.numpy")
    params = {"w": jnp.arange(6, dtype=jnp.float32)}
    reached, release = hold_writes("params")
    handle = Checkpoint(params=params).save_async(tmp_path / "j")
    assert reached.wait(30)
    params["w"].delete()  # a donated or freed device buffer: the snapshot does not need it any more
    release.set()
    assert read_component(handle.result(), "params")["w"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
