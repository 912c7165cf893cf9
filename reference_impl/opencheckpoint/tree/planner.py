"""What a per-rank value's planner needs of the tree planner: a protocol, so neither imports the other.

:class:`~opencheckpoint.tree.encode.TreePlan` plans a whole tree and hands a
:class:`~opencheckpoint.tree.per_rank.PerRank` value to
:func:`~opencheckpoint.tree.per_rank.plan_per_rank`, which plans it with a
planner made from the caller's own class. ``encode`` imports ``per_rank`` for
that; ``per_rank`` names the planner only through :class:`TreePlanner`, so the
two modules do not import each other (tests/core/test_import_graph.py counts
every import, annotations included).

>>> from opencheckpoint.tree.encode import TreePlan
>>> isinstance(TreePlan({"w": 1}), TreePlanner)
True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from .datafile import DataFilePlan
from .shard_plan import ShardPlan


@runtime_checkable
class TreePlanner(Protocol):
    """The tree planner's state and the one method a per-rank value's planning calls."""

    #: The caller's converter of live values (None: none).
    _convert: Callable[[Any], Any] | None
    #: The saving rank (0 outside a collective save).
    _rank: int
    #: ``data.bin``'s extents.
    data: DataFilePlan
    #: This rank's shard data file and tag-10 nodes, made on first use.
    shards: ShardPlan | None
    #: The per-rank value nodes planned so far, in document order.
    per_rank: list[list[Any]]
    #: The planned root node.
    root: Any

    def _node(self, value: Any, depth: int, path: str) -> Any:
        """The msgpack-ready node of ``value`` at nesting ``depth`` and tree path ``path``."""
