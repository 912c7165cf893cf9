"""Restoring per-rank values (:class:`~opencheckpoint.tree.per_rank.PerRank`): each rank gets its own value back.

A stored per-rank value is a named tuple ``opencheckpoint.PerRank`` of the
ranks' values (decision record 0013). A load resolves it for the loading
process: rank ``r`` of a load on as many ranks as the save gets the value rank
``r`` saved. On another number of ranks the load is refused, before anything
changes, unless the live target holds a ``PerRank(..., resize=...)`` at that
place saying what to do.

>>> from opencheckpoint.tree.nodes import NamedTupleValue
>>> stored = {"loader": NamedTupleValue(PER_RANK_TYPE, {"world_size": 2, "values": [{"i": 10}, {"i": 20}]})}
>>> resolve(stored, {"loader": None}, rank=1, world_size=2)
{'loader': {'i': 20}}
>>> resolve(stored, {"loader": PerRank({}, resize="wrap")}, rank=2, world_size=4)
{'loader': {'i': 10}}
"""

from __future__ import annotations

import sys
from typing import Any

from ..format.errors import IncompatibleComponent
from ..tree.nodes import NamedTupleValue
from ..tree.per_rank import PER_RANK_TYPE, PerRank

__all__ = ["PerRank", "holds_per_rank", "process_rank", "resolve"]

_ABSENT: Any = object()


def process_rank() -> tuple[int, int]:
    """This process's rank and its job's number of processes (``torch.distributed`` or ``jax.distributed``,
    whichever is initialized; neither imported here), else ``(0, 1)``."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size())
    jax = sys.modules.get("jax")
    if jax is not None and jax.distributed.is_initialized():
        return int(jax.process_index()), int(jax.process_count())
    return 0, 1


def resolve(stored: Any, live: Any, *, rank: int, world_size: int, path: str = "$") -> Any:
    """``stored`` with every per-rank node replaced by this rank's value (see the module docstring).

    ``live`` is the target walked alongside (its ``PerRank`` wrappers give the policy); the rest of the
    tree is returned as it is (the same objects where nothing changed).
    """
    if isinstance(stored, NamedTupleValue):
        if stored.type_name == PER_RANK_TYPE and stored._fields == ("world_size", "values"):
            return _pick(stored, live, rank, world_size, path)
        items = {name: resolve(item, _ABSENT, rank=rank, world_size=world_size, path=f"{path}.{name}")
                 for name, item in stored._asdict().items()}
        return NamedTupleValue(stored.type_name, items)
    if isinstance(live, PerRank):
        live = live.value
    if isinstance(stored, dict):
        live_map = live if isinstance(live, dict) else {}
        return {key: resolve(item, live_map.get(key, _ABSENT), rank=rank, world_size=world_size,
                             path=f"{path}.{key}" if type(key) is str else f"{path}[{key}]")
                for key, item in stored.items()}
    if type(stored) in (list, tuple):
        same = isinstance(live, (list, tuple)) and len(live) == len(stored)
        values = [resolve(item, live[i] if same else _ABSENT, rank=rank, world_size=world_size, path=f"{path}[{i}]")
                  for i, item in enumerate(stored)]
        return values if type(stored) is list else tuple(values)
    return stored


#: The containers a per-rank node can sit in (or be).
_CONTAINERS = frozenset({dict, list, tuple, NamedTupleValue})


def holds_per_rank(stored: Any) -> bool:
    """Whether a decoded tree holds a per-rank node (a cheap test before :func:`resolve` rebuilds anything:
    a state dict of 20,000 arrays costs one C-level pass over its value types)."""
    if isinstance(stored, NamedTupleValue) and stored.type_name == PER_RANK_TYPE:
        return True
    items = stored.values() if isinstance(stored, dict) else stored if type(stored) in _CONTAINERS else ()
    kinds = set(map(type, items))
    if kinds.isdisjoint(_CONTAINERS) and not any(issubclass(kind, dict) for kind in kinds):
        return False
    return any(holds_per_rank(item) for item in items)


def _pick(node: NamedTupleValue, live: Any, rank: int, world_size: int, path: str) -> Any:
    saved, values = node.world_size, node.values
    if type(saved) is not int or not isinstance(values, list) or len(values) != saved or saved < 1:
        raise IncompatibleComponent(f"a per-rank value must hold world_size values, found world_size {saved!r} "
                                    f"and {len(values) if isinstance(values, list) else 'no list of'} values",
                                    field=path)
    policy = live.resize if isinstance(live, PerRank) else "error"
    if saved == world_size:
        return values[rank]
    if policy == "all":
        return list(values)
    if policy == "wrap":
        return values[rank % saved]
    if callable(policy):
        return policy(list(values), rank, world_size)
    raise IncompatibleComponent(
        f"a per-rank value saved by {saved} ranks cannot be restored on {world_size}: rank {rank} has no value "
        "of its own. Say what each rank gets with PerRank(..., resize='wrap' | 'all' | f(values, rank, "
        "world_size)) in the live target at this place; nothing was restored", field=path)
