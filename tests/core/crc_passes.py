"""Test helper: make every checksum pass of more than 4 KiB run on the pool and count its pieces."""

from __future__ import annotations

import pytest

from opencheckpoint.read import parallel_crc


def count_parallel_passes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Pieces of 4 KiB, two helpers, every pass parallel; returns the list each pass appends its piece count to."""
    monkeypatch.setattr(parallel_crc, "PIECE_BYTES", 4096)
    monkeypatch.setattr(parallel_crc, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(parallel_crc, "_helper_count", lambda: 2)
    passes: list[int] = []
    run = parallel_crc._Pass.run

    def counting(self: parallel_crc._Pass, helpers: int) -> list[list[int]]:
        passes.append(len(self.pieces))
        return run(self, helpers)

    monkeypatch.setattr(parallel_crc._Pass, "run", counting)
    return passes
