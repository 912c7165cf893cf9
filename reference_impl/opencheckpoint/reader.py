"""Reading checkpoints: :func:`open_checkpoint` (lazy) and :func:`read_component` (eager).

Arrays are memory-mapped from ``data.bin`` (or from the archive, in place).
Nothing from the data file is read before the tree document has been
verified and the whole layout checked; each array is verified (CRC-32C)
the first time its bytes are read, one 1 MiB chunk at a time while the
chunk is hot in cache.

>>> import numpy as np, tempfile, os
>>> from opencheckpoint import Checkpoint
>>> path = os.path.join(tempfile.mkdtemp(), "ckpt")
>>> _ = Checkpoint(weights={"w": np.arange(4.0)}).save(path)
>>> read_component(path, "weights")["w"]
array([0., 1., 2., 3.])
>>> with open_checkpoint(path) as ckpt:
...     lazy = ckpt.tree("weights")["w"]
...     lazy.shape, lazy.read()[3]
((4,), np.float64(3.0))
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .adapters.frameworks import Framework, get_framework
from .container.base import Source, open_source
from .dtypes import numpy_dtype
from .errors import (
    ArrayLayoutError,
    CheckpointError,
    IntegrityError,
    UnknownComponentKind,
    UnsupportedVersion,
)
from .integrity import CHUNK_BYTES, crc32c_of, format_crc32c
from .manifest import KIND_VERSIONS, ParsedManifest, parse_manifest
from .models import ComponentRecord
from .strict_json import parse_ijson
from .tree.decode import DecodedTree, decode_tree, materialize
from .tree.layout import check_layout
from .tree.nodes import ArrayRef, DtypeValue, PRNGKeyValue


def verified_copy(view: np.ndarray, ref: ArrayRef, file: str) -> np.ndarray:
    """Copy an array out of a map, checking its CRC-32C chunk by chunk as it goes."""
    out = np.empty(ref.shape, dtype=view.dtype)
    source = view.reshape(-1).view(np.uint8)
    target = out.reshape(-1).view(np.uint8)
    crc = 0
    for start in range(0, ref.nbytes, CHUNK_BYTES):
        chunk = source[start : start + CHUNK_BYTES]
        crc = crc32c_of(chunk, crc)
        target[start : start + CHUNK_BYTES] = chunk
    _check_crc(crc, ref, file)
    _check_bool(out, ref, file)
    return out


def verify_view(view: np.ndarray, ref: ArrayRef, file: str) -> None:
    """Check an array's CRC-32C (and bool bytes) without copying it."""
    _check_crc(crc32c_of(view.reshape(-1).view(np.uint8)) if ref.nbytes else 0, ref, file)
    _check_bool(view, ref, file)


def _check_crc(crc: int, ref: ArrayRef, file: str) -> None:
    if crc != ref.crc32c:
        raise IntegrityError(
            f"array crc32c mismatch: stored {format_crc32c(ref.crc32c)}, computed {format_crc32c(crc)}",
            file=file, field=ref.path, section="R-CHK-6")


def _check_bool(array: np.ndarray, ref: ArrayRef, file: str) -> None:
    if ref.dtype == "bool" and ref.nbytes and array.reshape(-1).view(np.uint8).max() > 1:
        raise ArrayLayoutError("a bool array holds a byte other than 0x00 or 0x01", file=file, field=ref.path,
                               section="R-ARR-11")


class LazyArray:
    """An array in a checkpoint, not yet read: shape and dtype now, bytes on :meth:`read`."""

    __slots__ = ("ref", "_map", "_file", "_view")

    def __init__(self, ref: ArrayRef, data_map: memoryview, file: str) -> None:
        self.ref = ref
        self._map = data_map
        self._file = file
        self._view: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return self.ref.shape

    @property
    def dtype(self) -> str:
        return self.ref.dtype

    @property
    def nbytes(self) -> int:
        return self.ref.nbytes

    def read(self, *, verify: bool = True) -> np.ndarray:
        """A read-only view into the map, verified the first time."""
        if self._view is None:
            view = array_view(self._map, self.ref)
            if verify:
                verify_view(view, self.ref, self._file)
            self._view = view
        return self._view

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        array = self.read()
        return array if dtype is None else array.astype(dtype)

    def __repr__(self) -> str:
        return f"LazyArray({self.ref.dtype}{list(self.ref.shape)}, {self.ref.path})"


def array_view(data_map: memoryview, ref: ArrayRef) -> np.ndarray:
    """A read-only NumPy view of one array's bytes in the map (no byte is read)."""
    dtype = numpy_dtype(ref.dtype)
    if ref.nbytes == 0:
        return np.empty(ref.shape, dtype=dtype)
    count = ref.nbytes // dtype.itemsize
    view = np.frombuffer(data_map, dtype=dtype, count=count, offset=ref.offset).reshape(ref.shape)
    return view


