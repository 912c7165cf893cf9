"""Hand-built checkpoints of format version 2 (sharded arrays) for tests and conformance cases.

A small builder of the bytes the spec defines (``opencheckpoint-v2.md``):
msgpack tree documents with tag 6 and tag 10 nodes, ``data.bin`` and
``shards/rank-NNNNN.bin`` files with 64-byte aligned extents, and the manifest
from :func:`~opencheckpoint.manifest_builder.manifest_body`. It checks nothing:
must-reject cases and tests build broken files with it on purpose.

>>> import numpy as np, tempfile, os
>>> from opencheckpoint import read_component
>>> files = DataFiles()
>>> node = files.sharded(np.arange(6.0).reshape(2, 3), [("shards/rank-00000.bin", (0, 0), (1, 3)),
...                                                    ("shards/rank-00001.bin", (1, 0), (1, 3))])
>>> path = write_checkpoint(os.path.join(tempfile.mkdtemp(), "c"), {"w": ({"x": node}, files)})
>>> read_component(path, "w")["x"].tolist()
[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from ..format.dtypes import numpy_dtype
from ..format.integrity import crc32c_of, format_crc32c
from ..format.limits import ALIGNMENT
from ..format.manifest import serialize_manifest
from ..manifest_builder import component_record, manifest_body

#: Tag markers (``c7 00 T``).
ARRAY = msgpack.ExtType(6, b"")
SHARDED = msgpack.ExtType(10, b"")
PRODUCER = {"name": "opencheckpoint-sharded-test-builder", "version": "1"}


def dtype_name(array: np.ndarray) -> str:
    """The dtype table name of a NumPy array's dtype (``float32``, ``bfloat16``...)."""
    from ..format.dtypes import DTYPES

    for name in DTYPES:
        if numpy_dtype(name) == array.dtype:
            return name
    raise ValueError(f"no dtype table name for {array.dtype}")


class DataFiles:
    """The data files of one tree component, filled extent by extent (each at a 64-byte aligned offset)."""

    def __init__(self) -> None:
        self.files: dict[str, bytearray] = {"data.bin": bytearray()}

    def put(self, file: str, data: bytes) -> tuple[int, int, int]:
        """Append ``data`` to ``file`` at the next aligned offset; (offset, nbytes, crc32c) as nodes record them."""
        buffer = self.files.setdefault(file, bytearray())
        if not data:
            return 0, 0, 0
        offset = -(-len(buffer) // ALIGNMENT) * ALIGNMENT
        buffer.extend(bytes(offset - len(buffer)))
        buffer.extend(data)
        return offset, len(data), crc32c_of(data)

    def array(self, array: np.ndarray) -> list[Any]:
        """A tag 6 node for ``array``, its bytes in ``data.bin``."""
        array = np.ascontiguousarray(array)
        return [ARRAY, dtype_name(array), list(array.shape), *self.put("data.bin", array.tobytes())]

    def sharded(self, array: np.ndarray, regions: Sequence[tuple[str, Sequence[int], Sequence[int]]]) -> list[Any]:
        """A tag 10 node for ``array``: one shard record per ``(file, start, size)``, its bytes in ``file``."""
        records = []
        for file, start, size in regions:
            part = np.ascontiguousarray(array[tuple(slice(s, s + n) for s, n in zip(start, size, strict=True))])
            records.append([file, list(start), list(size), *self.put(file, part.tobytes())])
        return [SHARDED, dtype_name(array), list(array.shape), records]


def write_checkpoint(path: str | os.PathLike[str], trees: Mapping[str, tuple[Any, DataFiles]], *,
                     format_version: int = 2, kind_version: int | Mapping[str, int] = 2,
                     checkpoint_id: str = "sharded-test",
                     created_at: str = "2026-01-01T00:00:00Z", producer: Mapping[str, Any] = PRODUCER,
                     components: Mapping[str, Mapping[str, Any]] | None = None) -> Path:
    """Write a directory checkpoint whose tree components hold exactly these documents and data files.

    ``trees`` maps component names to (root node, its :class:`DataFiles`); every data
    file the builder holds is listed. ``kind_version`` is one for all, or per component;
    ``components`` adds further ready records.
    """
    root = Path(path)
    records: dict[str, Any] = {}
    for name, (node, files) in trees.items():
        directory = root / "components" / name
        entries: dict[str, Any] = {}
        for rel, data in {"tree.msgpack": msgpack.packb(node, use_bin_type=True), **files.files}.items():
            target = directory / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(bytes(data))
            entries[rel] = {"size": len(data), "crc32c": format_crc32c(crc32c_of(bytes(data)))}
        version = kind_version if isinstance(kind_version, int) else kind_version[name]
        records[name] = component_record(kind="tree", kind_version=version, path=f"components/{name}",
                                         files=entries)
    records.update(components or {})
    body = manifest_body(records, checkpoint_id=checkpoint_id, created_at=created_at, producer=producer,
                         format_version=format_version)
    root.mkdir(parents=True, exist_ok=True)
    (root / "manifest.json").write_bytes(serialize_manifest(body))
    return root
