"""Writing a tree: :func:`write_tree`, and where it sends a planned tree while a save of sharded arrays is under way.

A collective save runs the same adapters on every rank, and adapters write trees
through :func:`write_tree` without knowing about ranks. While a
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

from .encode import Converter, TreePlan, write_plan

if TYPE_CHECKING:
    from ..container.archive_writer import ArchiveWriter

__all__ = ["TreeSink", "current_sink", "installed", "write_tree"]


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


@contextlib.contextmanager
def installed(sink: TreeSink) -> Iterator[TreeSink]:
    """Send every :func:`write_tree` of this context to ``sink`` until the block ends."""
    token = _SINK.set(sink)
    try:
        yield sink
    finally:
        _SINK.reset(token)


def write_tree(
    value: Any, directory: Path, *, converter: Converter | None = None, durable: bool = True, sha256: bool = False,
    archive: ArchiveWriter | None = None, member_prefix: str = "",
) -> dict[str, dict[str, Any]]:
    """Write ``tree.msgpack`` and ``data.bin`` for ``value``; return their file entries.

    Into ``directory``, or, given ``archive``, as the members ``<member_prefix>/tree.msgpack`` and
    ``<member_prefix>/data.bin`` streamed straight into the archive (one pass: the array bytes are
    written once, at their final offset; the tree document, which needs their checksums, fills the
    room reserved before them). ``value`` may be a :class:`TreePlan` made earlier (an async save's snapshot).
    """
    sink = current_sink()
    plan = value if isinstance(value, TreePlan) else TreePlan(value, converter, rank=0 if sink is None else sink.rank)
    if sink is not None:
        return sink.write_tree(plan, directory, durable=durable, sha256=sha256, archive=archive,
                               member_prefix=member_prefix)
    return write_plan(plan, directory, durable=durable, sha256=sha256, archive=archive, member_prefix=member_prefix)
