"""``inspect``: describe a checkpoint and check its structure, without reading any array byte.

Besides the description, :func:`describe` runs every check of the spec's
validation order that needs no array byte (§15 steps 1-15: manifest, paths,
inventory with entry types and sizes, kinds, payload checksums, tree
documents, array layout) and lists each error in ``summary["errors"]``; only
the content checks of step 16 (array and file checksums, padding) are left
to ``validate``. Its time and memory are linear in the bytes it reads: the
manifest and the ``tree.msgpack`` / ``value.json`` files.

>>> import numpy as np, tempfile, os
>>> from opencheckpoint import Checkpoint
>>> path = os.path.join(tempfile.mkdtemp(), "ckpt")
>>> _ = Checkpoint(model={"w": np.zeros((2, 3), np.float32)}).save(path)
>>> summary = describe(path)
>>> summary["components"]["model"]["arrays"], summary["ok"]
([{'path': '$.w', 'dtype': 'float32', 'shape': [2, 3], 'nbytes': 24}], True)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..container.base import identity
from ..format.errors import CheckpointError
from ..location import Location, PathArg, resolve_location
from ..read.opening import check_inventory, replaced_while_opening
from ..read.steps import CheckpointSteps
from ..read.validate import ValidationReport, check_structure, shared_extents


def describe(path: PathArg) -> dict[str, Any]:
    """A JSON-ready summary: manifest fields, per component its kind, files, arrays and sizes, and
    ``ok`` / ``errors``: every structural error found (steps 10-15 of §15).

    Raises the :class:`CheckpointError` of steps 1-9 when the manifest itself cannot be trusted. Errors
    found while another process replaced the checkpoint (the name resolves to another entry afterwards:
    the files listed may have been deleted half-way) are a race: described once more (R-RDR-13), then
    :class:`~opencheckpoint.format.errors.ConcurrentModification`.
    """
    location = resolve_location(path)
    if not isinstance(location, Path):
        return _describe_once(location)  # a remote location: the identity of a name is a local file system's
    found = ""
    for _attempt in range(2):
        before = identity(location)
        try:
            summary = _describe_once(location)
        except CheckpointError as exc:  # holding the listed files open found one gone (R-RDR-14)
            if identity(location) == before:
                raise
            found = str(exc)
            continue
        if summary["ok"] or identity(location) == before:
            return summary
        found = f"{summary['errors'][0]['error']}: {summary['errors'][0]['message']}"
    raise replaced_while_opening(location, "another process replaced or is writing the checkpoint while "
                                 f"it was being inspected, twice in a row; the last attempt found {found}")


def _describe_once(path: Location) -> dict[str, Any]:
    with CheckpointSteps(path, check_files=False) as reader:
        report = ValidationReport(str(path))
        layouts: dict[str, Any] = {}
        issues: list[CheckpointError] = []
        try:
            check_inventory(reader.source, reader.parsed, issues)  # steps 10-11: entry types, sizes
        except CheckpointError as exc:
            for error in (exc, *issues):
                report.add(error)
        else:
            reader.source.pin(reader.parsed.file_paths())  # read this checkpoint even if replaced now
            layouts, _ = check_structure(reader, report)  # steps 12-15 for every component
        manifest = reader.parsed.manifest
        summary: dict[str, Any] = {
            "path": str(path),
            "form": reader.source.form,
            "format_version": reader.parsed.written_version,
            "checkpoint_id": manifest.checkpoint_id,
            "created_at": manifest.created_at,
            "producer": {k: v for k, v in vars(manifest.producer).items() if v is not None},
            "metadata": manifest.metadata,
            # The records' members read directly (``model_dump`` would build pydantic's serializers: start-up).
            "extensions": {k: dict(vars(v)) for k, v in manifest.extensions.items()},
            "components": {},
            "ok": report.ok,
            "errors": [issue.__dict__ for issue in report.errors],
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
            if name in layouts:
                decoded = layouts[name][0]
                shared = shared_extents(decoded.arrays)  # tied arrays: listed per node, as validate counts them
                entry["arrays"] = [
                    {"path": ref.path, "dtype": ref.dtype, "shape": list(ref.shape), "nbytes": ref.nbytes,
                     **({"shares": shared[index]} if index in shared else {})}
                    for index, ref in enumerate(decoded.arrays)
                ] + [
                    {"path": ref.path, "dtype": ref.dtype, "shape": list(ref.shape), "nbytes": ref.nbytes,
                     "shards": len(ref.shards)}
                    for ref in decoded.sharded
                ]
                entry["shared_arrays"] = len(shared)
            summary["components"][name] = entry
        return summary
