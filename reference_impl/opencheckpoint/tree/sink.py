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

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..container.archive_writer import ArchiveWriter
    from .encode import TreePlan

__all__ = ["TreeSink"]


class TreeSink(Protocol):
    """Writes the trees of one save on behalf of one rank."""

    @property
    def rank(self) -> int:
        """This process's rank: its shard data files are ``shards/rank-NNNNN.bin``."""
        ...

    def write_tree(self, plan: TreePlan, directory: Path, *, durable: bool, sha256: bool,
                   archive: ArchiveWriter | None, member_prefix: str) -> dict[str, dict[str, Any]]:
        """Write (or defer) the files of ``plan`` for the component in ``directory``; their file entries."""
        ...
