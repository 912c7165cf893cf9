"""Write a checkpoint whose canonical rendering (Appendix B) is a given document.

Used by ``CMD write`` of the reference implementation (spec §17.2) and by the
case generator. The checkpoint is staged and published atomically like every
write of the reference implementation (spec §12).

>>> import tempfile, os
>>> from opencheckpoint.conformance.canonical import render_checkpoint, renderings_equal
>>> doc = {"rendering": 1, "form": "directory", "format_version": 1, "checkpoint_id": "doc-1",
...        "created_at": "2026-01-01T00:00:00Z", "producer": {"name": "t", "version": "1"},
...        "metadata": {}, "extensions": {}, "components": {"c": {"kind": "json", "kind_version": 1,
...        "path": "components/c", "files": {}, "content": {"type": "json", "value": [1, 2.5]}}}}
>>> out = write_rendering(doc, os.path.join(tempfile.mkdtemp(), "ckpt"))
>>> renderings_equal(writer_view(render_checkpoint(out)), writer_view(doc))
True
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..adapters.base import ComponentWriter
from ..container.staged import StagedCheckpoint
from ..format.errors import UnsupportedValue
from ..manifest_builder import component_record, manifest_body
from .canonical import RenderingError, blob_bytes, node_value, writer_view

__all__ = ["write_rendering", "writer_view"]


_NO_VALUE = object()


def _write_component(record: Mapping[str, Any], root: Path, *, durable: bool, value: Any = _NO_VALUE) -> dict[str, Any]:
    """Write one rendered component through the same :class:`ComponentWriter` adapters use."""
    recorded = record.get("files", {})
    writer = ComponentWriter(root / record["path"], durable=durable,
                             sha256=any("sha256" in entry for entry in recorded.values()))
    writer.directory.mkdir(parents=True, exist_ok=True)
    content = record["content"]
    if content["type"] == "tree":
        writer.write_tree(node_value(content["root"]) if value is _NO_VALUE else value)
    elif content["type"] == "json":
        writer.write_json(content["value"])
    else:
        for rel, entry in content["files"].items():
            writer.write_file(rel, blob_bytes(entry), sha256="sha256" in recorded.get(rel, {}))
    # The rendering's hints and metadata go through as given (an empty hints object stays in the manifest).
    return component_record(kind=record["kind"], kind_version=record["kind_version"], path=record["path"],
                            files=writer.files, hints=record.get("hints"), metadata=record.get("metadata"))


def write_rendering(
    rendering: Mapping[str, Any],
    path: str | os.PathLike[str],
    *,
    producer: Mapping[str, Any] | None = None,
    durable: bool = True,
    values: Mapping[str, Any] | None = None,
    overwrite: bool = True,
) -> Path:
    """Write ``rendering`` as a checkpoint at ``path`` (archive form when it ends in ``.zip``).

    ``producer`` replaces the rendering's producer (a writer names itself).
    ``values`` maps tree component names to the values to store instead of
    rebuilding them from the rendering (which may render big bytes by digest only).
    ``overwrite``: as :meth:`~opencheckpoint.Checkpoint.save` (a checkpoint at ``path`` may be replaced).
    """
    target = Path(path).absolute()
    form = "archive" if target.suffix == ".zip" else "directory"
    with StagedCheckpoint(target, form=form, durable=durable, overwrite=overwrite) as staged:
        try:
            records = {name: _write_component(record, staged.directory, durable=durable,
                                              value=(values or {}).get(name, _NO_VALUE))
                       for name, record in rendering["components"].items()}
        except RenderingError as exc:
            raise UnsupportedValue(str(exc)) from None
        staged.commit(manifest_body(
            records, checkpoint_id=rendering["checkpoint_id"], created_at=rendering["created_at"],
            producer=producer if producer is not None else rendering["producer"], metadata=rendering["metadata"],
            extensions=rendering["extensions"], format_version=rendering["format_version"]))
    return target
