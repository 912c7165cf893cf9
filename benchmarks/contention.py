"""Restore into an ``nn.Module`` while other processes keep the CPUs busy (the usual RL setting).

torch's ``Tensor.copy_`` splits a big copy over its intra-op threads; with a
busy neighbour those threads wait for each other and the copy collapses. This
section runs with torch's *default* thread count (one per core, whatever
``--torch-threads`` says for the rest of the run) and ``neighbours`` processes
spinning on the CPU, and measures side by side:

* ``copy_ (torch threads)``: ``param.copy_(source)`` for every parameter, the
  copy ``load_state_dict`` does;
* ``single-threaded copy``: ``np.copyto`` into the parameters' memory;
* ``single-threaded copy from the file map``: ``np.copyto`` from a fresh map
  of the checkpoint's ``data.bin`` (page cache warm): the least any restore
  from a file costs, since the source pages must be mapped;
* ``single-threaded verify + copy from the file map``: the same, after one
  CRC-32C pass over every array on the calling thread: the least a
  verify-first restore costs without other threads (decision 0011);
* OpenCheckpoint ``Checkpoint(model=module).load(path)``, verified and not.
"""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
from functools import partial
from typing import Any

import crc32c
import numpy as np

import opencheckpoint
from common import Context, remove
from state import ArrayModule, torch_module
from timing import measure

#: A neighbour: one process that keeps one core busy until it is terminated.
_SPIN = "while True: pass"


def _copy_threads(params: list[Any], sources: list[Any]) -> None:
    for param, source in zip(params, sources, strict=True):
        param.copy_(source)


def _copy_single(params: list[np.ndarray], sources: list[np.ndarray]) -> None:
    for param, source in zip(params, sources, strict=True):
        np.copyto(param, source)


def _copy_from_map(data: os.PathLike[str], params: list[np.ndarray], verify: bool = False) -> None:
    """Copy each parameter's bytes out of a fresh map of ``data.bin`` (arrays at 64-byte aligned offsets);
    with ``verify``, checksum every array first (one thread)."""
    with open(data, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        _copy_views(mapped, params, verify)  # its views are gone when it returns: the map can close


def _copy_views(mapped: mmap.mmap, params: list[np.ndarray], verify: bool) -> None:
    offset = 0
    views = []
    for param in params:
        offset = -(-offset // 64) * 64
        views.append(np.frombuffer(mapped, dtype=param.dtype, count=param.size, offset=offset))
        offset += param.nbytes
    if verify:
        for view in views:
            crc32c.crc32c(view.data)
    for param, view in zip(params, views, strict=True):
        np.copyto(param.reshape(-1), view)


def run(ctx: Context, neighbours: int = 1) -> None:
    import torch

    group = f"busy neighbour x{neighbours}"
    path = ctx.tmp / "contention"
    remove(path)
    opencheckpoint.Checkpoint(model=ArrayModule(ctx.arrays), durable=False).save(path)
    module = torch_module(ctx.arrays, share=False)
    params = [p.detach() for p in module.parameters()]
    sources = [torch.from_numpy(a) for a in ctx.arrays.values()]
    restore = opencheckpoint.Checkpoint(model=module)
    threads = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)  # torch's default: one intra-op thread per core
    data = path / "components" / "model" / "data.bin"
    workers = [subprocess.Popen([sys.executable, "-c", _SPIN]) for _ in range(neighbours)]
    try:
        label = f"torch threads {torch.get_num_threads()}"
        with torch.no_grad():
            ctx.step(f"{group}: copy_ ({label})")
            ctx.record(group, f"copy_ ({label})", measure(partial(_copy_threads, params, sources),
                                                           repeat=ctx.repeat), ctx.nbytes)
        ctx.step(f"{group}: single-threaded copy")
        ctx.record(group, "single-threaded copy", measure(
            partial(_copy_single, [p.numpy() for p in params], [s.numpy() for s in sources]), repeat=ctx.repeat),
            ctx.nbytes)
        ctx.step(f"{group}: single-threaded copy from the file map")
        ctx.record(group, "single-threaded copy from the file map", measure(
            partial(_copy_from_map, data, [p.numpy() for p in params]), repeat=ctx.repeat), ctx.nbytes)
        ctx.step(f"{group}: single-threaded verify + copy from the file map")
        ctx.record(group, "single-threaded verify + copy from the file map", measure(
            partial(_copy_from_map, data, [p.numpy() for p in params], True), repeat=ctx.repeat), ctx.nbytes)
        for verify in (True, False):
            name = f"restore torch {'verified' if verify else 'unverified'}"
            ctx.step(f"{group}: OpenCheckpoint {name}")
            ctx.record(group, name, measure(partial(restore.load, path, verify=verify), repeat=ctx.repeat),
                       ctx.nbytes, note=label)
    finally:
        for worker in workers:
            worker.terminate()
            worker.wait()
        torch.set_num_threads(threads)
        remove(path)