class CheckpointReader:
    """An open checkpoint: the verified manifest, and components read on demand."""

    def __init__(self, path: str | os.PathLike[str], *, understood_extensions: tuple[str, ...] = ()) -> None:
        self.path = Path(path)
        self.source: Source = open_source(self.path)
        try:
            self.parsed: ParsedManifest = parse_manifest(
                self.source.read_manifest(), understood_extensions=understood_extensions)
        except CheckpointError:
            self.source.close()
            raise

    # -- metadata -------------------------------------------------------------
    @property
    def manifest(self) -> dict[str, Any]:
        """The manifest as plain JSON values."""
        return self.parsed.raw

    @property
    def components(self) -> dict[str, ComponentRecord]:
        return dict(self.parsed.manifest.components)

    def record(self, name: str) -> ComponentRecord:
        try:
            return self.parsed.manifest.components[name]
        except KeyError:
            raise CheckpointError(f"no component named {name!r} (has: {sorted(self.components)})",
                                  file=str(self.path)) from None

    def _file(self, record: ComponentRecord, rel: str) -> str:
        return f"{record.path}/{rel}"

    def read_small(self, name: str, rel: str) -> bytes:
        """Read one whole file of a component and verify its size and CRC-32C."""
        record = self.record(name)
        entry = record.files[rel]
        full = self._file(record, rel)
        data = self.source.read_file(full, entry.size)
        computed = format_crc32c(crc32c_of(data))
        if computed != entry.crc32c:
            raise IntegrityError(f"file crc32c mismatch: stored {entry.crc32c}, computed {computed}", file=full,
                                 field="crc32c", section="R-CHK-5")
        return data

    def _check_kind(self, name: str, kind: str) -> ComponentRecord:
        record = self.record(name)
        if record.kind != kind:
            raise UnknownComponentKind(f"component {name!r} is a {record.kind!r} component, not {kind!r}",
                                       file="manifest.json", field=f"$.components.{name}.kind", section="R-CMP-5")
        if record.kind_version > KIND_VERSIONS[kind]:
            raise UnsupportedVersion(
                f"{kind} kind_version {record.kind_version} is newer than this reader's {KIND_VERSIONS[kind]}",
                file="manifest.json", field=f"$.components.{name}.kind_version", section="R-CMP-6")
        return record

    # -- tree components -----------------------------------------------------------
    def decoded_tree(self, name: str) -> tuple[DecodedTree, memoryview, str]:
        """The verified tree document, the data file map, and the data file's path."""
        record = self._check_kind(name, "tree")
        tree_file = self._file(record, "tree.msgpack")
        try:
            decoded = decode_tree(self.read_small(name, "tree.msgpack"))
        except CheckpointError as exc:
            raise exc.at(file=tree_file) from None
        data_file = self._file(record, "data.bin")
        size = record.files["data.bin"].size
        try:
            check_layout(decoded.arrays, size)
        except CheckpointError as exc:
            raise exc.at(file=data_file) from None
        data_map = self.source.map_file(data_file, size)
        return decoded, data_map, data_file

    def tree(self, name: str) -> Any:
        """The component's tree with :class:`LazyArray` leaves (nothing read yet)."""
        decoded, data_map, data_file = self.decoded_tree(name)
        cache: dict[ArrayRef, LazyArray] = {}

        def leaf(node: Any) -> Any:
            if isinstance(node, ArrayRef):
                return cache.setdefault(node, LazyArray(node, data_map, data_file))
            if isinstance(node, PRNGKeyValue):
                return PRNGKeyValue(node.impl, leaf(node.data))
            return numpy_dtype(node.name).newbyteorder("=")

        return materialize(decoded.root, leaf) if decoded.has_placeholders else decoded.root

    def read(
        self,
        name: str,
        *,
        framework: str | Framework = "numpy",
        verify: bool = True,
        copy: bool = True,
        map_location: Any = None,
    ) -> Any:
        """Decode a component fully into ``framework`` objects.

        ``copy=False`` returns read-only views into the map (NumPy only);
        ``verify=False`` skips the per-array CRC-32C (an explicit opt-out).
        """
        record = self.record(name)
        if record.kind == "json":
            return self.json(name)
        if record.kind != "tree":
            self._check_kind(name, "tree")
        fw = get_framework(framework) if isinstance(framework, str) else framework
        decoded, data_map, data_file = self.decoded_tree(name)
        arrays: dict[tuple[int, int, str, tuple[int, ...]], Any] = {}

        def numpy_leaf(ref: ArrayRef) -> np.ndarray:
            view = array_view(data_map, ref)
            if copy:
                return verified_copy(view, ref, data_file) if verify else np.array(view)
            if verify:
                verify_view(view, ref, data_file)
            return view

        def leaf(node: Any) -> Any:
            if isinstance(node, ArrayRef):
                key = (node.offset, node.nbytes, node.dtype, node.shape)
                if key not in arrays or node.nbytes == 0:
                    arrays[key] = fw.array(numpy_leaf(node), map_location=map_location)
                return arrays[key]
            if isinstance(node, PRNGKeyValue):
                return fw.prng_key(node.impl, numpy_leaf(node.data), map_location=map_location)  # type: ignore[arg-type]
            if isinstance(node, DtypeValue):
                return fw.dtype(node.name)
            return node

        return materialize(decoded.root, leaf) if decoded.has_placeholders else decoded.root

    # -- json and files components -----------------------------------------------------
    def json(self, name: str) -> Any:
        record = self._check_kind(name, "json")
        return parse_ijson(self.read_small(name, "value.json"), file=self._file(record, "value.json"))

    def iter_files(self, name: str) -> Iterator[tuple[str, bytes]]:
        """(relative name, verified bytes) of every file of a ``files`` component."""
        record = self._check_kind(name, "files")
        for rel in record.files:
            yield rel, self.read_small(name, rel)

    def close(self) -> None:
        self.source.close()

    def __enter__(self) -> CheckpointReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_checkpoint(path: str | os.PathLike[str]) -> CheckpointReader:
    """Open a checkpoint lazily: the manifest is verified now, arrays are read when asked for."""
    return CheckpointReader(path)


def read_component(
    path: str | os.PathLike[str],
    name: str,
    *,
    framework: str = "numpy",
    verify: bool = True,
    map_location: Any = None,
) -> Any:
    """Read one component's stored value (no live object needed), as ``framework`` objects."""
    with CheckpointReader(path) as reader:
        return reader.read(name, framework=framework, verify=verify, map_location=map_location)
