"""What every converter shares: the result of reading a foreign checkpoint, the error class, lazy imports."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...adapters.base import Adapter, ComponentWriter, DumpLoadAdapter
from ...format.errors import CheckpointError


class ConversionError(CheckpointError):
    """A foreign file cannot be converted (or exported) faithfully; the message says why and what to do."""

    error_class = "ConversionError"


@dataclass
class Foreign:
    """A foreign checkpoint read into values the :class:`~opencheckpoint.Checkpoint` writer stores.

    Attributes:
        components: component name -> value (a tree, a JSON value, or :class:`CopiedFiles`).
        metadata: manifest metadata of the converted checkpoint (``converted_from`` and format extras).
        adapters: component name -> adapter, where the automatic choice is not the right one.
    """

    components: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    adapters: dict[str, Adapter] = field(default_factory=dict)
    #: source file -> why it was not converted (a pickle, never unpickled); recorded and warned about
    not_converted: dict[str, str] = field(default_factory=dict)


class ConversionWarning(UserWarning):
    """Part of a foreign checkpoint was left out (a pickle) or may need care; the message says what and why."""


#: Why a pickle in a foreign checkpoint is never converted.
PICKLE_REASON = ("a Python pickle: OpenCheckpoint never unpickles (loading it could run any code), so it is "
                 "not converted")


class CopiedFiles:
    """Opaque files of a foreign component, stored as a ``files`` component byte for byte.

    It has ``dump``/``load`` so the stock :class:`DumpLoadAdapter` stores it; loading
    it back is for :meth:`~opencheckpoint.CheckpointReader.iter_files`, not for this object.
    """

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files

    def dump(self, directory: Path) -> None:
        for rel, data in self.files.items():
            target = directory / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)

    def load(self, directory: Path) -> None:
        self.files = {p.relative_to(directory).as_posix(): p.read_bytes()
                      for p in sorted(directory.rglob("*")) if p.is_file()}


class FilesAdapter(DumpLoadAdapter):
    """:class:`DumpLoadAdapter` without a class hint (the files are the foreign format's, not an object's)."""

    def save(self, value: Any, writer: ComponentWriter) -> None:
        writer.directory.mkdir(parents=True, exist_ok=True)
        value.dump(writer.directory)
        writer.inventory_directory()


def require(module: str, extra: str, what: str) -> Any:
    """Import an optional dependency, or raise :class:`ConversionError` with the install hint."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConversionError(f"{what} needs the {module!r} package: pip install 'opencheckpoint[{extra}]'",
                              ) from None


def converted_from(source: str, path: Path) -> dict[str, Any]:
    """The ``converted_from`` record put into the manifest metadata of every converted checkpoint."""
    return {"format": source, "name": path.name}
