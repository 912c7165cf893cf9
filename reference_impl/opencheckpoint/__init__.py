"""OpenCheckpoint: an open, versioned, framework-neutral file format for ML and RL training state.

The package imports neither torch nor JAX; their adapters load when an
object of that framework is saved or a component is read with
``framework="torch"`` / ``"jax"``.

>>> from opencheckpoint import Checkpoint, convert, diff, export, read_component, validate
>>> from opencheckpoint import CheckpointOptions, is_checkpoint, manifest, register_migration
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# The error classes are imported now (they are small and every caller catches them); every other name
# is imported on first use (PEP 562), so `opencheckpoint --help` and a script that needs one function do
# not pay for NumPy, pydantic and ml_dtypes until they use something that needs them.
from .errors import (
    ArchiveError,
    ArrayLayoutError,
    CheckpointError,
    ExtraFile,
    IncompatibleComponent,
    IntegrityError,
    LimitExceeded,
    ManifestError,
    MissingFile,
    NotACheckpoint,
    TargetExists,
    TreeError,
    UnknownComponentKind,
    UnknownDtype,
    UnsafePath,
    UnsupportedExtension,
    UnsupportedLocation,
    UnsupportedValue,
    UnsupportedVersion,
)

#: Public name -> the module that defines it, imported when the name is first used.
_LAZY: dict[str, str] = {
    "LazyArray": ".arrays",
    "SaveHandle": ".async_save",
    "Checkpoint": ".checkpoint",
    "LoadResult": ".checkpoint",
    "ConversionError": ".converters",
    "ExportResult": ".converters",
    "convert": ".converters",
    "export": ".converters",
    "DiffReport": ".diffing",
    "diff": ".diffing",
    "register_migration": ".kind_migrations",
    "CheckpointOptions": ".options",
    "is_checkpoint": ".probe",
    "manifest": ".probe",
    "CheckpointReader": ".reader",
    "open_checkpoint": ".reader",
    "read_component": ".reader",
    "LazyShardedArray": ".sharding.reading",
    "NamedTupleValue": ".tree.nodes",
    "PRNGKeyValue": ".tree.nodes",
    "ValidationReport": ".validate",
    "validate": ".validate",
}

if TYPE_CHECKING:  # the names as static imports, for type checkers and editors
    from .arrays import LazyArray
    from .async_save import SaveHandle
    from .checkpoint import Checkpoint, LoadResult
    from .converters import ConversionError, ExportResult, convert, export
    from .diffing import DiffReport, diff
    from .kind_migrations import register_migration
    from .options import CheckpointOptions
    from .probe import is_checkpoint, manifest
    from .reader import CheckpointReader, open_checkpoint, read_component
    from .sharding.reading import LazyShardedArray
    from .tree.nodes import NamedTupleValue, PRNGKeyValue
    from .validate import ValidationReport, validate


#: Submodules that share their name with a public function: the function keeps the package's name.
_SHADOWED = frozenset({"convert", "manifest", "validate"})


class _Package(types.ModuleType):
    """The package module: the import system binds every imported submodule on it, which must not replace
    the functions ``opencheckpoint.manifest``, ``validate`` and ``convert`` (loaded lazily, below)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _SHADOWED and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'opencheckpoint' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later uses are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "ArchiveError",
    "ArrayLayoutError",
    "Checkpoint",
    "CheckpointError",
    "CheckpointOptions",
    "CheckpointReader",
    "ConversionError",
    "DiffReport",
    "ExportResult",
    "ExtraFile",
    "IncompatibleComponent",
    "IntegrityError",
    "LazyArray",
    "LazyShardedArray",
    "LimitExceeded",
    "LoadResult",
    "ManifestError",
    "MissingFile",
    "NamedTupleValue",
    "NotACheckpoint",
    "PRNGKeyValue",
    "SaveHandle",
    "TargetExists",
    "TreeError",
    "UnknownComponentKind",
    "UnknownDtype",
    "UnsafePath",
    "UnsupportedExtension",
    "UnsupportedLocation",
    "UnsupportedValue",
    "UnsupportedVersion",
    "ValidationReport",
    "__version__",
    "convert",
    "diff",
    "export",
    "is_checkpoint",
    "manifest",
    "open_checkpoint",
    "read_component",
    "register_migration",
    "validate",
]
