"""``crc32c_many``: the checksum pass shared by the caller and a small pool gives the same CRC-32Cs as one
call per buffer, survives fork and interpreter exit, and is the pass verified views use."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from crc_passes import count_parallel_passes

from opencheckpoint import Checkpoint, IntegrityError, open_checkpoint
from opencheckpoint.format.integrity import crc32c_of
from opencheckpoint.read import parallel_crc
from opencheckpoint.read.parallel_crc import crc32c_many


@pytest.fixture
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every pass of more than one piece goes parallel, pieces of 4 KiB; returns the count of parallel passes."""
    return count_parallel_passes(monkeypatch)


def _buffers() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    sizes = [0, 1, 4095, 4096, 4097, 3 * 4096 + 5, 100, 0, 65536, 7]
    return [rng.integers(0, 256, size, dtype=np.uint8) for size in sizes]


def test_chunked_crc_equals_whole_crc(small_pieces: list[int]) -> None:
    buffers = _buffers()
    assert crc32c_many(buffers) == [crc32c_of(b) for b in buffers]
    assert small_pieces and small_pieces[0] > 2  # split into many pieces, on the pool


@pytest.mark.parametrize("piece", [1, 3, 4096, 1 << 20])
def test_every_piece_size_gives_the_whole_crc(monkeypatch: pytest.MonkeyPatch, piece: int) -> None:
    monkeypatch.setattr(parallel_crc, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(parallel_crc, "_helper_count", lambda: 1)
    buffers = [b[:2000] for b in _buffers()]
    assert crc32c_many(buffers, piece_bytes=piece) == [crc32c_of(b) for b in buffers]


def test_without_helpers_the_caller_does_it_all(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel_crc, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(parallel_crc, "_helper_count", lambda: 0)
    monkeypatch.setattr(parallel_crc, "_pool", lambda helpers: pytest.fail("no pool without helpers"))
    buffers = _buffers()
    assert crc32c_many(buffers, piece_bytes=4096) == [crc32c_of(b) for b in buffers]


def test_a_helper_error_reaches_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel_crc, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(parallel_crc, "_helper_count", lambda: 1)

    def broken(data: object, value: int = 0) -> int:
        raise MemoryError("boom")

    monkeypatch.setattr(parallel_crc, "_crc32c", broken)
    with pytest.raises(MemoryError, match="boom"):
        crc32c_many(_buffers(), piece_bytes=4096)


def test_the_caller_never_waits_for_a_descheduled_helper(monkeypatch: pytest.MonkeyPatch) -> None:
    """A helper stuck in its piece (another process has the core) does not hold the caller up."""
    monkeypatch.setattr(parallel_crc, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(parallel_crc, "_helper_count", lambda: 1)
    entered, release = threading.Event(), threading.Event()
    stuck = []
    real = parallel_crc._crc32c

    def crc(data: object, value: int = 0) -> int:
        if threading.current_thread().name.startswith("opencheckpoint-crc") and not entered.is_set():
            entered.set()
            stuck.append(True)
            release.wait(10)  # a helper that does not get the CPU until the caller is done
            stuck.pop()
        elif threading.current_thread() is threading.main_thread():
            entered.wait(10)  # let the helper take a piece first
        return real(data, value)

    monkeypatch.setattr(parallel_crc, "_crc32c", crc)
    buffers = _buffers()
    try:
        assert crc32c_many(buffers, piece_bytes=4096) == [crc32c_of(b) for b in buffers]
        assert entered.is_set() and stuck == [True]  # returned while the helper still held its piece
    finally:
        release.set()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_gets_a_pool_of_its_own(small_pieces: list[int]) -> None:
    buffers = _buffers()
    expected = [crc32c_of(b) for b in buffers]
    assert crc32c_many(buffers) == expected  # the parent's pool exists and has threads
    pid = os.fork()
    if pid == 0:  # the child: the parent's pool threads do not exist here
        os._exit(0 if crc32c_many(buffers) == expected else 1)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung on the parent's pool")
        time.sleep(0.01)
    assert os.waitstatus_to_exitcode(status) == 0


_AT_EXIT = """
import atexit, numpy as np
from opencheckpoint.read import parallel_crc
from opencheckpoint.format.integrity import crc32c_of
parallel_crc.PARALLEL_MIN_BYTES = 0
parallel_crc._helper_count = lambda: 2
data = [np.arange(50000, dtype=np.uint8), np.arange(7, dtype=np.uint8)]
want = [crc32c_of(b) for b in data]
assert parallel_crc.crc32c_many(data, piece_bytes=4096) == want  # the pool is running now
def late():  # after the pool was shut down: the caller does all the work
    print("late", parallel_crc.crc32c_many(data, piece_bytes=4096) == want, flush=True)
atexit.register(late)
print("early", True, flush=True)
"""


def test_no_hang_at_interpreter_exit() -> None:
    done = subprocess.run([sys.executable, "-c", _AT_EXIT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["early", "True", "late", "True"]


def _two_arrays(tmp_path: Path) -> Path:
    rng = np.random.default_rng(1)
    return Checkpoint(w={"a": rng.standard_normal(3000), "b": rng.standard_normal(5000)}).save(tmp_path / "c")


def _corrupt_array(path: Path, index: int) -> None:
    with open_checkpoint(path) as ckpt:
        ref = ckpt.decoded_tree("w")[0].arrays[index]
    with open(path / "components" / "w" / "data.bin", "r+b") as handle:
        handle.seek(ref.offset + ref.nbytes - 1)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 1]))


def test_verified_views_raise_the_first_corrupt_array(tmp_path: Path, small_pieces: list[int]) -> None:
    path = _two_arrays(tmp_path)
    _corrupt_array(path, 1)
    with open_checkpoint(path) as ckpt, pytest.raises(IntegrityError, match=r"\$\.b"):
        ckpt.read("w", copy=False)
    assert small_pieces
