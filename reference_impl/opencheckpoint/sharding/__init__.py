"""Sharded arrays (format version 2, spec ``opencheckpoint-v2.md``): framework-free, no torch or JAX import.

Reader side: :mod:`.regions` (index regions and tilings), :mod:`.rules` (the
R-SHD rule table), :mod:`.layout` (step 15 for a tree component of
kind_version 2) and :mod:`.reading` (verified assembly and region reads,
:class:`LazyShardedArray`).
"""

from __future__ import annotations

from ..tree.nodes import ShardedArrayRef as ShardedArrayRef
from ..tree.nodes import ShardRef as ShardRef
from .reading import LazyShardedArray as LazyShardedArray
from .regions import Region as Region
from .regions import check_tiling as check_tiling
from .regions import intersect as intersect
from .regions import slices_to_region as slices_to_region
