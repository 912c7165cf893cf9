"""torchrl ``Checkpoint`` directories and archives (torchrl 0.14), read from their manifest and files.

Layout (torchrl's ``torchrl/checkpoint``): ``manifest.json`` (``"format":
"torchrl.checkpoint"``, ``format_version`` 1, ``metadata``, ``components``:
name -> ``{"adapter", "adapter_version", "path", "files"}``), each component in
``components/NNNN-name/``; a ZIP archive holds the same tree. Per adapter:

* ``torchrl.json``: ``value.json``, a JSON value -> a ``json`` (or ``tree``) component;
* ``torchrl.state_dict``: ``state.json`` (a typed schema of the state dict whose
  tensors are named ``tensor_NNNNNNNN``) plus the tensors as a TensorDict memory-map
  directory ``state/`` (``meta.json`` + raw ``KEY.memmap`` files) or its ZIP
  ``state.tdz`` (both read here without torchrl or tensordict), a consolidated
  ``state.tdc`` (read with ``tensordict``), or ``state.pt`` (``torch.load``
  with ``weights_only=True``) -> a ``tree`` component;
* any other adapter (``torchrl.dump_load``, custom ones) -> a ``files`` component,
  byte for byte.

A torchrl rotation directory (``checkpoint-000000000100`` folders or ``.torchrl``
archives, what ``RunCheckpointer`` writes) converts its newest checkpoint, or the
one of ``step``. Nothing is unpickled (a pickle among a component's files, such as
a replay buffer's ``prefetch.pkl``, is left out and named in ``not_converted``) and
nothing named in the files is imported.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import posixpath
import re
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import numpy as np

from ...format.dtypes import dtype_name, numpy_dtype
from ...format.errors import CheckpointError
from ...tree.nodes import DtypeValue
from ._common import PICKLE_REASON, ConversionError, CopiedFiles, FilesAdapter, Foreign, converted_from, require
from .torch_file import MODULE_STATE_ADAPTER, is_module_state

FORMAT_NAME: Final = "torchrl.checkpoint"
MANIFEST: Final = "manifest.json"
_MAX_JSON_BYTES: Final = 256 << 20


class _Source:
    """The checkpoint's files, from a directory or a ZIP archive, by relative POSIX path."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._zip = zipfile.ZipFile(path) if path.is_file() else None
        except (OSError, zipfile.BadZipFile, ValueError) as exc:
            raise ConversionError(f"not a torchrl checkpoint directory or ZIP archive: {exc}",
                                  file=str(path)) from None

    def close(self) -> None:
        if self._zip is not None:
            self._zip.close()

    def read(self, rel: str) -> bytes:
        if rel.startswith("/") or ".." in rel.split("/"):
            raise ConversionError(f"unsafe path {rel!r}", file=str(self.path))
        try:
            if self._zip is not None:
                return self._zip.read(rel)
            target = self.path / rel
            if target.is_symlink():
                raise ConversionError(f"{rel!r} is a symlink", file=str(self.path))
            return target.read_bytes()
        except (KeyError, OSError) as exc:
            raise ConversionError(f"missing file {rel!r}: {exc}", file=str(self.path)) from None

    def json(self, rel: str) -> Any:
        data = self.read(rel)
        if len(data) > _MAX_JSON_BYTES:
            raise ConversionError(f"{rel} is larger than {_MAX_JSON_BYTES} bytes", file=str(self.path))
        try:
            return json.loads(data)
        except ValueError as exc:
            raise ConversionError(f"{rel} is not JSON: {exc}", file=str(self.path)) from None


def _manifest_of(source: _Source) -> dict[str, Any]:
    manifest = source.json(MANIFEST)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise ConversionError(f"manifest.json is not a {FORMAT_NAME} manifest", file=str(source.path),
                              field="format")
    if manifest.get("format_version") != 1:
        raise ConversionError(f"torchrl checkpoint format_version {manifest.get('format_version')!r} is not "
                              "supported (this converter reads version 1)", file=str(source.path),
                              field="format_version")
    if not isinstance(manifest.get("components"), dict):
        raise ConversionError("manifest has no component mapping", file=str(source.path), field="components")
    return manifest


def is_torchrl_checkpoint(path: Path) -> bool:
    """A directory or ZIP whose ``manifest.json`` says ``"format": "torchrl.checkpoint"``."""
    if not (path.is_dir() and (path / MANIFEST).is_file()) and not (path.is_file() and zipfile.is_zipfile(path)):
        return False
    try:
        source = _Source(path)
    except (OSError, zipfile.BadZipFile):
        return False
    try:
        return bool(json.loads(source.read(MANIFEST)).get("format") == FORMAT_NAME)
    except (ConversionError, ValueError, AttributeError):
        return False
    finally:
        source.close()


#: A checkpoint of torchrl's ``CheckpointRotation``: ``<prefix>-<step>`` (a folder) or ``<prefix>-<step>.torchrl``.
_ROTATED: Final = re.compile(r"(?P<prefix>.+)-(?P<step>[0-9]+)(?:\.torchrl)?")


