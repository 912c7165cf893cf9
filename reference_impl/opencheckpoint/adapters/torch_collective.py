"""The :class:`~opencheckpoint.sharding.Collective` of a ``torch.distributed`` process group.

Bytes travel as uint8 tensors (a length first, then the payload; gathers pad
every payload to the longest), on the CPU for gloo and on the current CUDA
device for NCCL. Never the ``*_object`` collectives: they pickle, and loading
never runs code from a peer either. Every operation is started asynchronously and
waited for with the save's ``timeout``; a peer that died breaks gloo's sockets and
fails the wait at once, a peer that hangs fails it after ``timeout`` seconds.
Either way the rank raises :class:`~opencheckpoint.sharding.CollectiveError`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from ..sharding.collective import CollectiveError

__all__ = ["TorchCollective"]


class TorchCollective:
    """Rank, world size and byte collectives of ``group`` (default: the world group)."""

    def __init__(self, group: Any = None, *, timeout: float = 300.0) -> None:
        if not (dist.is_available() and dist.is_initialized()):
            raise CollectiveError("a process_group was given but torch.distributed is not initialized "
                                  "(call torch.distributed.init_process_group first)")
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.timeout = timeout
        backend = dist.get_backend(group)
        self._device = (torch.device("cuda", torch.cuda.current_device()) if backend == "nccl"
                        else torch.device("cpu"))

    def _global(self, rank: int) -> int:
        return rank if self.group is None else dist.get_global_rank(self.group, rank)

    def _wait(self, work: Any, what: str) -> None:
        try:
            completed = work.wait(timedelta(seconds=self.timeout))
        except Exception as exc:  # torch raises RuntimeError / DistBackendError / DistNetworkError
            raise CollectiveError(f"{what} across the process group failed (a rank died, or did not "
                                  f"reach this step within {self.timeout:g} s): {exc}") from None
        if completed is False:
            raise CollectiveError(f"{what} across the process group did not complete within {self.timeout:g} s")

    def broadcast_bytes(self, data: bytes | None, root: int = 0) -> bytes:
        mine = self.rank == root
        if mine and data is None:
            raise CollectiveError("the root of a broadcast must pass bytes")
        length = torch.tensor([len(data) if mine and data is not None else 0], dtype=torch.int64,
                              device=self._device)
        self._wait(dist.broadcast(length, src=self._global(root), group=self.group, async_op=True),
                   "broadcasting a message length")
        size = int(length.item())
        if mine and data is not None:
            payload = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(self._device) if size else \
                torch.empty(0, dtype=torch.uint8, device=self._device)
        else:
            payload = torch.empty(size, dtype=torch.uint8, device=self._device)
        if size:
            self._wait(dist.broadcast(payload, src=self._global(root), group=self.group, async_op=True),
                       "broadcasting a message")
        return payload.cpu().numpy().tobytes()

    def gather_bytes(self, data: bytes, root: int = 0) -> list[bytes] | None:
        lengths = [torch.zeros(1, dtype=torch.int64, device=self._device) for _ in range(self.world_size)]
        mine = torch.tensor([len(data)], dtype=torch.int64, device=self._device)
        self._wait(dist.all_gather(lengths, mine, group=self.group, async_op=True), "gathering message lengths")
        sizes = [int(t.item()) for t in lengths]
        longest = max(sizes)
        padded = torch.zeros(longest, dtype=torch.uint8, device=self._device)
        if data:
            padded[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(self._device)
        buffers = [torch.empty(longest, dtype=torch.uint8, device=self._device) for _ in range(self.world_size)]
        if longest:
            self._wait(dist.all_gather(buffers, padded, group=self.group, async_op=True), "gathering messages")
        if self.rank != root:
            return None
        return [buffer[:size].cpu().numpy().tobytes() for buffer, size in zip(buffers, sizes, strict=True)]

    def all_max(self, values: list[int]) -> list[int]:
        """Each of ``values`` (int64) reduced with MAX over every rank: one all-reduce of a few integers (a
        load's agreement costs this one step when every rank passed; see :mod:`opencheckpoint.sharding.agreement`)."""
        flags = torch.tensor(values, dtype=torch.int64, device=self._device)
        self._wait(dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=self.group, async_op=True),
                   "agreeing on a load")
        return [int(value) for value in flags.tolist()]

    def barrier(self) -> None:
        token = torch.zeros(1, dtype=torch.int64, device=self._device)
        self._wait(dist.all_reduce(token, group=self.group, async_op=True), "waiting at a barrier")
