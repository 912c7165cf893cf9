"""How long a training loop is blocked by ``save_async`` to an object store (``memory://``, and S3 served by moto on
loopback when ``moto`` and ``s3fs`` are installed), against copying the same state into fresh memory.

Measured side by side, one sample of each in turn (``ctx.repeat`` rounds), for NumPy arrays and a torch
``nn.Module`` holding the same bytes:

* ``memcpy``: ``np.copyto`` of every array into arrays already touched (the stricter baseline of the local
  async benchmark, :mod:`async_blocked`);
* ``copy into fresh memory``: ``np.array(copy=True)`` / ``tensor.clone()`` of every array (what
  ``copy.deepcopy`` of the state does), the baseline of the target;
* ``save_async blocked, <store>``: the time ``Checkpoint.save_async(url)`` takes to return (the plan and the
  snapshot; the target check and the upload run in the writer thread). The upload is then waited for, untimed,
  and the checkpoint deleted, before the next sample.

The target (issue 22): blocked <= 1.5 x the in-memory copy (reported against both copies).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import numpy as np

import opencheckpoint
from async_blocked import states
from common import Context
from state import touched_like
from timing import Timing, measure

GROUP = "async save to object stores"


@contextlib.contextmanager
def _stores(ctx: Context) -> Iterator[list[tuple[str, Any]]]:
    """(label, fsspec filesystem and root) of each store to measure; the moto server runs while in the block."""
    import fsspec

    stores: list[tuple[str, Any]] = [("memory://", (fsspec.filesystem("memory"), "/oc-bench-async"))]
    try:
        import s3fs
        from moto.server import ThreadedMotoServer
    except ImportError:
        ctx.skip(GROUP, "s3 (moto)", "moto or s3fs is not installed")
        yield stores
        return
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs every request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        fs = s3fs.S3FileSystem(key="testing", secret="testing", anon=False, skip_instance_cache=True,
                               client_kwargs={"endpoint_url": f"http://{host}:{port}", "region_name": "eu-west-1"})
        fs.mkdir("oc-bench")
        stores.append(("s3 (moto)", (fs, "oc-bench/async")))
        yield stores
    finally:
        server.stop()


def run(ctx: Context) -> None:
    """Measure copy / save_async blocked time per framework and store, interleaved."""
    numbers = itertools.count()
    touched = touched_like(ctx.arrays)
    with _stores(ctx) as stores:
        for label, live, copy_state in states(ctx, GROUP):
            with ctx.guard(GROUP, label):
                checkpoint = opencheckpoint.Checkpoint(model=live)
                operations: list[tuple[str, Callable[[], Any], Any]] = [
                    (f"memcpy ({label})", partial(_memcpy, touched, ctx.arrays), None),
                    (f"copy into fresh memory ({label})", copy_state, None)]
                for store, (fs, root) in stores:
                    save = partial(_save_async, checkpoint, fs, root, numbers)
                    operations.append((f"save_async blocked, {store} ({label})", save, _finish))
                timings = {name: Timing() for name, *_ in operations}
                for _ in range(ctx.repeat):
                    for name, operation, teardown in operations:
                        ctx.step(f"{GROUP}: {name}")
                        timings[name].samples += measure(operation, repeat=1, teardown=teardown).samples
                for name, *_ in operations:
                    ctx.record(GROUP, name, timings[name], ctx.nbytes,
                               note="until save_async returns (plan + snapshot)" if name.startswith("save") else "")


def _memcpy(touched: dict[str, np.ndarray], arrays: dict[str, np.ndarray]) -> None:
    for key, array in arrays.items():
        np.copyto(touched[key], array)


def _save_async(checkpoint: Any, fs: Any, root: str, numbers: Iterator[int]) -> tuple[Any, Any]:
    """The timed call: ``save_async`` to a fresh prefix below ``root`` (an object store never overwrites)."""
    from opencheckpoint.remote import FsPath

    return fs, checkpoint.save_async(FsPath(fs, f"{root}/ckpt-{next(numbers)}"))


def _finish(result: Any) -> None:
    """Untimed, after each sample: the upload completes (a failed one raises), then the checkpoint is deleted."""
    fs, handle = result
    where = handle.result()
    fs.rm(where.path, recursive=True)
