"""Per-rank values: state that differs per rank (a dataloader position, a per-rank RNG), stored for every rank.

A collective save stores one value of each plain leaf: the coordinator's
(every rank must hold the same, or the save is refused). A value wrapped in
:class:`PerRank` is stored once per rank instead, and each rank gets its own
back. It is stored with the format's existing nodes (decision record 0013): a
named tuple of type name ``opencheckpoint.PerRank`` with the fields
``world_size`` (the number of ranks that saved) and ``values`` (a list, the
value of rank ``r`` at index ``r``). In a collective save each rank's arrays
in it are sharded array nodes (tag 10) with one shard covering the whole array,
in that rank's own shard data file, so every rank writes its own bytes and the
coordinator gathers only each rank's small tree node (msgpack, inside the JSON
report). A save by one process stores ``world_size`` 1 and plain arrays.

>>> import numpy as np
>>> from opencheckpoint.tree.encode import TreePlan
>>> plan = TreePlan({"position": PerRank({"epoch": 2, "batch": 7})})
>>> node = plan.root["position"]
>>> node[1], node[2]
('opencheckpoint.PerRank', {'world_size': 1, 'values': [{'epoch': 2, 'batch': 7}]})
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Literal

import msgpack
import numpy as np

from ..format.dtypes import canonical_bools, dtype_name
from ..format.errors import CheckpointError
from .nodes import Tag
from .planner import TreePlanner
from .refusals import big_endian, refuse
from .shard_plan import LocalShard, ShardedValue, ShardPlan
from .sink import saving_ranks

#: The type name of the named tuple node that holds a per-rank value.
PER_RANK_TYPE: Final = "opencheckpoint.PerRank"

#: What a load on another number of ranks than the save does: ``"error"`` refuses it (the default),
#: ``"all"`` gives every rank the list of every saved rank's value, ``"wrap"`` gives rank ``r`` the value of
#: saved rank ``r % world_size``; a callable ``f(values, rank, world_size)`` returns the value itself.
Resize = Literal["error", "all", "wrap"] | Callable[[list[Any], int, int], Any]


class PerRank:
    """A value stored per rank of a collective save, and restored to the same rank.

    Wrap the part of a tree component that differs per rank::

        Checkpoint(state={"model_step": step, "loader": PerRank(loader.state_dict())}).save(path)

    A load on the same number of ranks gives each rank its own value (in a
    live target, at the place of a ``PerRank`` or of a plain value). On
    another number of ranks the load is refused before anything changes,
    unless the live target's ``PerRank(..., resize=...)`` says what to do
    (:data:`Resize`). Outside a load (``read_component``) the stored named
    tuple is returned as it is: every rank's value.
    """

    __slots__ = ("resize", "value")

    def __init__(self, value: Any, resize: Resize = "error") -> None:
        if not callable(resize) and resize not in ("error", "all", "wrap"):
            raise TypeError(f"resize must be 'error', 'all', 'wrap' or a callable, got {resize!r}")
        self.value = value
        self.resize = resize

    def __repr__(self) -> str:
        return f"PerRank({self.value!r})" if self.resize == "error" else f"PerRank({self.value!r}, {self.resize!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PerRank) and other.resize == self.resize and _same(other.value, self.value)

    __hash__ = None  # type: ignore[assignment]  # a wrapper of mutable state


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except (TypeError, ValueError):  # arrays: element-wise
        import numpy as np

        return bool(np.array_equal(a, b))


_NAMED_TUPLE: Final = msgpack.ExtType(int(Tag.NAMED_TUPLE), b"")


def plan_per_rank(plan: TreePlanner, value: PerRank, depth: int, path: str) -> list[Any]:
    """The named tuple node of a per-rank value (see the module docstring).

    Alone (no collective save under way) it holds this process's value as rank 0 of 1. As a rank of a
    collective save it holds this rank's value with its arrays in this rank's shard data file; the node is
    noted in ``plan.per_rank``, and the coordinator fills in every rank's value and ``world_size``.
    """
    if getattr(plan, "per_rank_value", False):
        raise refuse("a PerRank value inside another PerRank value: wrap the outer value only", field=path)
    if saving_ranks() < 2:  # not a collective save: the plan stage runs the adapters of one process
        inner = plan._node(value.value, depth + 2, f"{path}.values[0]")
        return [_NAMED_TUPLE, PER_RANK_TYPE, {"world_size": 1, "values": [inner]}]
    if plan.shards is None:
        plan.shards = ShardPlan(plan._rank)
    local = _rank_local_plan(value.value, plan, depth + 2, f"{path}.values[{plan._rank}]")
    node = [_NAMED_TUPLE, PER_RANK_TYPE, {"world_size": 0, "values": [local.root]}]
    plan.per_rank.append(node)
    return node


def _rank_local_plan_class(base: type[TreePlanner]) -> type[TreePlanner]:
    """A planner like ``base`` (the tree planner, never imported here: it imports this module) for one rank's
    per-rank value."""

    class RankLocalPlan(base):  # type: ignore[valid-type,misc]  # a class made from the planner's type
        """Plans one rank's per-rank value: each array a sharded array of one whole shard in the rank's file."""

        per_rank_value = True

        def __init__(self, value: Any, parent: TreePlanner, depth: int, path: str) -> None:
            self._convert = parent._convert
            self._rank = parent._rank
            self.data = parent.data  # unused: no tag-6 array is planned here
            self.shards = parent.shards
            self.per_rank: list[list[Any]] = []
            self.root = self._node(value, depth, path)

        def _array(self, array: np.ndarray, path: str) -> list[Any]:
            try:
                name = dtype_name(array.dtype)
            except CheckpointError as exc:
                raise exc.at(field=path) from None
            if array.dtype.byteorder == ">":
                raise big_endian(array.dtype, path)
            array = np.ascontiguousarray(array)
            if name == "bool":
                array = canonical_bools(array)
            assert self.shards is not None  # set by plan_per_rank
            whole = ShardedValue(tuple(array.shape), name, (LocalShard((0,) * array.ndim, array),))
            return self.shards.node(whole, path, merged=False)

        def _array_run(self, keys: list[str], arrays: list[np.ndarray], out: dict[Any, Any], path: str) -> None:
            for key, array in zip(keys, arrays, strict=True):
                out[key] = self._array(array, f"{path}.{key}")

        def _prng_key(self, value: Any, path: str) -> list[Any]:
            raise refuse("a PRNG key inside a PerRank value of a collective save: store its key data "
                         "(jax.random.key_data) and rebuild the key after loading", field=path)

        def _sharded(self, value: ShardedValue, path: str) -> list[Any]:
            raise refuse("a sharded array inside a PerRank value: a sharded array is every rank's already",
                         field=path)

    return RankLocalPlan


def _rank_local_plan(value: Any, parent: TreePlanner, depth: int, path: str) -> TreePlanner:
    base = type(parent)
    made = _RANK_LOCAL.get(base)
    if made is None:
        made = _RANK_LOCAL[base] = _rank_local_plan_class(base)
    plan: TreePlanner = made(value, parent, depth, path)
    return plan


#: The per-rank planner made for each planner class.
_RANK_LOCAL: dict[type, type] = {}


def is_per_rank_node(node: Any) -> bool:
    """Whether a planned (msgpack-ready) node is a per-rank value's named tuple."""
    return (isinstance(node, list) and len(node) == 3 and getattr(node[0], "code", None) == 2
            and node[1] == PER_RANK_TYPE)


__all__ = ["PER_RANK_TYPE", "PerRank", "Resize", "is_per_rank_node", "plan_per_rank"]
