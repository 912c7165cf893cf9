"""``RunCheckpointer(async_save=True).save`` to S3 never waits for the network (issue 22 item 2): the rotation's
bookkeeping (its id, the listing that numbers the save, the step's old checkpoint) runs in the writer thread, so
the caller sends no request whatever ``keep_last`` holds, and every rotation guarantee still holds."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from opencheckpoint import Checkpoint, TargetExists, open_checkpoint, validate
from opencheckpoint.remote import FsPath
from opencheckpoint.run import Rotation, RunCheckpointer
from opencheckpoint.run.rotation_policy import ROTATION_KEY
from opencheckpoint.write import async_save

pytest.importorskip("s3fs")
pytest.importorskip("moto")


class _HeldWriters:
    """Writer threads of async saves wait at their start until :meth:`release`: every request sent before then
    comes from the caller's thread (s3fs sends all of them from its own event loop thread, so the thread a
    botocore event fires in cannot tell whose request it is; holding the writers can)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.gate = threading.Event()
        original: Callable[..., None] = async_save._run

        def held(*args: Any) -> None:
            self.gate.wait(timeout=30)  # bounded: a test that forgets to release still ends
            original(*args)

        monkeypatch.setattr(async_save, "_run", held)

    def release(self) -> None:
        self.gate.set()

    def hold(self) -> None:
        self.gate.clear()


class _Sent:
    """Every S3 request ``fs`` sends (botocore's ``before-send``), counted while :attr:`on`."""

    def __init__(self, fs: Any) -> None:
        self.on = False
        self.operations: list[str] = []
        fs.connect()
        fs.s3.meta.events.register("before-send.s3", self._sent)

    def _sent(self, event_name: str = "", **_: Any) -> None:
        if self.on:
            self.operations.append(event_name.rsplit(".", 1)[-1])


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[_HeldWriters]:
    writers = _HeldWriters(monkeypatch)
    yield writers
    writers.release()


def _caller_requests(run: RunCheckpointer, step: int, sent: _Sent, held: _HeldWriters) -> list[str]:
    """The requests the caller's ``run.save(step)`` sends itself, then its save published."""
    held.hold()
    sent.operations.clear()
    sent.on = True
    try:
        run.save(step)
    finally:
        sent.on = False
        held.release()
    run.wait()
    return list(sent.operations)


@pytest.mark.parametrize("keep_last", [1, 6])
def test_an_async_run_save_to_s3_sends_no_request_from_the_callers_thread(
    s3: Any, held: _HeldWriters, keep_last: int
) -> None:
    directory = FsPath(s3, f"{s3.test_bucket}/run")
    run = RunCheckpointer(Checkpoint(model={"w": np.zeros(1000, np.float32)}), directory, interval=1,
                          keep_last=keep_last, async_save=True)
    sent = _Sent(s3)
    caller = {step: _caller_requests(run, step, sent, held) for step in range(1, 6)}
    assert caller == {step: [] for step in range(1, 6)}
    kept = [p.name for p in Rotation(directory).checkpoints()]
    assert kept == [f"checkpoint-{step:012d}" for step in range(max(1, 6 - keep_last), 6)]


def test_deferred_bookkeeping_numbers_saves_in_order_and_leaves_foreign_checkpoints(s3: Any) -> None:
    directory = FsPath(s3, f"{s3.test_bucket}/run")
    foreign = Checkpoint(model={"w": np.ones(3)}).save(directory / "checkpoint-000000000000")  # not the rotation's
    run = RunCheckpointer(Checkpoint(model={"w": np.zeros(10)}), directory, interval=1, keep_last=2,
                          async_save=True)
    for step in (1, 2, 3, 4):
        run.save(step)
    run.wait()
    entries = Rotation(directory).entries()
    assert [(e.path.name, e.owned) for e in entries] == [
        ("checkpoint-000000000000", False), ("checkpoint-000000000003", True), ("checkpoint-000000000004", True)]
    assert [e.sequence for e in entries if e.owned] == [3, 4] and validate(foreign).ok
    with open_checkpoint(directory / "checkpoint-000000000004") as reader:  # the writer thread's mark
        assert reader.manifest["metadata"][ROTATION_KEY]["step"] == 4


def test_an_async_save_of_a_step_with_a_valid_checkpoint_fails_on_wait_and_keeps_it(s3: Any) -> None:
    directory = FsPath(s3, f"{s3.test_bucket}/run")
    rotation = Rotation(directory, keep_last=3)
    first = rotation.save(Checkpoint(model={"w": np.ones(5)}), 1)
    handle = rotation.save_async(Checkpoint(model={"w": np.zeros(5)}), 1)  # sends nothing, so cannot refuse yet
    with pytest.raises(TargetExists, match="already has a valid checkpoint"):
        handle.wait(timeout=60)
    assert validate(first).ok and Rotation(directory).checkpoints() == [first]
