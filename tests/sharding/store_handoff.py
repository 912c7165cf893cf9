"""What the processes of ``test_multihost.py`` share: the S3 store only. Helpers both workers (torch, JAX) use.

The torch ranks and the JAX processes of one launch run at the same time and hand checkpoints to each other
through the store alone, as jobs on different hosts would: a checkpoint is there once its ``manifest.json`` is
(it is published last), so a process waits for that object (:func:`wait_for_checkpoint`). The arrays a
checkpoint should hold travel the same way, as an ``.npz`` object written before the checkpoint's save
(:func:`put_expected`, :func:`get_expected`). :func:`record_reads` counts the stored shards a process reads,
to show that each reads only the regions it holds.
"""

from __future__ import annotations

import io
import json
import time

import fsspec
import numpy as np

from opencheckpoint.read.sharded import ShardedReads

#: Seconds a process waits for a checkpoint another job is saving (within the launch's own bound).
HANDOFF_WAIT_S = 150.0


def wait_for_checkpoint(prefix: str, waiter: str) -> None:
    """Return once ``s3://PREFIX/manifest.json`` exists; ``TimeoutError`` after :data:`HANDOFF_WAIT_S`."""
    store = fsspec.filesystem("s3", skip_instance_cache=True)
    deadline = time.monotonic() + HANDOFF_WAIT_S
    while not store.exists(f"{prefix}/manifest.json"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{waiter}: no checkpoint at s3://{prefix} after {HANDOFF_WAIT_S:.0f} s")
        time.sleep(0.5)
        store.invalidate_cache()


def put_expected(key: str, arrays: dict[str, np.ndarray]) -> None:
    """Store the arrays a checkpoint must restore to, as ``s3://KEY`` (an ``.npz``: no pickle)."""
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    fsspec.filesystem("s3").pipe_file(key, buffer.getvalue())


def get_expected(key: str) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(fsspec.filesystem("s3").cat_file(key)), allow_pickle=False) as stored:
        return {name: stored[name] for name in stored.files}


def record_reads() -> list[tuple[str, int, int]]:
    """From now on, append ``(file, offset, bytes)`` of each stored shard this process reads to the list returned."""
    reads: list[tuple[str, int, int]] = []
    original = ShardedReads.shard

    def shard(self: ShardedReads, record: object, *, verify: bool) -> np.ndarray:
        reads.append((record.file, record.offset, record.nbytes))  # type: ignore[attr-defined]
        return original(self, record, verify=verify)  # type: ignore[arg-type]

    ShardedReads.shard = shard  # type: ignore[method-assign]
    return reads


def read_summary(reads: list[tuple[str, int, int]]) -> str:
    """JSON of the files, distinct shards and bytes read (a block asked again is served from its first read)."""
    shards = set(reads)
    return json.dumps({"files": sorted({file for file, _, _ in shards}), "shards": len(shards),
                       "bytes": sum(nbytes for _, _, nbytes in shards)})