def rotation_steps(path: Path) -> dict[int, Path]:
    """The checkpoints of a torchrl rotation directory (``RunCheckpointer``'s run folder) by step; {} for
    anything else. Of two checkpoints of one step (a folder and an archive) the newer file wins."""
    if not path.is_dir() or (path / MANIFEST).exists():
        return {}
    found: dict[int, Path] = {}
    for entry in sorted(path.iterdir()):
        match = _ROTATED.fullmatch(entry.name)
        if match is None or not is_torchrl_checkpoint(entry):
            continue
        step = int(match["step"])
        if step not in found or entry.stat().st_mtime_ns > found[step].stat().st_mtime_ns:
            found[step] = entry
    return found


def read_torchrl(path: Path, step: int | None = None) -> Foreign:
    """Every component of a torchrl checkpoint; its manifest metadata is kept as the metadata.

    ``path`` may be a rotation directory: its newest checkpoint is read, or the one of ``step``.
    """
    steps = rotation_steps(path)
    if steps:
        chosen = max(steps) if step is None else step
        if chosen not in steps:
            raise ConversionError(f"no checkpoint of step {chosen} (has: {sorted(steps)})", file=str(path),
                                  field="step")
        foreign = read_torchrl(steps[chosen])
        foreign.metadata["converted_from"].update(name=f"{path.name}/{steps[chosen].name}", step=chosen)
        return foreign
    source = _Source(path)
    try:
        manifest = _manifest_of(source)
        metadata = dict(manifest.get("metadata") or {})
        metadata["converted_from"] = {**converted_from("torchrl", path),
                                      "checkpoint_id": manifest.get("checkpoint_id"),
                                      "created_at": manifest.get("created_at"),
                                      "versions": manifest.get("versions")}
        foreign = Foreign(metadata=metadata)
        for name, record in manifest["components"].items():
            where = f"components.{name}"
            if not isinstance(record, dict) or not isinstance(record.get("path"), str) \
                    or not isinstance(record.get("files"), list):
                raise ConversionError("component record needs 'path' and 'files'", file=MANIFEST, field=where)
            files = [str(f) for f in record["files"]]
            adapter = record.get("adapter")
            try:
                if adapter == "torchrl.json":
                    foreign.components[name] = source.json(posixpath.join(record["path"], "value.json"))
                elif adapter == "torchrl.state_dict":
                    foreign.components[name] = state = _state_dict(source, record["path"], files)
                    if is_module_state(state):
                        foreign.adapters[name] = MODULE_STATE_ADAPTER
                else:
                    foreign.components[name] = CopiedFiles(_copied(source, name, record["path"], files, foreign))
                    foreign.adapters[name] = FilesAdapter()
            except ConversionError as exc:
                raise exc.at(field=where) from None
        return foreign
    finally:
        source.close()


def _copied(source: _Source, name: str, root: str, files: list[str], foreign: Foreign) -> dict[str, bytes]:
    """The files of a dump/load component, byte for byte, but no pickle (``not_converted`` says which).

    torchrl's replay buffer writes its prefetch queue as ``prefetch.pkl`` and unpickles it on load; without
    the file it starts with an empty queue (the next samples are drawn afresh), so the buffer still loads.
    """
    copied: dict[str, bytes] = {}
    for rel in files:
        if rel.rsplit("/", 1)[-1].endswith((".pkl", ".pickle")):
            what = " (the replay buffer's prefetch queue; it loads without it)" if rel == "prefetch.pkl" else ""
            foreign.not_converted[f"{name}/{rel}"] = PICKLE_REASON + what
            continue
        copied[rel] = source.read(posixpath.join(root, rel))
    return copied


# -- state dicts ---------------------------------------------------------------------------------------------

def _state_dict(source: _Source, root: str, files: list[str]) -> Any:
    if "state.pt" in files:
        from .torch_file import load_weights_only

        with _temporary_copy(source.read(posixpath.join(root, "state.pt"))) as local:
            return load_weights_only(local)
    schema = source.json(posixpath.join(root, "state.json"))
    if "state/meta.json" in files:
        tensors = _memmap_tensors(lambda rel: source.read(posixpath.join(root, "state", rel)))
    elif "state.tdz" in files:
        with zipfile.ZipFile(io.BytesIO(source.read(posixpath.join(root, "state.tdz")))) as archive:
            tensors = _memmap_tensors(archive.read)
    elif "state.tdc" in files:
        tensors = _consolidated_tensors(source.read(posixpath.join(root, "state.tdc")))
    else:
        raise ConversionError(f"no state payload (state/, state.tdz, state.tdc or state.pt) among {files}")
    return _decode(schema, tensors, "$")


