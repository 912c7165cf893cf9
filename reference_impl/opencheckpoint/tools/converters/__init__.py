"""Converters from other checkpoint formats, and export to them.

``convert`` reads a ``torch.save`` file, a safetensors file, a torchrl
``Checkpoint`` (directory or archive) or an orbax checkpoint directory and
writes an OpenCheckpoint checkpoint; ``export`` writes a checkpoint's arrays
as a safetensors or ``torch.save`` file. Each source format has its own
module and imports its framework only when used, so this package imports
neither torch nor JAX.

>>> import numpy as np, tempfile, os
>>> from safetensors.numpy import save_file
>>> folder = tempfile.mkdtemp()
>>> save_file({"w": np.ones(2, np.float32)}, os.path.join(folder, "m.safetensors"), metadata={"a": "b"})
>>> detect_source(os.path.join(folder, "m.safetensors"))
'safetensors'
>>> path = convert(os.path.join(folder, "m.safetensors"), os.path.join(folder, "ckpt"))
>>> from opencheckpoint import read_component
>>> read_component(path, "model")["w"].tolist()
[1.0, 1.0]
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any, Final, Literal

from ...checkpoint import Checkpoint, CheckpointFormat
from ...container.target import check_replaceable
from ...format.errors import CheckpointError
from ...location import local_path
from ...progress import ProgressArg
from ...read.probe import is_checkpoint
from ._common import ConversionError, ConversionWarning, Foreign
from .exporting import ExportResult, export

SourceFormat = Literal["torch", "safetensors", "torchrl", "orbax"]
#: Every source format, in the order auto-detection tries them.
SOURCES: Final[tuple[SourceFormat, ...]] = ("torchrl", "orbax", "safetensors", "torch")

__all__ = ["SOURCES", "ConversionError", "ConversionWarning", "ExportResult", "convert", "detect_source", "export",
           "read_foreign"]


def detect_source(path: str | os.PathLike[str]) -> SourceFormat:
    """The format of a foreign checkpoint, from its files (never from its name alone)."""
    from .orbax_checkpoint import is_orbax_checkpoint
    from .safetensors_file import is_safetensors
    from .torch_file import is_torch_file
    from .torchrl_checkpoint import is_torchrl_checkpoint, rotation_steps

    source = Path(path)
    if not source.exists():
        raise ConversionError("no such file or directory", file=str(source))
    if is_torchrl_checkpoint(source) or rotation_steps(source):
        return "torchrl"
    if is_orbax_checkpoint(source):
        return "orbax"
    if is_safetensors(source):
        return "safetensors"
    if is_torch_file(source):
        return "torch"
    raise ConversionError(f"cannot tell the format; pass one of {', '.join(SOURCES)} explicitly "
                          "(--from / source=)", file=str(source))


def read_foreign(path: str | os.PathLike[str], source: SourceFormat | None = None, *,
                 component: str | None = None, split: bool = False, step: int | None = None) -> Foreign:
    """Read a foreign checkpoint into the components and metadata :func:`convert` writes."""
    src = Path(path)
    kind = source or detect_source(src)
    try:
        return _read(src, kind, component=component, split=split, step=step)
    except (CheckpointError, MemoryError):
        raise
    except Exception as exc:
        # Each reader turns the failures it knows into ConversionError; a foreign library's own exception
        # for a malformed file (zipfile, safetensors, orbax, NumPy) must not escape as a traceback either.
        raise ConversionError(f"not a readable {kind} checkpoint: {type(exc).__name__}: {exc}",
                              file=str(src)) from None


def _read(src: Path, kind: str, *, component: str | None, split: bool, step: int | None) -> Foreign:
    if kind == "torch":
        from .torch_file import read_torch

        return read_torch(src, component or "model", split=split)
    if kind == "safetensors":
        from .safetensors_file import read_safetensors

        return read_safetensors(src, component or "model")
    if kind == "torchrl":
        from .torchrl_checkpoint import read_torchrl

        return read_torchrl(src, step=step)
    if kind == "orbax":
        from .orbax_checkpoint import read_orbax

        return read_orbax(src, component or "state", step=step)
    raise ConversionError(f"unknown source format {kind!r}; one of {', '.join(SOURCES)}", field="source")


def convert(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    source: SourceFormat | Literal["opencheckpoint"] | None = None,
    format: CheckpointFormat | None = None,
    component: str | None = None,
    split: bool = False,
    step: int | None = None,
    metadata: dict[str, Any] | None = None,
    progress: ProgressArg = None,
    overwrite: bool = True,
) -> Path:
    """Convert a foreign checkpoint at ``src`` into an OpenCheckpoint checkpoint at ``dst``; return ``dst``.

    An OpenCheckpoint checkpoint at ``src`` is repacked in the other form (a
    directory into an archive, an archive into a directory; ``format`` picks
    one explicitly): the same files and manifest in another container
    (:func:`~opencheckpoint.converters.repack.repack`, which refuses an
    existing ``dst``).

    Args:
        source: ``"torch"``, ``"safetensors"``, ``"torchrl"``, ``"orbax"`` or ``"opencheckpoint"``;
            detected when None.
        format: ``"directory"`` (the default for foreign sources) or ``"archive"``.
        component: the component name for single-component sources (``model`` for torch and
            safetensors files, ``state`` for an orbax PyTree item).
        split: torch files only: one component per top-level key of the saved dict.
        step: a run directory (orbax ``CheckpointManager``, nnx_ppo's ``step_*`` folders, torchrl's
            rotation): the step to convert (default: newest).
        metadata: extra manifest metadata (merged over what the converter records).
        progress: of the write: ``True`` (a bar on a terminal) or ``f(done_bytes, total_bytes)``.
        overwrite: as :meth:`Checkpoint.save`: whether a checkpoint at ``dst`` may be replaced. Anything
            else there is never replaced. Checked before ``src`` is read (:class:`TargetExists`).

    The manifest metadata records ``converted_from`` (format, file name and
    what the source recorded, and under ``not_converted`` each source file left out, with why: pickles,
    such as a torchrl replay buffer's ``prefetch.pkl`` or nnx_ppo's ``metadata.pkl``, each also a
    :class:`ConversionWarning`). A ``torch.save`` file is read with
    ``weights_only=True``: a file that needs full unpickling is refused with
    :class:`ConversionError`, which explains what to do.
    """
    target = local_path(dst)
    check_replaceable(target, overwrite=overwrite)  # before a large source is read, not after
    if source == "opencheckpoint" or (source is None and is_checkpoint(local_path(src))):
        from .repack import repack

        return repack(src, dst, form=format)
    foreign = read_foreign(src, source, component=component, split=split, step=step)
    if foreign.not_converted:
        foreign.metadata.setdefault("converted_from", {})["not_converted"] = foreign.not_converted
        for name, reason in foreign.not_converted.items():
            warnings.warn(f"{name}: {reason}", ConversionWarning, stacklevel=2)
    checkpoint = Checkpoint(format=format or "directory")
    for name, value in foreign.components.items():
        checkpoint.register(name, value, adapter=foreign.adapters.get(name))
    return checkpoint.save(target, metadata={**foreign.metadata, **(metadata or {})}, progress=progress,
                           overwrite=overwrite)
