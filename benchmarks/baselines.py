"""Baselines measured in the same run as everything else: memcpy, raw write/fsync/read of the same bytes."""

from __future__ import annotations

import os

import numpy as np

from common import Context, byte_view, read_into, remove, write_all
from state import touched_like
from timing import measure, settle_writes


def run(ctx: Context) -> None:
    arrays = ctx.arrays
    total = ctx.nbytes
    destination = touched_like(arrays)

    ctx.step("memcpy (np.copyto into touched memory)")
    def copy_all() -> None:
        for k, a in arrays.items():
            np.copyto(destination[k], a)

    ctx.record("baseline", "memcpy", measure(copy_all, repeat=ctx.repeat), total)

    raw = ctx.tmp / "raw.bin"

    def write(fsync: bool) -> None:
        with open(raw, "wb", buffering=0) as handle:
            for array in arrays.values():
                write_all(handle, byte_view(array))
            if fsync:
                os.fsync(handle.fileno())

    def before_write() -> None:
        remove(raw)
        settle_writes()

    ctx.step("raw sequential write")
    ctx.record("baseline", "raw write", measure(lambda: write(False), repeat=ctx.repeat, setup=before_write), total)
    ctx.step("raw write + fsync")
    ctx.record("baseline", "raw write+fsync", measure(lambda: write(True), repeat=ctx.repeat, setup=before_write),
               total)

    def read_fresh() -> dict[str, np.ndarray]:
        out = {}
        with open(raw, "rb", buffering=0) as handle:
            for key, array in arrays.items():
                buffer = np.empty_like(array)
                read_into(handle, byte_view(buffer))
                out[key] = buffer
        return out

    def read_touched() -> None:
        with open(raw, "rb", buffering=0) as handle:
            for array in destination.values():
                read_into(handle, byte_view(array))

    ctx.step("raw read into fresh np.empty")
    ctx.record("baseline", "raw read (fresh memory)", measure(read_fresh, repeat=ctx.repeat), total)
    ctx.step("raw read into touched memory")
    ctx.record("baseline", "raw read (touched memory)", measure(read_touched, repeat=ctx.repeat), total)
    remove(raw)
