"""The exact parser's reading of a sharded array node (tag 10, format version 2, spec ``opencheckpoint-v2.md``).

``[m, dtype, shape, shards]``: dtype a str of the dtype table, shape an array of
uints (the global shape), shards an array of shard records, each an untagged
array ``[file, start, size, offset, nbytes, crc32c]``. Any other shape of the
node is a :class:`~opencheckpoint.format.errors.TreeError` under R-SHD-4; the rules
on values (R-SHD-1, R-LIM-20, R-SHD-5) are checked by their functions in
:mod:`opencheckpoint.rules.sharded` while the node is read, so a hostile
shard count fails before its records are parsed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..format.errors import CheckpointError
from .nodes import ShardedArrayRef, ShardRef
from .treepath import ShardRecordPath, TreePath
from .wire import ARRAY_BYTES, STR_BYTES, itemsize

if TYPE_CHECKING:
    from .exact import _Parser

#: Every structural defect of a tag 10 node (field count, field types, shard record shape).
_STRUCTURE = "R-SHD-4"


def _raise(error: CheckpointError | None) -> None:
    if error is not None:
        raise error


def parse_sharded(parser: _Parser, fields: int, depth: int, path: TreePath) -> ShardedArrayRef:
    """Read the fields of a tag 10 node whose marker ``parser`` has just read."""
    from ..rules.sharded import SHD, record_ndim
    _raise(SHD.check("R-SHD-1", str(path), parser.kind_version))
    if fields != 3:
        parser.fail(f"a sharded array node has 3 fields after the marker, found {fields}", path, _STRUCTURE)
    parser.expect(STR_BYTES, "a str (dtype)", path.child(1), _STRUCTURE)
    dtype = parser.string(path.child(1))
    shape = _uints(parser, depth, path.child(2), "an array of unsigned ints (shape)")
    shards_path = path.child(3)
    parser.expect(ARRAY_BYTES, "an array of shard records", shards_path, _STRUCTURE)
    inner = parser.enter(depth, shards_path)
    # R-LIM-20 on the declared count, before R-TREE-1 finds the records missing (as R-LIM-11 does).
    count = parser.container_length(1, shards_path, lambda n: _raise(SHD.check("R-LIM-20", str(shards_path), n)))
    shards = []
    for index in range(count):
        where = ShardRecordPath(shards_path, index)
        parser.expect(ARRAY_BYTES, "a shard record [file, start, size, offset, nbytes, crc32c]", where, _STRUCTURE)
        record_depth = parser.enter(inner, where)
        if parser.container_length(1, where) != 6:
            parser.fail("a shard record has exactly 6 elements [file, start, size, offset, nbytes, crc32c]", where,
                        _STRUCTURE)
        parser.expect(STR_BYTES, "a str (file)", where.child(0), _STRUCTURE)
        file = parser.string(where.child(0))
        start = _uints(parser, record_depth, where.child(1), "an array of unsigned ints (start)")
        size = _uints(parser, record_depth, where.child(2), "an array of unsigned ints (size)")
        offset, nbytes, crc = (parser.uint(where.child(i), _STRUCTURE) for i in (3, 4, 5))
        if crc > 0xFFFFFFFF:
            parser.fail(f"crc32c {crc} does not fit 32 bits", where.child(5), _STRUCTURE)
        if record_ndim(len(shape), start, size) is not None:  # R-SHD-5; the path is rendered only for an error
            _raise(SHD.check("R-SHD-5", str(where), len(shape), start, size))
        shards.append(ShardRef(file, start, size, offset, nbytes, crc, where))
    itemsize(dtype, path.child(1))
    return ShardedArrayRef(dtype, shape, tuple(shards), path)


def _uints(parser: _Parser, depth: int, path: TreePath, what: str) -> tuple[int, ...]:
    """An array of unsigned ints (a shape, a start or a size)."""
    parser.expect(ARRAY_BYTES, what, path, _STRUCTURE)
    parser.enter(depth, path)
    length = parser.container_length(1, path)
    return tuple(parser.uint(path.child(i), _STRUCTURE) for i in range(length))
