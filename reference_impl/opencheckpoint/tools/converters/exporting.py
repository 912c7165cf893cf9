"""Export a checkpoint's arrays as one flat safetensors or ``torch.save`` file.

Arrays are named by their tree path: ``component.key.subkey.0`` (list and tuple
items by index); with ``component=`` only that component is exported and the
names are the bare tree paths (``layer.weight``), ready for ``load_state_dict``.
Non-array leaves (numbers, strings, bools, None) go into safetensors metadata as
JSON text (or into the torch dict as values); what fits in neither (bytes,
PRNG keys, complex numbers, ``files`` components) is listed in
:attr:`ExportResult.skipped`, never dropped silently.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np

from ...container.output_file import check_output_file, write_output_file
from ...progress import ProgressArg, advance, files_bytes, reporting
from ...read.reader import CheckpointReader
from ...tree.nodes import NamedTupleValue
from ._common import ConversionError, require
from .safetensors_file import is_safetensors
from .torch_file import is_torch_file

ExportFormat = Literal["safetensors", "torch"]
EXPORT_FORMATS: Final = ("safetensors", "torch")
#: safetensors metadata key holding the source checkpoint's manifest metadata (JSON text).
MANIFEST_METADATA_KEY: Final = "opencheckpoint.metadata"
_SCALARS = (bool, int, float, str, type(None))


@dataclass
class ExportResult:
    """What :func:`export` wrote: the file, the arrays, the values kept as metadata, and what it left out."""

    path: Path
    tensors: list[str] = field(default_factory=list)
    values: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


#: Longest name one exported array or value may have (UTF-8 bytes). Names are tree paths joined with dots:
#: a deep tree of long keys would give every leaf a name of depth x key length.
EXPORT_MAX_NAME_BYTES: Final = 64 * 1024
#: Most bytes all names of one export may take together: below safetensors' 100,000,000-byte header limit,
#: and what keeps an export's memory within a constant of the checkpoint's size (R-LIM-19).
EXPORT_MAX_NAMES_BYTES: Final = 64 * 1024 * 1024


class _Names:
    """Counts the bytes of the names an export makes, refusing one before it is built (linear memory)."""

    def __init__(self, src: str, component: str) -> None:
        self.src = src
        self.component = component
        self.total = 0

    def check(self, prefix: str, size: int) -> None:
        if size > EXPORT_MAX_NAME_BYTES:
            raise ConversionError(f"the export name of the value at {prefix[:200]!r}... would be {size} bytes; "
                                  f"names may take at most {EXPORT_MAX_NAME_BYTES} bytes (shorten the keys, "
                                  "or export one component)", file=self.src, field=f"components.{self.component}")
        self.total += size
        if self.total > EXPORT_MAX_NAMES_BYTES:
            raise ConversionError(f"the export names would take more than {EXPORT_MAX_NAMES_BYTES} bytes "
                                  f"(reached at {prefix[:200]!r}); the target file's header cannot hold them",
                                  file=self.src, field=f"components.{self.component}")


def _leaves(value: Any, prefix: str, names: _Names, size: int | None = None) -> Iterator[tuple[str, Any]]:
    """``(name, leaf)`` for every leaf below ``value``; ``size`` is the UTF-8 length of ``prefix``."""
    if size is None:
        size = len(prefix.encode("utf-8", "surrogatepass"))
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, NamedTupleValue):
        items = value._asdict().items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        names.check(prefix, size)
        yield prefix, value
        return
    for key, item in items:
        text = str(key)
        child_size = size + bool(prefix) + len(text.encode("utf-8", "surrogatepass"))
        if child_size > EXPORT_MAX_NAME_BYTES:
            names.check(prefix, child_size)  # raises before the name is built
        yield from _leaves(item, f"{prefix}.{text}" if prefix else text, names, child_size)


def export(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    to: ExportFormat = "safetensors",
    component: str | None = None,
    progress: ProgressArg = None,
    overwrite: bool = True,
) -> ExportResult:
    """Write the arrays of checkpoint ``src`` (every component, or ``component``) to ``dst``.

    The output loads with ``safetensors`` / ``torch.load(weights_only=True)``.
    Names that collide (``a.b`` from ``{"a.b": x}`` and ``{"a": {"b": y}}``) raise
    :class:`ConversionError` rather than one overwriting the other. ``progress``: of the read,
    ``True`` (a bar on a terminal) or ``f(done_bytes, total_bytes)``, per component.

    As a save: an existing ``dst`` is replaced only with ``overwrite`` and only if it is a file of the
    format written (an earlier export); anything else there (a checkpoint, a folder, another file) raises
    :class:`~opencheckpoint.errors.TargetExists` before anything is read. The file is written under a
    hidden name beside ``dst`` and renamed into place.
    """
    if to not in EXPORT_FORMATS:
        raise ConversionError(f"unknown export format {to!r}; one of {', '.join(EXPORT_FORMATS)}", field="to")
    target = Path(dst)
    check_output_file(target, kind=f"{to} file", overwrite=overwrite, recognised=_RECOGNISED[to])
    collected = _Collected(str(src), to, ExportResult(path=target))
    with CheckpointReader(src) as reader:
        names = list(reader.components)
        if component is not None:
            reader.record(component)  # raises, naming the components there are
            names = [component]
        with reporting(progress, files_bytes(reader.record(n) for n in names), f"exporting {target.name}"):
            for name in names:
                collected.component(reader, name, "" if component is not None else name)
        manifest_metadata = reader.manifest.get("metadata") or {}
    result = collected.result
    result.tensors = list(collected.tensors)
    result.values = list(collected.values)
    if to == "safetensors":
        write_output_file(target, lambda out: _write_safetensors(out, collected.tensors, collected.values,
                                                                 manifest_metadata))
    else:
        write_output_file(target, lambda out: _write_torch(out, collected.tensors, collected.values))
    return result


#: What an existing export target must be for ``overwrite`` to replace it, per output format.
_RECOGNISED: Final = {"safetensors": is_safetensors, "torch": is_torch_file}


class _Collected:
    """What an export gathers from the checkpoint before it writes: arrays, plain values, what it left out."""

    def __init__(self, src: str, to: ExportFormat, result: ExportResult) -> None:
        self.src = src
        self.to = to
        self.result = result
        self.tensors: dict[str, np.ndarray] = {}
        self.values: dict[str, Any] = {}

    def component(self, reader: CheckpointReader, name: str, prefix: str) -> None:
        """Every leaf of one component under its export name (``prefix`` + tree path); ``json`` values whole."""
        record = reader.record(name)
        if record.kind == "json":
            self.values[prefix or name] = reader.json(name)
            return
        if record.kind != "tree":
            self.result.skipped[prefix or name] = f"a {record.kind!r} component (files, not arrays)"
            return
        stored = reader.read(name)
        advance(files_bytes([record]))
        for path, leaf in _leaves(stored, prefix, _Names(self.src, name)):
            if path in self.tensors or path in self.values:
                raise ConversionError(f"two values export under the name {path!r}", file=self.src,
                                      field=f"components.{name}")
            self.leaf(path, leaf)

    def leaf(self, path: str, leaf: Any) -> None:
        """An array becomes a tensor, a finite scalar a value; anything else is listed as skipped, with why."""
        if isinstance(leaf, np.ndarray):
            if self.to == "safetensors" and leaf.dtype == np.complex128:
                self.result.skipped[path] = "complex128 has no safetensors dtype"
            else:
                self.tensors[path] = np.require(leaf, requirements="C")  # keeps 0-d arrays 0-d
        elif isinstance(leaf, np.generic):
            self.tensors[path] = np.asarray(leaf)
        elif isinstance(leaf, _SCALARS) and not (isinstance(leaf, float) and not np.isfinite(leaf)):
            self.values[path] = leaf
        else:
            self.result.skipped[path] = f"a {type(leaf).__name__} has no {self.to} equivalent"


def _write_safetensors(target: Path, tensors: dict[str, np.ndarray], values: dict[str, Any],
                       manifest_metadata: dict[str, Any]) -> None:
    require("safetensors", "peers", "exporting to safetensors")
    from safetensors.numpy import save_file

    metadata = {key: json.dumps(value) for key, value in values.items()}
    original = manifest_metadata.get("safetensors_metadata")
    if isinstance(original, dict):
        # A converted safetensors file gets its own __metadata__ back, unchanged.
        metadata.update({str(k): str(v) for k, v in original.items()})
    rest = {k: v for k, v in manifest_metadata.items() if k != "safetensors_metadata"}
    if rest:
        metadata[MANIFEST_METADATA_KEY] = json.dumps(rest)
    save_file(tensors, str(target), metadata=metadata or None)


def _write_torch(target: Path, tensors: dict[str, np.ndarray], values: dict[str, Any]) -> None:
    torch = require("torch", "torch", "exporting to torch.save")
    from ...adapters.torch import numpy_to_tensor

    state: dict[str, Any] = {name: numpy_to_tensor(array, share=False) for name, array in tensors.items()}
    state.update(values)
    torch.save(state, target)
