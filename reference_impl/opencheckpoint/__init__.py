"""OpenCheckpoint: an open, versioned, framework-neutral file format for ML and RL training state.

The package imports neither torch nor JAX; their adapters load when an
object of that framework is saved or a component is read with
``framework="torch"`` / ``"jax"``.

>>> from opencheckpoint import Checkpoint, convert, diff, export, read_component, validate
>>> from opencheckpoint import CheckpointOptions, is_checkpoint, manifest, register_migration
"""

from __future__ import annotations

__version__ = "0.1.0"

from .checkpoint import Checkpoint, LoadResult
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
from .write.async_save import SaveHandle

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