def _numpy_dtype(torch_name: Any, key: str) -> np.dtype:
    if not isinstance(torch_name, str) or not torch_name.startswith("torch."):
        raise ConversionError(f"tensor {key!r} has dtype {torch_name!r}")
    try:
        return numpy_dtype(torch_name.removeprefix("torch."))
    except Exception:
        raise ConversionError(f"tensor {key!r} has dtype {torch_name}, which OpenCheckpoint has no name for",
                              ) from None


def _memmap_tensors(read: Callable[[str], bytes]) -> dict[str, np.ndarray]:
    """A flat TensorDict memory-map directory: ``meta.json`` describes each ``KEY.memmap`` (raw bytes)."""
    try:
        meta = json.loads(read("meta.json"))
    except (KeyError, ValueError) as exc:
        raise ConversionError(f"TensorDict meta.json unreadable: {exc}") from None
    tensors: dict[str, np.ndarray] = {}
    for key, info in meta.items():
        if not isinstance(info, dict) or "dtype" not in info:
            continue  # the TensorDict's own fields (shape, device, _type)
        if info.get("is_nested"):
            raise ConversionError(f"tensor {key!r} is a nested tensor, which has no OpenCheckpoint equivalent")
        dtype = _numpy_dtype(info["dtype"], key)
        shape = tuple(int(d) for d in info["shape"])
        raw = read(f"{key}.memmap")
        count = int(np.prod(shape, dtype=np.int64))
        if len(raw) != count * dtype.itemsize:
            raise ConversionError(f"{key}.memmap holds {len(raw)} bytes, {shape} {dtype} needs "
                                  f"{count * dtype.itemsize}")
        tensors[key] = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    return tensors


def _consolidated_tensors(data: bytes) -> dict[str, np.ndarray]:
    """A consolidated TensorDict file, through ``tensordict`` itself."""
    tensordict = require("tensordict", "peers", "reading consolidated (state.tdc) torchrl payloads")
    from ...adapters.torch import tensor_to_numpy

    with _temporary_copy(data, suffix=".tdc") as local:
        loaded = tensordict.TensorDict.from_consolidated(str(local))
        return {str(k): tensor_to_numpy(v).copy() for k, v in loaded.items()}


@contextlib.contextmanager
def _temporary_copy(data: bytes, suffix: str = ".pt") -> Iterator[Path]:
    """The bytes in a temporary file (torch.load and tensordict read paths), removed on exit."""
    with tempfile.TemporaryDirectory(prefix="opencheckpoint-convert-") as folder:
        path = Path(folder) / f"payload{suffix}"
        path.write_bytes(data)
        yield path


def _plain_dtype(text: Any, where: str) -> np.dtype:
    """A NumPy dtype string of the table (never ``object`` or a structured dtype)."""
    try:
        dtype = np.dtype(str(text))
        dtype_name(dtype)
    except (TypeError, ValueError, CheckpointError):
        raise ConversionError(f"NumPy dtype {text!r} is not an OpenCheckpoint dtype", field=where) from None
    return dtype


_UNSUPPORTED = ("set", "frozenset", "slice", "range", "ellipsis")


def _decode(node: Any, tensors: dict[str, np.ndarray], where: str) -> Any:
    """torchrl's typed state-dict schema -> a tree value (the same values OpenCheckpoint's torch adapter stores)."""
    if not isinstance(node, dict) or "kind" not in node:
        raise ConversionError("state.json node without a kind", field=where)
    kind = node["kind"]
    if kind in ("tensor", "numpy"):
        key = node.get("key")
        if key not in tensors:
            raise ConversionError(f"state.json names tensor {key!r}, which the payload lacks", field=where)
        array = tensors[key]
        return array.astype(_plain_dtype(node.get("dtype"), where), copy=False) if kind == "numpy" else array
    if kind in ("dict", "ordered_dict"):
        # A module state dict's ``_metadata`` (torch's per-module versions) is not stored, as with a native save.
        out: dict[Any, Any] = {}
        for index, item in enumerate(node.get("items", [])):
            key = _decode(item[0], tensors, f"{where}<key {index}>")
            out[key] = _decode(item[1], tensors, f"{where}[{key!r}]")
        return out
    if kind in ("list", "tuple"):
        items = [_decode(item, tensors, f"{where}[{i}]") for i, item in enumerate(node.get("items", []))]
        return items if kind == "list" else tuple(items)
    if kind == "torch_size":
        return tuple(int(d) for d in node["items"])
    if kind in ("torch_device", "path"):
        return str(node["value"])
    if kind == "torch_dtype":
        return DtypeValue(str(node["value"]))
    if kind in ("bytes", "bytearray"):
        return base64.b64decode(node["value"])
    if kind == "complex":
        return complex(node["real"], node["imag"])
    if kind == "numpy_scalar":
        return _plain_dtype(node.get("dtype"), where).type(node["value"])
    if kind == "value":
        return node["value"]
    if kind in _UNSUPPORTED:
        raise ConversionError(f"a Python {kind} has no OpenCheckpoint tree equivalent; convert it to a list or "
                              "tuple in the state dict and save again", field=where)
    raise ConversionError(f"unknown state.json kind {kind!r}", field=where)
