"""R-LIM-10 on the write side: the msgpack depth a node adds, so a save refuses what every reader would refuse.

Spec §8.8 counts every msgpack array and map: tagged nodes (a NumPy scalar, a big int, a named tuple and its
fields' map) and an array node's ``shape`` too, not only the dicts, lists and tuples of the saved value.
"""

from __future__ import annotations

from typing import Any, Final

import msgpack

from ..format.limits import TREE_MAX_DEPTH
from ..rules import required
from ..rules.tree import TREE

#: The msgpack levels an array node adds below its container: the node itself and its ``shape`` array.
ARRAY_NODE_DEPTH: Final = 2


def check_depth(deepest: int, path: str) -> None:
    """R-LIM-10 for a node whose deepest msgpack array or map would be at depth ``deepest``."""
    if deepest > TREE_MAX_DEPTH:
        raise required(TREE.check("R-LIM-10", path, deepest))


def wire_depth(node: Any) -> int:
    """The msgpack nesting a node adds (spec §8.8: each array or map 1, one more than its parent's).

    >>> wire_depth(5), wire_depth([1, [2, 3]]), wire_depth({"a": [1]}), wire_depth([])
    (0, 2, 2, 1)
    """
    if isinstance(node, (list, tuple)) and not isinstance(node, msgpack.ExtType):
        return 1 + max(map(wire_depth, node), default=0)
    if isinstance(node, dict):
        return 1 + max(map(wire_depth, node.values()), default=0)
    return 0
