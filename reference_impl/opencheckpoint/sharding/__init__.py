"""Sharded arrays (format version 2, spec ``opencheckpoint-v2.md``): framework-free, no torch or JAX import.

Reader side: :mod:`.regions` (index regions and tilings) and :mod:`.layout`
(step 15 for a tree component of kind_version 2); the R-SHD rule table is
``opencheckpoint.rules.sharded`` (with the other rule tables) and verified
assembly and region reads (``LazyShardedArray``) are ``opencheckpoint.read.sharded``
(the read layer). This layer sits above the format core, storage and ``tree/``
and below ``read/``: it may import those three, never the read path, adapters
or tools.

Writer side: :class:`ShardedValue` / :class:`LocalShard` (the values a process
writes, encoded by :mod:`opencheckpoint.tree.shard_plan`), the
:class:`Collective` protocol and :class:`LocalCollective` (:mod:`.collective`),
and the tree sinks of a collective save (:mod:`.sink`; the save itself is the
write pipeline's, :mod:`opencheckpoint.write.collective`). The torch
``Collective`` lives in ``opencheckpoint.adapters.torch_collective``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..format.lazy_names import lazy_names

#: Public name -> the module that defines it, imported on first use (PEP 562): the read path imports
#: :mod:`.layout` and :mod:`.regions`, and importing this package must not load the writer's side
#: (the shard planner, the data file writer) with them (``opencheckpoint inspect``'s start-up).
_LAZY: dict[str, str] = {
    "ShardedArrayRef": "..tree.nodes",
    "ShardRef": "..tree.nodes",
    "LocalShard": "..tree.shard_plan",
    "ShardedValue": "..tree.shard_plan",
    "rank_file": "..tree.shard_plan",
    "Collective": ".collective",
    "CollectiveError": ".collective",
    "LocalCollective": ".collective",
    "Region": ".regions",
    "check_tiling": ".regions",
    "intersect": ".regions",
    "slices_to_region": ".regions",
}

if TYPE_CHECKING:  # the names as static imports, for type checkers and the import graph
    from ..tree.nodes import ShardedArrayRef as ShardedArrayRef
    from ..tree.nodes import ShardRef as ShardRef
    from ..tree.shard_plan import LocalShard as LocalShard
    from ..tree.shard_plan import ShardedValue as ShardedValue
    from ..tree.shard_plan import rank_file as rank_file
    from .collective import Collective as Collective
    from .collective import CollectiveError as CollectiveError
    from .collective import LocalCollective as LocalCollective
    from .regions import Region as Region
    from .regions import check_tiling as check_tiling
    from .regions import intersect as intersect
    from .regions import slices_to_region as slices_to_region


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
