"""A sharded save over ``jax.distributed``: the :class:`~opencheckpoint.sharding.Collective` of JAX processes.

The save engine exchanges only small JSON documents (the staging directory,
each rank's file entries and shard records, the outcome). Between JAX
processes they travel through the key-value store of the distributed runtime
that ``jax.distributed.initialize`` started (the coordinator service every JAX
process is connected to), as raw bytes: nothing is pickled, and every wait
has a timeout, so a process that died makes the others raise
:class:`~opencheckpoint.sharding.CollectiveError` instead of hanging.

Why the key-value store rather than ``jax.experimental.multihost_utils``
(``broadcast_one_to_all``, ``process_allgather``): those run device
computations that wait for every process without a timeout, so one dead
process would hang the others forever. The store is reached through
``jax._src.distributed.global_state.client``, the handle orbax and JAX's own
``array_serialization`` use; JAX has no public name for it (checked on
JAX 0.10).

Every process must call the operations in the same order (as the save engine
does); the keys carry a per-process sequence number that therefore agrees.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Any

import jax

from ..sharding import CollectiveError

#: Seconds each wait may take (the default of ``Checkpoint.save(timeout=...)``).
DEFAULT_TIMEOUT = 300.0

_SEQUENCE = itertools.count()  # shared by every JaxCollective of this process: keys never repeat


def _client() -> Any:
    from jax._src.distributed import global_state  # no public handle on the key-value store (module docstring)

    client = global_state.client
    if client is None:
        raise CollectiveError("jax.distributed is not initialized in this process: call "
                              "jax.distributed.initialize(...) on every process before a collective save")
    return client


class JaxCollective:
    """The JAX processes of this job (``jax.process_index()`` / ``jax.process_count()``) as one save group.

    Rank 0 (``jax.process_index() == 0``) is the coordinator. ``timeout``
    (seconds) bounds every wait; ``namespace`` separates the keys of independent groups.
    """

    def __init__(self, *, timeout: float = DEFAULT_TIMEOUT, namespace: str = "opencheckpoint") -> None:
        self._client = _client()
        self._rank = int(jax.process_index())
        self._world = int(jax.process_count())
        self._timeout_ms = max(1, int(timeout * 1000))
        self._namespace = namespace

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world

    def _key(self, op: str) -> str:
        return f"{self._namespace}/{next(_SEQUENCE)}/{op}"

    def _get(self, key: str, what: str) -> bytes:
        try:
            data: bytes = self._client.blocking_key_value_get_bytes(key, self._timeout_ms)
        except Exception as exc:  # the runtime raises its own XlaRuntimeError (DEADLINE_EXCEEDED, UNAVAILABLE)
            raise CollectiveError(f"rank {self._rank}: no {what} within {self._timeout_ms / 1000:g} s "
                                  f"(a process died or hung?): {exc}") from None
        return data

    def _set(self, key: str, data: bytes) -> None:
        try:
            self._client.key_value_set_bytes(key, data)
        except Exception as exc:  # the runtime's own error class: the coordinator service is gone
            raise CollectiveError(f"rank {self._rank}: cannot reach the JAX coordination service: {exc}") from None

    def broadcast_bytes(self, data: bytes | None, root: int = 0) -> bytes:
        key = self._key(f"broadcast-from-{root}")
        if self._rank == root:
            if data is None:
                raise CollectiveError("the root of a broadcast must pass bytes")
            self._set(key, bytes(data))
            return bytes(data)
        return self._get(key, f"broadcast from rank {root}")

    def gather_bytes(self, data: bytes, root: int = 0) -> list[bytes] | None:
        key = self._key(f"gather-to-{root}")
        self._set(f"{key}/{self._rank}", bytes(data))
        if self._rank != root:
            return None
        out = [self._get(f"{key}/{rank}", f"report of rank {rank}") for rank in range(self._world)]
        for rank in range(self._world):  # read once: the coordinator alone frees them
            with contextlib.suppress(Exception):  # freeing is best effort: the reports are already in
                self._client.key_value_delete(f"{key}/{rank}")
        return out

    def barrier(self) -> None:
        key = self._key("barrier")
        try:
            self._client.wait_at_barrier(key, self._timeout_ms)
        except Exception as exc:  # the runtime's own error class (DEADLINE_EXCEEDED, ABORTED)
            raise CollectiveError(f"rank {self._rank}: not every process reached the barrier within "
                                  f"{self._timeout_ms / 1000:g} s: {exc}") from None


__all__ = ["DEFAULT_TIMEOUT", "JaxCollective"]
