"""The structure of a planned tree, without its values: what every rank of a collective save must agree on.

In a collective save the coordinator writes the one ``tree.msgpack`` and the
plain (tag-6) arrays of every tree; another rank's tree is never stored. A rank
whose tree differs from the coordinator's would have its difference dropped in
silence, so each rank sends :func:`skeleton_digest` of its tree and the
coordinator refuses a mismatch (spec R-WTR-3). The skeleton holds the paths (map
keys in order, list and tuple lengths), the kind of every node, the type name of
a named tuple, and the dtype and shape of every array; never a value.

The values are compared too (:func:`value_checksums`), since only the
coordinator's are stored: a value that differs per rank (a dataloader position,
a per-rank RNG state in a plain array) would otherwise be saved with rank 0's
value in silence. Each rank sends one CRC-32C per leaf of its tree (a plain
array's is the checksum of its bytes, the one its node stores; a scalar's that of
its msgpack node), in the order of the skeleton; shard data (tag 10) is each
rank's own and is left out. :func:`first_difference` names the first leaf that
differs.

>>> import numpy as np
>>> from opencheckpoint.tree.encode import TreePlan
>>> a = skeleton_digest(TreePlan({"w": np.zeros(3), "step": 1}).root)
>>> a == skeleton_digest(TreePlan({"w": np.ones(3), "step": 7}).root)
True
>>> a == skeleton_digest(TreePlan({"w": np.zeros(4), "step": 1}).root)
False
>>> mine = TreePlan({"w": np.zeros(3), "step": 1})
>>> theirs = TreePlan({"w": np.zeros(3), "step": 7})
>>> first_difference(mine.root, value_checksums(mine), value_checksums(theirs))
'$.step'
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import msgpack
import numpy as np

from ..format.integrity import crc32c
from .nodes import Tag
from .per_rank import is_per_rank_node

if TYPE_CHECKING:
    from .encode import TreePlan

__all__ = ["first_difference", "skeleton_digest", "value_checksums"]

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
    if is_per_rank_node(node):
        return "PerRank"  # each rank's own value: neither its structure nor its values are compared
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


def value_checksums(plan: TreePlan) -> str:
    """One CRC-32C per value leaf of ``plan`` in document order (base64 of 4 little-endian bytes each).

    A plain array's is the CRC-32C of its bytes: the one its node holds once ``data.bin`` is written (the
    coordinator), computed here otherwise (a rank that writes no ``data.bin``). Shard data is left out.
    """
    written: dict[int, int] = {}
    for extent in plan.data.extents:
        crc = extent.nodes[0][5] if extent.nodes and extent.nodes[0][5] else crc32c(extent.buffer)
        for node in extent.nodes:
            written[id(node)] = crc
    values = np.fromiter((crc for _, crc in _leaves(plan.root, "$", written)), dtype="<u4")
    return base64.b64encode(values.tobytes()).decode("ascii")


def first_difference(root: Any, ours: str, theirs: str) -> str | None:
    """The tree path of the first leaf whose checksum differs between ``ours`` and ``theirs`` (same skeleton)."""
    if ours == theirs:
        return None
    mine = np.frombuffer(base64.b64decode(ours), dtype="<u4")
    other = np.frombuffer(base64.b64decode(theirs), dtype="<u4")
    if len(mine) != len(other):
        return "$"
    index = int(np.flatnonzero(mine != other)[0])
    for position, (path, _) in enumerate(_leaves(root, "$", {})):
        if position == index:
            return path
    return "$"  # pragma: no cover  (the checksums were made from this tree)


def _leaves(node: Any, path: str, written: dict[int, int]) -> Iterator[tuple[str, int]]:
    """(path, CRC-32C) of every value leaf below ``node``, in document order; tag-10 nodes are skipped."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, f"{path}.{key}" if type(key) is str else f"{path}[{key}]", written)
        return
    if isinstance(node, list) and node and isinstance(node[0], msgpack.ExtType):
        tag = node[0].code
        if tag == Tag.SHARDED_ARRAY or is_per_rank_node(node):
            return
        if tag == Tag.ARRAY:
            yield path, written[id(node)] if id(node) in written else int(node[5])
            return
        if tag == Tag.TUPLE:
            for index, item in enumerate(node[1:]):
                yield from _leaves(item, f"{path}[{index}]", written)
            return
        if tag in (Tag.NAMED_TUPLE, Tag.PRNG_KEY):
            yield from _leaves(node[2], path if tag == Tag.NAMED_TUPLE else f"{path}.data", written)
            return
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _leaves(item, f"{path}[{index}]", written)
        return
    yield path, crc32c(msgpack.packb(node, use_bin_type=True, strict_types=False))
