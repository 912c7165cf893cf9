"""``remote/ranges.py``: bounded pieces, fetched ahead in order, at most ``IN_FLIGHT`` ahead, errors at their turn."""

from __future__ import annotations

import threading
import time

import pytest

from opencheckpoint.format.errors import CheckpointError
from opencheckpoint.remote import ranges


def test_pieces_cover_the_range_in_bounded_consecutive_parts() -> None:
    assert list(ranges.pieces(5, 5)) == []
    got = list(ranges.pieces(3, 50, limit=16))
    assert got == [(3, 19), (19, 35), (35, 50)]
    assert all(end - start <= 16 for start, end in got)


def test_in_order_keeps_the_order_and_at_most_in_flight_plus_one_fetches_running() -> None:
    lock = threading.Lock()
    state = {"now": 0, "most": 0}

    def fetch(start: int, end: int) -> bytes:
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        time.sleep(0.02 * ((start // 4) % 3))  # finish out of order
        with lock:
            state["now"] -= 1
        return bytes([start // 4]) * (end - start)

    out = b"".join(ranges.in_order(fetch, ranges.pieces(0, 80, limit=4), ahead=3))
    assert out == b"".join(bytes([i]) * 4 for i in range(20))
    assert 2 <= state["most"] <= 4  # concurrent, and never more than ``ahead`` + the one awaited


def test_a_failed_piece_raises_at_its_turn_after_the_pieces_before_it() -> None:
    def fetch(start: int, end: int) -> bytes:
        if start == 8:
            raise CheckpointError("gone", file="data.bin")
        return b"x" * (end - start)

    seen: list[bytes] = []
    with pytest.raises(CheckpointError, match="gone"):
        for piece in ranges.in_order(fetch, ranges.pieces(0, 40, limit=4)):
            seen.append(piece)
    assert seen == [b"xxxx", b"xxxx"]


def test_fetch_into_fills_a_buffer_from_several_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ranges, "RANGE_BYTES", 8)
    calls: list[tuple[int, int]] = []

    def fetch(start: int, end: int) -> bytes:
        calls.append((start, end))
        return bytes(range(start, end))

    out = bytearray(30)
    ranges.fetch_into(fetch, memoryview(out), 100)
    assert bytes(out) == bytes(range(100, 130))
    assert sorted(calls) == [(100, 108), (108, 116), (116, 124), (124, 130)]
