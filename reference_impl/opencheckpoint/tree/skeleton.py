"""The structure of a planned tree, without its values: what every rank of a collective save must agree on.

In a collective save the coordinator writes the one ``tree.msgpack`` and the
plain (tag-6) arrays of every tree; another rank's tree is never stored. A rank
whose tree differs from the coordinator's would have its difference dropped in
silence, so each rank sends :func:`skeleton_digest` of its tree and the
coordinator refuses a mismatch (spec R-WTR-3). The skeleton holds the paths (map
keys in order, list and tuple lengths), the kind of every node, the type name of
a named tuple, and the dtype and shape of every array; never a value: plain
arrays and scalars whose values differ per rank keep the coordinator's (the
documented rule), and shard offsets and checksums are each rank's own.

>>> import numpy as np
>>> from opencheckpoint.tree.encode import TreePlan
>>> a = skeleton_digest(TreePlan({"w": np.zeros(3), "step": 1}).root)
>>> a == skeleton_digest(TreePlan({"w": np.ones(3), "step": 7}).root)
True
>>> a == skeleton_digest(TreePlan({"w": np.zeros(4), "step": 1}).root)
False
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgpack

from .nodes import Tag

__all__ = ["skeleton_digest"]

#: Tags whose node keeps its dtype (element 1) and shape (element 2) in the skeleton.
_ARRAYS = (Tag.ARRAY, Tag.SHARDED_ARRAY)


def skeleton_digest(root: Any) -> str:
    """The SHA-256 (hex) of the structure of the planned node ``root`` (a :attr:`TreePlan.root`)."""
    packed = msgpack.packb(_skeleton(root), use_bin_type=True, strict_types=False)
    return hashlib.sha256(packed).hexdigest()


def _skeleton(node: Any) -> Any:
    """``node`` with each value replaced by its kind; arrays by kind, dtype and shape."""
    if isinstance(node, dict):
        return ["map", [[key, _skeleton(value)] for key, value in node.items()]]
    if isinstance(node, list):
        if node and isinstance(node[0], msgpack.ExtType):
            return _tagged(Tag(node[0].code), node)
        return ["list", [_skeleton(item) for item in node]]
    return type(node).__name__  # None, bool, int, float, str, bytes: the value itself is not compared


def _tagged(tag: Tag, node: list[Any]) -> Any:
    if tag in _ARRAYS:
        return [tag.name, node[1], list(node[2])]
    if tag is Tag.TUPLE:
        return [tag.name, [_skeleton(item) for item in node[1:]]]
    if tag is Tag.NAMED_TUPLE:
        return [tag.name, node[1], _skeleton(node[2])]
    if tag is Tag.PRNG_KEY:
        return [tag.name, node[1], _skeleton(node[2])]
    if tag is Tag.SCALAR:
        return [tag.name, node[1]]  # a NumPy scalar's dtype is structure, its value is not
    return tag.name  # a big int, a complex, a dtype: a value of that kind
