"""Where the write stage sends a planned tree: the :class:`TreeSink` protocol.

A save's write stage (:func:`opencheckpoint.write.stages.write`) hands every
planned tree to the sink it is given: a process saving alone writes the whole
tree (:class:`~opencheckpoint.sharding.sink.LocalSink`); one rank of a
collective save writes what it owns and defers what needs every rank's records
(``tree.msgpack``) to the coordinator (:class:`~opencheckpoint.sharding.sink.RankSink`).
The sink is an argument of the write stage, never ambient state: no adapter
signature changes, and nothing outside a save sees it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..container.archive_writer import ArchiveWriter

__all__ = ["TreeSink", "planning", "saving_ranks"]


class TreeSink(Protocol):
    """Writes the trees of one save on behalf of one rank."""

    @property
    def rank(self) -> int:
        """This process's rank: its shard data files are ``shards/rank-NNNNN.bin``."""
        ...

    # ``plan`` is an ``encode.TreePlan``, not named here: encode imports this module (no import cycle).
    def write_tree(self, plan: Any, directory: Path, *, durable: bool, sha256: bool,
                   archive: ArchiveWriter | None, member_prefix: str) -> dict[str, dict[str, Any]]:
        """Write (or defer) the files of ``plan`` for the component in ``directory``; their file entries."""
        ...


_RANKS: ContextVar[int] = ContextVar("opencheckpoint_saving_ranks", default=1)


def saving_ranks() -> int:
    """How many processes take part in the save being planned in this context: a collective save's world
    size, else 1 (a value held in part by other processes cannot be stored whole by this one). Adapters ask
    it while the plan stage runs them; the trees themselves go to the sink the write stage is given."""
    return _RANKS.get()


@contextlib.contextmanager
def planning(world_size: int) -> Iterator[None]:
    """The plan stage of a save by ``world_size`` processes runs its adapters in this block."""
    token = _RANKS.set(world_size)
    try:
        yield
    finally:
        _RANKS.reset(token)
