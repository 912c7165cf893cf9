"""Sharded arrays (format version 2): values written in pieces by many processes, and the collective save.

Framework-free: no torch or JAX import. The torch ``Collective`` lives in
``opencheckpoint.adapters.torch_collective``.
"""

from ..tree.shard_plan import LocalShard, ShardedValue, rank_file
from .collective import Collective, CollectiveError, LocalCollective
from .collective_save import save_collective

__all__ = ["Collective", "CollectiveError", "LocalCollective", "LocalShard", "ShardedValue", "rank_file",
           "save_collective"]
