"""What a save is asked to do (:class:`SaveRequest`) and what it will write (:class:`SavePlan`).

A :class:`SaveRequest` is a save's arguments, resolved by the caller
(:meth:`Checkpoint.save <opencheckpoint.Checkpoint.save>`): each component's
value, adapter and options (:class:`ComponentSpec`), the manifest fields
fixed now (:func:`manifest_fields`), the form, durability and ``overwrite``.
The plan stage turns it into a :class:`SavePlan`: the target, every
component's recorded writes, the byte total progress reports against, and
the arguments every rank of a collective save must share
(:meth:`SavePlan.agreement`).

>>> fields = manifest_fields(metadata={"step": 1}, checkpoint_id="c1", created_at="2026-01-01T00:00:00Z",
...                         producer={"name": "doc", "version": "1"})
>>> sorted(save_manifest({}, fields))[:3]
['checkpoint_id', 'components', 'created_at']
"""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..adapters.protocol import Adapter
from ..container.debris import release
from ..format.producer import default_producer, utc_timestamp
from ..manifest_builder import manifest_body
from ..options import CheckpointOptions
from .recording import ComponentPlan
from .target import Target

__all__ = ["ComponentSpec", "SavePlan", "SaveRequest", "manifest_fields", "save_manifest"]


@dataclass(frozen=True)
class ComponentSpec:
    """One component to save: its live value, the adapter chosen for it, its merged options."""

    name: str
    value: Any
    adapter: Adapter
    options: CheckpointOptions
    #: the component's ``sha256`` choice resolved against the checkpoint's
    sha256: bool


@dataclass
class SaveRequest:
    """A save's resolved arguments (what every stage needs besides the target)."""

    components: list[ComponentSpec]
    #: the manifest fields as the caller gave them: ``metadata``, ``checkpoint_id``, ``created_at``, ``producer``
    given: dict[str, Any]
    form: str = "directory"
    durable: bool = True
    overwrite: bool = True
    #: the manifest fields besides the components, defaults taken when the request is made
    fields: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.fields = manifest_fields(**self.given)


def manifest_fields(*, metadata: Any, checkpoint_id: str | None, created_at: str | None,
                    producer: Mapping[str, Any] | None) -> dict[str, Any]:
    """The manifest fields a save fixes besides the components; the defaults are taken now."""
    return {"checkpoint_id": checkpoint_id or uuid.uuid4().hex, "created_at": created_at or utc_timestamp(),
            "producer": default_producer() if producer is None else producer, "metadata": metadata}


def save_manifest(records: dict[str, dict[str, Any]], fields: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest body of a save: format version 2 only when a tree holds a sharded array (R-SHD-13)."""
    sharded = any(r["kind"] == "tree" and r["kind_version"] == 2 for r in records.values())
    return manifest_body(records, format_version=2 if sharded else 1, **fields)


def _digest(value: Any) -> str | None:
    """A SHA-256 of a JSON value's canonical text (large mappings are compared by digest)."""
    if value is None:
        return None
    text = json.dumps(value, sort_keys=True, default=repr, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class SavePlan:
    """A planned save: every component's writes recorded, the byte total known, nothing written yet."""

    target: Target
    request: SaveRequest
    components: list[ComponentPlan]
    #: where files adapters dumped themselves wait for the write stage (removed by :meth:`release`)
    scratch: Path
    #: extents copied into host memory by an async save's snapshot (:mod:`.snapshot`)
    arena: Any = field(default=None, repr=False)

    @property
    def fields(self) -> dict[str, Any]:
        return self.request.fields

    @property
    def extents(self) -> list[Any]:
        """Every distinct array extent of the planned trees, in write order."""
        return [extent for component in self.components for extent in component.extents]

    @property
    def nbytes(self) -> int:
        """The array bytes the write stage moves (each extent 64-byte aligned): progress's total."""
        return sum(component.nbytes for component in self.components)

    def agreement(self) -> dict[str, Any]:
        """The plan as every rank of a collective save must share it, as JSON values (metadata and
        producer as digests: they may be large; the coordinator's values are stored)."""
        given, request = self.request.given, self.request
        return {"checkpoint_id": given["checkpoint_id"], "created_at": given["created_at"],
                "metadata": _digest(given["metadata"]),
                "producer": None if given["producer"] is None else _digest(dict(given["producer"])),
                "components": [c.name for c in self.components], "adapters": [c.kind for c in self.components],
                "sha256": [spec.sha256 for spec in request.components], "format": request.form,
                "overwrite": request.overwrite, "durable": request.durable}

    def release(self) -> None:
        """Drop the plan's scratch directory (the plan is spent)."""
        shutil.rmtree(self.scratch, ignore_errors=True)
        release(self.scratch)

