"""StopOnSignal: the first signal requests a stop, the second interrupts, handlers come back."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from opencheckpoint.run.checkpointer import StopOnSignal


def test_first_signal_requests_stop_second_interrupts() -> None:
    seen: list[str] = []
    with StopOnSignal(on_request=seen.append) as stop:
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested and stop.signal_name == "SIGTERM" and seen == ["SIGTERM"]
        with pytest.raises(KeyboardInterrupt, match="second"):
            os.kill(os.getpid(), signal.SIGINT)


def test_sigint_is_handled_too() -> None:
    with StopOnSignal() as stop:
        os.kill(os.getpid(), signal.SIGINT)  # without the handler this raises KeyboardInterrupt
    assert stop.signal_name == "SIGINT"


def test_previous_handlers_restored() -> None:
    calls: list[int] = []

    def previous(number: int, frame: object) -> None:
        calls.append(number)

    old = signal.signal(signal.SIGUSR1, previous)
    try:
        with StopOnSignal(signals=(signal.SIGUSR1,)) as stop:
            assert signal.getsignal(signal.SIGUSR1) != previous
            os.kill(os.getpid(), signal.SIGUSR1)
        assert stop.requested and calls == []
        assert signal.getsignal(signal.SIGUSR1) == previous
        os.kill(os.getpid(), signal.SIGUSR1)
        assert calls == [signal.SIGUSR1]
    finally:
        signal.signal(signal.SIGUSR1, old)


def test_handlers_restored_after_an_exception() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RuntimeError), StopOnSignal():
        raise RuntimeError("boom")
    assert signal.getsignal(signal.SIGTERM) == before


def test_outside_main_thread_installs_nothing() -> None:
    before = signal.getsignal(signal.SIGTERM)
    result: list[object] = []

    def worker() -> None:
        with StopOnSignal() as stop:
            result.append(signal.getsignal(signal.SIGTERM))
            result.append(stop.requested)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert result == [before, False]
