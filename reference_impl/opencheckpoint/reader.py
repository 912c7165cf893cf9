"""Reading checkpoints: :func:`open_checkpoint` (lazy) and :func:`read_component` (eager).

Opening runs steps 1-11 of the spec's validation order (§15): locate the
checkpoint (with the ``.NAME.oc-old-*`` fallback), check the container,
verify and parse the manifest, check every path, the inventory and every
file size. Decoding one component runs steps 12-15 for it: kind, the
payload file's size limit and CRC-32C, the tree document, the array
layout. Arrays are memory-mapped from ``data.bin`` (or from the archive,
in place); each is verified (CRC-32C, then bool bytes) the first time its
bytes are delivered, one 1 MiB chunk at a time while the chunk is hot in
cache.

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
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .adapters.frameworks import Framework, get_framework
from .container.base import Source, check_locatable, is_staging_name, old_candidates, open_source
from .dtypes import numpy_dtype
from .errors import (
    ArrayLayoutError,
    CheckpointError,
    ExtraFile,
    IncompatibleComponent,
    IntegrityError,
    LimitExceeded,
    MissingFile,
    NotACheckpoint,
    UnknownComponentKind,
    UnsupportedVersion,
)
from .integrity import CHUNK_BYTES, crc32c_of, format_crc32c
from .limits import TREE_MAX_BYTES, VALUE_JSON_MAX_BYTES
from .manifest import (
    KIND_VERSIONS,
    MANIFEST_NAME,
    UNDERSTOOD_EXTENSIONS,
    ParsedManifest,
    field_of,
    parse_manifest,
)
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
            file=file, field=ref.path, section="R-ARR-14")


def _check_bool(array: np.ndarray, ref: ArrayRef, file: str) -> None:
    if ref.dtype == "bool" and ref.nbytes and array.reshape(-1).view(np.uint8).max() > 1:
        raise ArrayLayoutError("a bool array holds a byte other than 00 or 01", file=file, field=ref.path,
                               section="R-ARR-13")


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
    """An open checkpoint: the verified manifest, and components read on demand.

    ``issues``, if given, receives every further error of the steps that can
    report several (manifest members and paths, inventory, file sizes) when
    opening fails; the first error is raised. ``check_files=False`` stops after
    the manifest and paths (steps 1-9), for tools that describe a checkpoint
    from its metadata alone; decoding a component still checks its files.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        understood_extensions: Collection[str] | Mapping[str, int] = UNDERSTOOD_EXTENSIONS,
        issues: list[CheckpointError] | None = None,
        check_files: bool = True,
    ) -> None:
        self.path = Path(path)
        self._understood = understood_extensions
        if is_staging_name(self.path):
            raise NotACheckpoint("a staging name (.NAME.oc-staging-*) is never a checkpoint", file=str(self.path),
                                 section="R-PUB-12")
        if os.path.exists(self.path):
            self.location = self.path
            self.source, self.parsed = _open_at(self.path, understood_extensions, issues, check_files)
            return
        self.location, self.source, self.parsed = _open_fallback(self.path, understood_extensions)

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
        """Step 13: read one whole file of a component, checking its size limit and CRC-32C."""
        record = self.record(name)
        entry = record.files[rel]
        full = self._file(record, rel)
        where = field_of("components", name, "files", rel)
        limit = {"tree.msgpack": (TREE_MAX_BYTES, "R-LIM-9"), "value.json": (VALUE_JSON_MAX_BYTES, "R-LIM-2")}
        if record.kind in ("tree", "json") and rel in limit and entry.size > limit[rel][0]:
            raise LimitExceeded(f"{rel} is {entry.size} bytes, limit {limit[rel][0]}", file=full,
                                field=where + ".size", section=limit[rel][1])
        data = self.source.read_file(full, entry.size)
        computed = format_crc32c(crc32c_of(data))
        if computed != entry.crc32c:
            raise IntegrityError(f"file crc32c mismatch: stored {entry.crc32c}, computed {computed}", file=full,
                                 field=where + ".crc32c", section="R-CHK-7")
        return data

    def check_kind(self, name: str, kind: str | None = None) -> ComponentRecord:
        """Step 12: R-CMP-21 (kind not implemented), R-CMP-19 (kind_version too new)."""
        record = self.record(name)
        where = field_of("components", name)
        if record.kind not in KIND_VERSIONS:
            raise UnknownComponentKind(f"component {name!r} has kind {record.kind!r}, which this reader does not "
                                       "implement", file=MANIFEST_NAME, field=where + ".kind", section="R-CMP-21")
        if record.kind_version > KIND_VERSIONS[record.kind]:
            raise UnsupportedVersion(
                f"{record.kind} kind_version {record.kind_version} is newer than the highest this reader "
                f"supports ({KIND_VERSIONS[record.kind]})",
                file=MANIFEST_NAME, field=where + ".kind_version", section="R-CMP-19")
        if kind is not None and record.kind != kind:
            raise IncompatibleComponent(f"component {name!r} is a {record.kind!r} component, not {kind!r}",
                                        file=MANIFEST_NAME, field=where + ".kind")
        return record

    _check_kind = check_kind

    # -- tree components -----------------------------------------------------------
    def decoded_tree(self, name: str) -> tuple[DecodedTree, memoryview, str]:
        """Steps 12-15: the verified tree document, the data file map, and the data file's path."""
        record = self.check_kind(name, "tree")
        tree_file = self._file(record, "tree.msgpack")
        data = self.read_small(name, "tree.msgpack")
        try:
            decoded = decode_tree(data)
        except CheckpointError as exc:
            raise exc.at(file=tree_file) from None
        data_file = self._file(record, "data.bin")
        size = record.files["data.bin"].size
        try:
            check_layout(decoded.arrays, size)
        except CheckpointError as exc:
            raise exc.at(file=tree_file) from None
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

        ``tree`` components give their tree, ``json`` components their JSON
        value, ``files`` components a dict of relative name -> verified bytes.
        ``copy=False`` returns read-only views into the map (NumPy only);
        ``verify=False`` skips the per-array CRC-32C (an explicit opt-out).
        """
        record = self.check_kind(name)
        if record.kind == "json":
            return self.json(name)
        if record.kind == "files":
            return dict(self.iter_files(name, verify=verify))
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
        """Steps 12-14 for a ``json`` component: its verified, strictly parsed value."""
        record = self.check_kind(name, "json")
        return parse_ijson(self.read_small(name, "value.json"), file=self._file(record, "value.json"),
                           document="value")

    def iter_files(self, name: str, *, verify: bool = True) -> Iterator[tuple[str, bytes]]:
        """(relative name, bytes) of every file of a ``files`` component, each verified (R-CHK-12)."""
        record = self.check_kind(name, "files")
        for rel, entry in record.files.items():
            if verify:
                yield rel, self.read_small(name, rel)
            else:
                yield rel, self.source.read_file(self._file(record, rel), entry.size)

    def close(self) -> None:
        self.source.close()

    def __enter__(self) -> CheckpointReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _raise_first(errors: list[CheckpointError], issues: list[CheckpointError] | None) -> None:
    if errors:
        if issues is not None:
            issues.extend(errors[1:])
        raise errors[0]


def _open_at(
    target: Path,
    understood: Collection[str] | Mapping[str, int],
    issues: list[CheckpointError] | None,
    check_files: bool = True,
) -> tuple[Source, ParsedManifest]:
    """Steps 1-11 for a path that exists."""
    check_locatable(target)
    source = open_source(target)
    try:
        parsed = parse_manifest(source.read_manifest(), understood_extensions=understood, issues=issues)
        if check_files:
            check_inventory(source, parsed, issues)
    except BaseException:
        source.close()
        raise
    return source, parsed


def check_inventory(source: Source, parsed: ParsedManifest, issues: list[CheckpointError] | None) -> None:
    """Step 10 (entry types, listed files present, unlisted files, archive members) and step 11 (sizes)."""
    files, errors, rejected = source.inventory()
    listed = parsed.file_paths()

    def under_rejected(rel: str) -> bool:
        return any(rel == bad or rel.startswith(bad + "/") for bad in rejected)

    for rel, (component, key) in listed.items():
        if rel not in files and not under_rejected(rel):
            errors.append(MissingFile("listed in the manifest but absent (or not a regular file)", file=rel,
                                      field=field_of("components", component, "files", key), section="R-CON-3"))
    for rel in files:
        if rel != MANIFEST_NAME and rel not in listed:
            errors.append(ExtraFile("no component lists this file", file=rel, section="R-CON-2"))
    _raise_first(errors, issues)
    components = parsed.manifest.components
    for rel, (component, key) in listed.items():
        expected = components[component].files[key].size
        if files[rel] != expected:
            error = IntegrityError(f"file is {files[rel]} bytes, the manifest says {expected} "
                                   f"({'truncated' if files[rel] < expected else 'extended'})", file=rel,
                                   field=field_of("components", component, "files", key, "size"),
                                   section="R-CHK-6")
            errors.append(error)
    _raise_first(errors, issues)


def _open_fallback(
    target: Path, understood: Collection[str] | Mapping[str, int]
) -> tuple[Path, Source, ParsedManifest]:
    """R-PUB-13 / R-PUB-14: read the one ``.NAME.oc-old-*`` entry that opens cleanly."""
    candidates = old_candidates(target)
    opened: list[tuple[Path, Source, ParsedManifest]] = []
    for candidate in candidates:
        try:
            opened.append((candidate, *_open_at(candidate, understood, None)))
        except CheckpointError:
            continue
    if len(opened) == 1:
        return opened[0]
    for _, source, _ in opened:
        source.close()
    if os.path.exists(target):  # the replacement may have completed in between
        return (target, *_open_at(target, understood, None))
    if not candidates:
        raise NotACheckpoint("no such file or directory", file=str(target), section="R-PUB-10")
    raise NotACheckpoint(f"the path does not exist and {len(opened)} of {len(candidates)} "
                         f"'.{target.name}.oc-old-*' entries open cleanly (exactly one must)", file=str(target),
                         section="R-PUB-14")


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
