"""The manifest body every writer commits (spec §5.3), built in one place.

``Checkpoint.save``, the conformance writer (``CMD write``) and the case
generator all publish through :class:`~opencheckpoint.container.staged.StagedCheckpoint`
with a body from :func:`manifest_body`, so a new manifest field, or the order
of the fields in the file, changes here only. The producer is a parameter: a
writer names itself (the reference implementation by default, a conformance
case generator its fixed producer so cases are reproducible).

>>> body = manifest_body({}, checkpoint_id="c1", created_at="2026-01-01T00:00:00Z",
...                      producer={"name": "t", "version": "1"})
>>> list(body)
['format', 'format_version', 'checkpoint_id', 'created_at', 'producer', 'metadata', 'extensions', 'components']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .format.names import FORMAT_NAME, FORMAT_VERSION

__all__ = ["component_record", "manifest_body"]


def component_record(
    *,
    kind: str,
    kind_version: int,
    path: str,
    files: Mapping[str, Any],
    hints: Mapping[str, Any] | None = None,
    metadata: Any = None,
) -> dict[str, Any]:
    """One component record (spec §6.1): hints and metadata only when given."""
    record: dict[str, Any] = {"kind": kind, "kind_version": kind_version, "path": path, "files": dict(files)}
    if hints is not None:
        record["hints"] = dict(hints)
    if metadata is not None:
        record["metadata"] = metadata
    return record


def manifest_body(
    components: Mapping[str, Mapping[str, Any]],
    *,
    checkpoint_id: str,
    created_at: str,
    producer: Mapping[str, Any],
    metadata: Mapping[str, Any] | None = None,
    extensions: Mapping[str, Any] | None = None,
    format_version: int = FORMAT_VERSION,
) -> dict[str, Any]:
    """The manifest without its self-checksum, fields in the order the reference writer emits them."""
    return {
        "format": FORMAT_NAME,
        "format_version": format_version,
        "checkpoint_id": checkpoint_id,
        "created_at": created_at,
        "producer": dict(producer),
        "metadata": dict(metadata or {}),
        "extensions": dict(extensions or {}),
        "components": {name: dict(record) for name, record in components.items()},
    }
