"""``torch.save`` files, loaded with ``weights_only=True``: no pickled code is ever run.

The whole content becomes one component (``model`` unless named otherwise);
with ``split=True`` a dict of sub-states (``{"model": ..., "optimizer": ...,
"epoch": 3}``) becomes one component per key instead. Splitting is asked for,
not guessed: an optimizer's state dict and a training-state dict look alike.
"""

from __future__ import annotations

import re
import zipfile
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...adapters.base import ComponentWriter, TreeAdapter
from ...format.paths import SEGMENT_PATTERN
from ._common import ConversionError, Foreign, converted_from, require

_SEGMENT = re.compile(SEGMENT_PATTERN)
#: First bytes of a pickle (protocol 2+), the body of torch's legacy (pre-1.6) non-ZIP format.
_PICKLE_MAGIC = b"\x80"

PICKLE_ONLY_HINT = (
    "this torch.save file needs full unpickling (it stores Python objects such as a whole nn.Module or a "
    "custom class), and OpenCheckpoint never runs code from a file. In code you trust, load it with "
    "torch's full unpickler (torch.load with weights_only=False), save the plain state "
    "(module.state_dict(), tensors, numbers) with opencheckpoint.Checkpoint or torch.save, and convert that"
)


def is_torch_file(path: Path) -> bool:
    """A ZIP with a ``*/data.pkl`` member (torch >= 1.6), or a pickle stream (the legacy format)."""
    if not path.is_file():
        return False
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as archive:
                return any(name.endswith("/data.pkl") or name == "data.pkl" for name in archive.namelist())
        except zipfile.BadZipFile:
            return False
    with open(path, "rb") as handle:
        return handle.read(1) == _PICKLE_MAGIC


def split_components(value: Any, path: Path) -> dict[str, Any]:
    """One component per top-level key; every key must be a valid component name."""
    if not isinstance(value, Mapping) or not value:
        raise ConversionError(f"split needs a non-empty dict at the top level, the file holds a "
                              f"{type(value).__name__}", file=str(path))
    bad = [k for k in value if not (isinstance(k, str) and _SEGMENT.fullmatch(k))]
    if bad:
        raise ConversionError(f"split: keys {bad!r} are not component names ({SEGMENT_PATTERN})",
                              file=str(path), field="$")
    return dict(value)


def load_weights_only(path: Path) -> Any:
    """``torch.load(weights_only=True)`` onto the CPU; a refused or broken file raises :class:`ConversionError`."""
    torch = require("torch", "torch", "reading torch.save files")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        # torch's weights-only unpickler refuses with pickle.UnpicklingError; matched by name so this module
        # never imports pickle (loading never runs code, and nothing here needs the module itself).
        if any(cls.__name__ == "UnpicklingError" for cls in type(exc).__mro__):
            raise ConversionError(f"{PICKLE_ONLY_HINT} (torch: {_first_sentence(str(exc))})",
                                  file=str(path)) from None
        if isinstance(exc, MemoryError):
            raise
        # Any other failure is the file's: torch raises RuntimeError, EOFError, zipfile.BadZipFile, and for a
        # safetensors file it reads itself the safetensors binding's own SafetensorError.
        raise ConversionError(f"not a readable torch.save file: {type(exc).__name__}: {exc}",
                              file=str(path)) from None


def read_torch(path: Path, component: str = "model", *, split: bool = False) -> Foreign:
    """The file's content as one component named ``component``, or one per top-level key (``split``)."""
    value = load_weights_only(path)
    metadata = {"converted_from": converted_from("torch", path)}
    components = split_components(value, path) if split else {component: value}
    # A module's state dict carries its submodules' versions in ``_metadata``: kept the way the module
    # adapter keeps them (component metadata), so loading into a live module sees them again.
    adapters = {name: MODULE_STATE_ADAPTER for name, part in components.items() if is_module_state(part)}
    return Foreign(components=components, metadata=metadata, adapters=dict(adapters))


def is_module_state(value: Any) -> bool:
    """A module's ``state_dict()`` as read from a file: an OrderedDict with torch's ``_metadata``."""
    return isinstance(value, OrderedDict) and getattr(value, "_metadata", None) is not None


class ModuleStateAdapter(TreeAdapter):
    """A module state dict read from a file: the tree, plus its ``_metadata`` as the module adapter records it."""

    def save(self, value: Any, writer: ComponentWriter) -> None:
        from ...adapters.torch import VERSION_METADATA_KEY, _version_metadata

        versions = _version_metadata(value)
        if versions is not None:
            writer.metadata = {VERSION_METADATA_KEY: versions}
        writer.write_tree(dict(value))


MODULE_STATE_ADAPTER = ModuleStateAdapter()


def _first_sentence(text: str) -> str:
    """torch's refusal message is long and ANSI-coloured; its first sentence says what happened."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", text).strip()
    return plain.split(". ")[0].rstrip(".") or "refused"
