"""Helpers of the sharding tests: a raw reader of sharded trees and a collective of threads.

:func:`read_raw` reads a tree component straight from its files (manifest JSON,
msgpack, shard bytes, CRC-32C of every shard), independent of the library's read
path, so the writer is checked against the format itself.
:class:`ThreadWorld` runs N ranks as threads of this process: the save engine with
several ranks, without starting processes.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import crc32c
import msgpack
import numpy as np

from opencheckpoint.format.dtypes import numpy_dtype
from opencheckpoint.format.errors import CheckpointError
from opencheckpoint.sharding import CollectiveError


def read_raw(checkpoint: Path, component: str) -> Any:
    """The component's tree with every tag-6 and tag-10 array assembled and checked against its CRC-32C."""
    manifest = json.loads((checkpoint / "manifest.json").read_bytes())
    record = manifest["components"][component]
    root = checkpoint / record["path"]
    document = msgpack.unpackb((root / "tree.msgpack").read_bytes(), strict_map_key=False)

    def chunk(file: str, offset: int, nbytes: int, crc: int) -> bytes:
        assert file in record["files"], f"{file} is not in the inventory"
        with open(root / file, "rb") as handle:
            handle.seek(offset)
            data = handle.read(nbytes)
        assert offset % 64 == 0 and crc32c.crc32c(data) == crc, f"{file}@{offset}: bad alignment or CRC"
        return data

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            return {key: walk(value) for key, value in node.items()}
        if isinstance(node, list) and node and isinstance(node[0], msgpack.ExtType):
            if node[0].code == 6:
                _, dtype, shape, offset, nbytes, crc = node
                return np.frombuffer(chunk("data.bin", offset, nbytes, crc), numpy_dtype(dtype)).reshape(shape)
            if node[0].code == 10:
                _, dtype, shape, shards = node
                out = np.zeros(shape, numpy_dtype(dtype))
                for file, start, size, offset, nbytes, crc in shards:
                    block = np.frombuffer(chunk(file, offset, nbytes, crc), numpy_dtype(dtype)).reshape(size)
                    out[tuple(slice(s, s + n) for s, n in zip(start, size, strict=True))] = block
                return out
            return [walk(item) for item in node[1:]]
        if isinstance(node, list):
            return [walk(item) for item in node]
        return node

    return walk(document)


class ThreadWorld:
    """``size`` ranks as threads; each gets a :class:`ThreadRank` collective; rank 0 is the coordinator."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._barrier = threading.Barrier(size, timeout=20)
        self._slots: list[Any] = [None] * size

    def run(self, task: Callable[[ThreadRank], Any]) -> list[Any]:
        """Run ``task`` on every rank at once; each rank's return value or the exception it raised."""
        results: list[Any] = [None] * self.size

        def one(rank: int) -> None:
            try:
                results[rank] = task(ThreadRank(self, rank))
            except CheckpointError as exc:  # raised after the save's last exchange: the others are done too
                results[rank] = exc
            except BaseException as exc:
                results[rank] = exc
                self._barrier.abort()  # a rank that stops midway breaks the others' waits, as a dead process does

        threads = [threading.Thread(target=one, args=(rank,)) for rank in range(self.size)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        return results

    def exchange(self, rank: int, data: Any) -> list[Any]:
        try:
            self._barrier.wait()
            self._slots[rank] = data
            self._barrier.wait()
            seen = list(self._slots)
            self._barrier.wait()
        except threading.BrokenBarrierError:
            raise CollectiveError("a rank left the group") from None
        return seen


class ThreadRank:
    """One rank's :class:`~opencheckpoint.sharding.Collective` in a :class:`ThreadWorld`."""

    def __init__(self, world: ThreadWorld, rank: int) -> None:
        self._world = world
        self.rank = rank
        self.world_size = world.size

    def broadcast_bytes(self, data: bytes | None, root: int = 0) -> bytes:
        value: bytes = self._world.exchange(self.rank, data)[root]
        return value

    def gather_bytes(self, data: bytes, root: int = 0) -> list[bytes] | None:
        seen = self._world.exchange(self.rank, data)
        return seen if self.rank == root else None

    def barrier(self) -> None:
        self._world.exchange(self.rank, None)
