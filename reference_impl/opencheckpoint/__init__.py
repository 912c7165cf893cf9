"""OpenCheckpoint: an open, versioned, framework-neutral file format for ML and RL training state.

The package imports neither torch nor JAX; their adapters load when an
object of that framework is saved or a component is read with
``framework="torch"`` / ``"jax"``.

>>> from opencheckpoint import Checkpoint, convert, diff, export, read_component, validate
>>> from opencheckpoint import CheckpointOptions, is_checkpoint, manifest, register_migration
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# The error classes are imported now (they are small and every caller catches them); every other name
# is imported on first use (PEP 562), so `opencheckpoint --help` and a script that needs one function do
# not pay for NumPy, pydantic and ml_dtypes until they use something that needs them.
from .format.errors import (
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
from .format.lazy_names import lazy_names
from .format.version import __version__

#: Public name -> the module that defines it, imported when the name is first used.
_LAZY: dict[str, str] = {
    "LazyArray": ".read.arrays",
    "SaveHandle": ".write.async_save",
    "Checkpoint": ".checkpoint",
    "LoadResult": ".checkpoint",
    "ConversionError": ".tools.converters",
    "ExportResult": ".tools.converters",
    "convert": ".tools.converters",
    "export": ".tools.converters",
    "DiffReport": ".tools.diffing",
    "diff": ".tools.diffing",
    "register_migration": ".format.kind_migrations",
    "CheckpointOptions": ".options",
    "is_checkpoint": ".read.probe",
    "manifest": ".read.probe",
    "CheckpointReader": ".read.reader",
    "open_checkpoint": ".read.reader",
    "read_component": ".read.reader",
    "LazyShardedArray": ".read.sharded",
    "NamedTupleValue": ".tree.nodes",
    "PRNGKeyValue": ".tree.nodes",
    "PerRank": ".tree.per_rank",
    "ValidationReport": ".read.validate",
    "validate": ".read.validate",
}

if TYPE_CHECKING:  # the names as static imports, for type checkers and editors
    from .checkpoint import Checkpoint, LoadResult
    from .format.kind_migrations import register_migration
    from .options import CheckpointOptions
    from .read.arrays import LazyArray
    from .read.probe import is_checkpoint, manifest
    from .read.reader import CheckpointReader, open_checkpoint, read_component
    from .read.sharded import LazyShardedArray
    from .read.validate import ValidationReport, validate
    from .tools.converters import ConversionError, ExportResult, convert, export
    from .tools.diffing import DiffReport, diff
    from .tree.nodes import NamedTupleValue, PRNGKeyValue
    from .tree.per_rank import PerRank
    from .write.async_save import SaveHandle


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())


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
    "PerRank",
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
