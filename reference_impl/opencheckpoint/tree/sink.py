"""Where :func:`~.encode.write_tree` sends a planned tree while a save of sharded arrays is under way.

A collective save runs the same adapters on every rank, and adapters write trees
through :func:`~.encode.write_tree` without knowing about ranks. While a
:class:`TreeSink` is installed (:func:`installed`, done by the save engine in
:mod:`opencheckpoint.sharding`), ``write_tree`` hands it the plan instead: the sink
knows the rank (the name of its shard data file), writes what this rank owns, and
defers what needs every rank's records (``tree.msgpack``) to the coordinator.
A context variable, not a parameter, so that no adapter signature changes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..container.archive_writer import ArchiveWriter
    from .encode import TreePlan

__all__ = ["TreeSink", "current_sink", "installed", "saving_ranks"]


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


_SINK: ContextVar[TreeSink | None] = ContextVar("opencheckpoint_tree_sink", default=None)


def current_sink() -> TreeSink | None:
    """The sink of the save under way in this context, if any."""
    return _SINK.get()


def saving_ranks() -> int:
    """How many processes take part in the save under way in this context: a collective save's world size,
    else 1 (a value held in part by other processes cannot be stored whole by this one)."""
    sink = _SINK.get()
    return 1 if sink is None else int(getattr(sink, "world_size", 1))


@contextlib.contextmanager
def installed(sink: TreeSink) -> Iterator[TreeSink]:
    """Send every :func:`~.encode.write_tree` of this context to ``sink`` until the block ends."""
    token = _SINK.set(sink)
    try:
        yield sink
    finally:
        _SINK.reset(token)
