"""``inspect``: describe a checkpoint from its metadata alone (no array byte is read).

>>> import numpy as np, tempfile, os
>>> from opencheckpoint import Checkpoint
>>> path = os.path.join(tempfile.mkdtemp(), "ckpt")
>>> _ = Checkpoint(model={"w": np.zeros((2, 3), np.float32)}).save(path)
>>> summary = describe(path)
>>> summary["components"]["model"]["arrays"]
[{'path': '$.w', 'dtype': 'float32', 'shape': [2, 3], 'nbytes': 24}]
"""

from __future__ import annotations

import os
from typing import Any

from .errors import CheckpointError
from .manifest import KIND_VERSIONS
from .reader import CheckpointReader
from .tree.decode import decode_tree


def describe(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A JSON-ready summary: manifest fields, and per component its kind, files, arrays and sizes."""
    with CheckpointReader(path, check_files=False) as reader:
        manifest = reader.parsed.manifest
        summary: dict[str, Any] = {
            "path": str(path),
            "form": reader.source.form,
            "format_version": manifest.format_version,
            "checkpoint_id": manifest.checkpoint_id,
            "created_at": manifest.created_at,
            "producer": manifest.producer.model_dump(exclude_none=True),
            "metadata": manifest.metadata,
            "extensions": {k: v.model_dump() for k, v in manifest.extensions.items()},
            "components": {},
        }
        for name, record in manifest.components.items():
            entry: dict[str, Any] = {
                "kind": record.kind,
                "kind_version": record.kind_version,
                "bytes": sum(f.size for f in record.files.values()),
                "files": {rel: f.size for rel, f in record.files.items()},
            }
            if record.hints:
                entry["hints"] = record.hints
            if record.kind == "tree" and record.kind_version <= KIND_VERSIONS["tree"]:
                try:
                    decoded = decode_tree(reader.read_small(name, "tree.msgpack"))
                    entry["arrays"] = [
                        {"path": ref.path, "dtype": ref.dtype, "shape": list(ref.shape), "nbytes": ref.nbytes}
                        for ref in decoded.arrays
                    ]
                except CheckpointError as exc:
                    entry["error"] = str(exc)
            summary["components"][name] = entry
        return summary
