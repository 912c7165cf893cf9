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
from collections.abc import Callable, Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

import crc32c as _crc32c_module
import numpy as np

from .adapters.frameworks import Framework, get_framework
from .container.base import (
    FileRegion,
    Source,
    check_locatable,
    identity,
    is_staging_name,
    old_candidates,
    open_source,
    writers_at,
)
from .dtypes import numpy_dtype
from .errors import (
    ArrayLayoutError,
    CheckpointError,
    ConcurrentModification,
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
from .location import local_path
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
from .tree.decode import DecodedTree, decode_tree, empty_array, materialize
from .tree.layout import check_layout
from .tree.nodes import ArrayRef, DtypeValue, PRNGKeyValue

_crc32c = _crc32c_module.crc32c


def read_verified_into(region: FileRegion, ref: ArrayRef, target: np.ndarray, file: str, *, verify: bool) -> None:
    """Read one array's bytes straight into ``target`` (C-contiguous, writeable, ``ref.nbytes`` bytes).

    One pass: each chunk is read into its place in ``target`` and checksummed
    right after, while it is still in cache. Nothing is mapped, so the
    process's memory grows by ``target`` only. On a checksum error ``target``
    holds the unverified bytes; the error is raised after the last chunk.
    """
    if not ref.nbytes:
        return
    # ndarray.data is memoryview(array), typed as a memoryview on Python 3.11 (where ndarray is no Buffer)
    flat = target.data.cast("B") if target.ndim else target.reshape(1).data.cast("B")
    crc = 0
    for start in range(0, ref.nbytes, CHUNK_BYTES):
        piece = flat[start : start + CHUNK_BYTES]
        region.readinto(piece, ref.offset + start)
        if verify:
            crc = _crc32c(piece, crc)
    if verify:
        _check_crc(crc, ref, file)
        _check_bool(target, ref, file)


#: Arrays up to this size are read together, many per system call.
_SMALL_BYTES = 64 << 10
#: The most bytes one batched read of small arrays covers.
_BATCH_BYTES = 4 << 20


def read_arrays(
    region: FileRegion,
    refs: list[ArrayRef],
    file: str,
    *,
    verify: bool,
    targets: Mapping[int, np.ndarray] | None = None,
    deferred: list[tuple[ArrayRef, np.ndarray]] | None = None,
) -> dict[int, np.ndarray]:
    """Fresh arrays for the array nodes ``refs``, keyed by ``id(ref)``; identical extents share one array.

    Work and errors follow document order. Runs of small arrays that follow
    each other in the file are read with one ``preadv`` into one buffer and
    each becomes a writeable view of its own bytes in it (a CRC-32C call per
    array, no copy); bigger arrays are read chunk by chunk into their own
    memory (:func:`read_verified_into`). Empty arrays get their own array
    per node.

    ``targets`` (``id(ref)`` -> an existing array that fits the node, see
    :func:`fits`) are filled in place instead, all or nothing: with
    ``verify`` (the default everywhere), every array of ``refs`` is verified
    first — the targets' bytes through one small reusable scratch buffer
    (:class:`ScratchVerifier`: nothing mapped, memory does not grow) — and
    only when all pass are the targets' bytes read into them, so a corrupt
    checkpoint raises with every target untouched. That reads the targets'
    bytes twice (the second time usually from the page cache). With
    ``verify=False`` (an explicit opt-out) targets are filled in one pass.

    ``deferred``, if given, receives the (node, target) pairs instead of the
    targets being filled (verified or not): the caller fills them later with
    :func:`fill_targets` (phase 2 of a restore across components).
    """
    by_id: dict[int, np.ndarray] = {}
    by_extent: dict[tuple[Any, ...], list[int]] = {}
    batch: list[tuple[list[int], ArrayRef]] = []
    start = end = 0
    verifier = ScratchVerifier(region, file) if verify and targets else None
    defer = deferred is not None
    if deferred is None:
        deferred = []

    def flush() -> None:
        raw = bytearray(end - start)
        region.readinto(raw, start)
        view = memoryview(raw)
        for ids, ref in batch:
            first = ref.offset - start
            if verify:
                _check_crc(_crc32c(view[first : first + ref.nbytes]), ref, file)
            dtype = _numpy_dtype(ref.dtype)
            array = np.frombuffer(raw, dtype=dtype, count=ref.nbytes // dtype.itemsize, offset=first)
            if len(ref.shape) != 1:
                array = array.reshape(ref.shape)
            if verify and ref.dtype == "bool":
                _check_bool(array, ref, file)
            for ident in ids:
                by_id[ident] = array
        batch.clear()

    for ref in refs:
        nbytes = ref.nbytes
        if not nbytes:
            by_id[id(ref)] = _empty(ref, file)
            continue
        target = targets.get(id(ref)) if targets else None
        if target is not None:
            if batch:
                flush()
            if verifier is not None or defer:
                if verifier is not None:
                    verifier.verify(ref)
                deferred.append((ref, target))
            else:
                read_verified_into(region, ref, target, file, verify=verify)
            by_id[id(ref)] = target
            continue
        key = (ref.offset, nbytes, ref.dtype, ref.shape)
        ids = by_extent.get(key)
        if ids is not None:  # an alias of an array read (or being read) already
            ids.append(id(ref))
            if ids[0] in by_id:
                by_id[id(ref)] = by_id[ids[0]]
            continue
        ids = by_extent[key] = [id(ref)]
        if nbytes <= _SMALL_BYTES:
            if batch and (ref.offset < end or ref.offset + nbytes - start > _BATCH_BYTES):
                flush()
            if not batch:
                start = ref.offset
            batch.append((ids, ref))
            end = ref.offset + nbytes
            continue
        if batch:
            flush()
        array = np.empty(ref.shape, dtype=_numpy_dtype(ref.dtype))
        read_verified_into(region, ref, array, file, verify=verify)
        by_id[id(ref)] = array
    if batch:
        flush()
    # Every array passed its checks: only now is any target written.
    if not defer:
        fill_targets(region, deferred, file, verify=verify)
    return by_id


def fill_targets(region: FileRegion, deferred: list[tuple[ArrayRef, np.ndarray]], file: str, *,
                 verify: bool = True) -> None:
    """Read each verified node's bytes into its target, checking them again on the way in.

    The bytes were verified in phase 1 but are read from the file a second time
    here, so the CRC-32C is recomputed while copying (in cache, at no extra read):
    a file changed in place between the phases raises
    :class:`~opencheckpoint.errors.ConcurrentModification` (the targets filled so far,
    and this one, then hold the new bytes: documented in docs/guarantees.md).
    ``verify=False`` (the caller's explicit opt-out) copies without checking.
    """
    for ref, target in deferred:
        try:
            read_verified_into(region, ref, target, file, verify=verify)
        except IntegrityError as exc:
            raise ConcurrentModification(
                f"{ref.path}: the bytes verified before the restore changed while they were copied in ({exc.message}); "
                "another process modified the checkpoint in place: live arrays filled from it are partly "
                "updated, load again", file=file, rule=exc.rule) from None


#: Size of the buffer :class:`ScratchVerifier` reads through.
_SCRATCH_BYTES = 1 << 20


class ScratchVerifier:
    """Checks arrays' bytes (R-ARR-14, then R-ARR-13) by reading them through one small reusable buffer.

    Each ``preadv`` fills the whole buffer from where the next unchecked
    byte lies, so a run of small arrays costs one system call and a big
    array one call per buffer; the buffer is all the memory it uses.

    >>> import tempfile
    >>> from opencheckpoint.container.base import FileRegion
    >>> from opencheckpoint.tree.nodes import ArrayRef
    >>> with tempfile.TemporaryFile() as f:
    ...     _ = f.write(bytes(range(8))); f.flush()
    ...     checker = ScratchVerifier(FileRegion(f.fileno(), 0, 8, "data.bin", owns_fd=False), "data.bin", 4)
    ...     checker.verify(ArrayRef("uint8", (8,), 0, 8, _crc32c(bytes(range(8))), "$.a"))
    ...     checker.verify(ArrayRef("uint8", (2,), 2, 2, 0, "$.b"))
    Traceback (most recent call last):
    ...
    opencheckpoint.errors.IntegrityError: IntegrityError: data.bin: $.b: array crc32c mismatch: stored 00000000, computed c574b4c8 [R-ARR-14]
    """  # noqa: E501  (doctest: an error message is shown whole, as users see it)

    __slots__ = ("region", "file", "_view", "_start", "_end", "_done")

    def __init__(self, region: FileRegion, file: str, size: int = _SCRATCH_BYTES) -> None:
        self.region = region
        self.file = file
        self._view = memoryview(bytearray(max(1, min(size, region.size))))
        self._start = self._end = 0  # the bytes of the region the buffer holds
        self._done: set[tuple[int, int, int, str]] = set()

    def verify(self, ref: ArrayRef) -> None:
        """Raise the node's first error (CRC-32C, then bool bytes), reading its bytes in buffer-sized pieces."""
        key = (ref.offset, ref.nbytes, ref.crc32c, ref.dtype)
        if key in self._done:
            return
        crc = 0
        bad_bool = False
        is_bool = ref.dtype == "bool"
        position, stop = ref.offset, ref.offset + ref.nbytes
        while position < stop:
            if not self._start <= position < self._end:
                length = min(len(self._view), self.region.size - position)
                self.region.readinto(self._view[:length], position)
                self._start, self._end = position, position + length
            take = min(stop, self._end) - position
            piece = self._view[position - self._start : position - self._start + take]
            crc = _crc32c(piece, crc)
            if is_bool and not bad_bool:
                bad_bool = bool(np.frombuffer(piece, dtype=np.uint8).max() > 1)
            position += take
        _check_crc(crc, ref, self.file)
        if bad_bool:
            raise _bool_error(ref, self.file)
        self._done.add(key)


def fits(live: Any, ref: ArrayRef) -> bool:
    """Whether ``live`` can take the node's bytes in place: a writeable, C-contiguous,
    non-empty NumPy array of the node's exact shape and dtype."""
    if type(live) is not np.ndarray or not ref.nbytes:
        return False
    flags = live.flags
    return (flags.writeable and flags.c_contiguous and live.shape == ref.shape
            and live.dtype == _numpy_dtype(ref.dtype))


def match_targets(node: Any, live: Any, out: dict[int, np.ndarray]) -> None:
    """Pair array nodes of a decoded tree with the arrays at the same place in ``live`` that fit them."""
    kind = type(node)
    if kind is ArrayRef:
        if fits(live, node):
            out[id(node)] = live
    elif kind is dict:
        if isinstance(live, dict):
            for key, child in node.items():
                if key in live:
                    match_targets(child, live[key], out)
    elif (kind is list or kind is tuple) and isinstance(live, (list, tuple)) and len(live) == len(node):
        for child, live_child in zip(node, live, strict=True):
            match_targets(child, live_child, out)


_DTYPE_CACHE: dict[str, np.dtype] = {}


def _numpy_dtype(name: str) -> np.dtype:
    dtype = _DTYPE_CACHE.get(name)
    if dtype is None:
        dtype = _DTYPE_CACHE[name] = numpy_dtype(name)
    return dtype


def verify_view(view: np.ndarray, ref: ArrayRef, file: str) -> None:
    """Check an array's CRC-32C (and bool bytes) without copying it."""
    _check_crc(crc32c_of(view.reshape(-1).view(np.uint8)) if ref.nbytes else 0, ref, file)
    _check_bool(view, ref, file)


def _check_crc(crc: int, ref: ArrayRef, file: str) -> None:
    if crc != ref.crc32c:
        raise IntegrityError(
            f"array crc32c mismatch: stored {format_crc32c(ref.crc32c)}, computed {format_crc32c(crc)}",
            file=file, field=ref.path, rule="R-ARR-14")


def _check_bool(array: np.ndarray, ref: ArrayRef, file: str) -> None:
    if ref.dtype == "bool" and ref.nbytes and array.reshape(-1).view(np.uint8).max() > 1:
        raise _bool_error(ref, file)


def _bool_error(ref: ArrayRef, file: str) -> ArrayLayoutError:
    return ArrayLayoutError("a bool array holds a byte other than 00 or 01", file=file, field=ref.path,
                            rule="R-ARR-13")


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
        return _empty(ref, None)
    count = ref.nbytes // dtype.itemsize
    view = np.frombuffer(data_map, dtype=dtype, count=count, offset=ref.offset).reshape(ref.shape)
    return view


def _empty(ref: ArrayRef, file: str | None) -> np.ndarray:
    """The zero-element array of a node, with its exact shape (:func:`empty_array`)."""
    try:
        return empty_array(ref.shape, _numpy_dtype(ref.dtype))
    except CheckpointError as exc:
        raise exc.at(file=file, field=ref.path) from None


def _materialize_read(decoded: DecodedTree, fresh: dict[int, np.ndarray], fw: Framework, map_location: Any) -> Any:
    """The tree with the arrays of :func:`read_arrays` handed to ``fw`` (identical extents: one object)."""
    if getattr(fw, "name", None) == "numpy":
        arrays: dict[int, Any] = fresh
    else:
        converted: dict[int, Any] = {}  # id(numpy array) -> framework array
        arrays = {}
        for ident, array in fresh.items():
            value = converted.get(id(array))
            if value is None or not array.nbytes:
                value = converted[id(array)] = fw.array(array, map_location=map_location)
            arrays[ident] = value

    def leaf(node: Any) -> Any:
        kind = type(node)
        if kind is ArrayRef:
            return arrays[id(node)]
        if kind is PRNGKeyValue:
            # Key data is never shared with an array object: a copy (keys are a few bytes).
            return fw.prng_key(node.impl, fresh[id(node.data)].copy(), map_location=map_location)
        if kind is DtypeValue:
            return fw.dtype(node.name)
        return node

    return materialize(decoded.root, leaf) if decoded.has_placeholders else decoded.root


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
        self.path = local_path(path)
        self._understood = understood_extensions
        if is_staging_name(self.path):
            raise NotACheckpoint("a staging name (.NAME.oc-staging-*) is never a checkpoint", file=str(self.path),
                                 rule="R-PUB-12")
        self.location, self.source, self.parsed = _open_consistent(self.path, understood_extensions, issues,
                                                                   check_files)

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
                                field=where + ".size", rule=limit[rel][1])
        data = self.source.read_file(full, entry.size)
        computed = format_crc32c(crc32c_of(data))
        if computed != entry.crc32c:
            raise IntegrityError(f"file crc32c mismatch: stored {entry.crc32c}, computed {computed}", file=full,
                                 field=where + ".crc32c", rule="R-CHK-7")
        return data

    def check_kind(self, name: str, kind: str | None = None) -> ComponentRecord:
        """Step 12: R-CMP-21 (kind not implemented), R-CMP-19 (kind_version too new)."""
        record = self.record(name)
        where = field_of("components", name)
        if record.kind not in KIND_VERSIONS:
            raise UnknownComponentKind(f"component {name!r} has kind {record.kind!r}, which this reader does not "
                                       "implement", file=MANIFEST_NAME, field=where + ".kind", rule="R-CMP-21")
        if record.kind_version > KIND_VERSIONS[record.kind]:
            raise UnsupportedVersion(
                f"{record.kind} kind_version {record.kind_version} is newer than the highest this reader "
                f"supports ({KIND_VERSIONS[record.kind]})",
                file=MANIFEST_NAME, field=where + ".kind_version", rule="R-CMP-19")
        if kind is not None and record.kind != kind:
            raise IncompatibleComponent(f"component {name!r} is a {record.kind!r} component, not {kind!r}",
                                        file=MANIFEST_NAME, field=where + ".kind")
        return record

    _check_kind = check_kind

    # -- tree components -----------------------------------------------------------
    def decoded_tree(self, name: str) -> tuple[DecodedTree, memoryview, str]:
        """Steps 12-15: the verified tree document, the data file map, and the data file's path."""
        decoded, data_file, size = self.decoded_layout(name)
        data_map = self.source.map_file(data_file, size)
        return decoded, data_map, data_file

    def decoded_layout(self, name: str) -> tuple[DecodedTree, str, int]:
        """Steps 12-15 without touching data.bin: the document, the data file's path and size."""
        self.check_kind(name, "tree")
        decoded = self.parse_tree(name, self.read_small(name, "tree.msgpack"))
        data_file, size = self.check_tree_layout(name, decoded)
        return decoded, data_file, size

    def parse_tree(self, name: str, data: bytes) -> DecodedTree:
        """Step 14 for a ``tree`` component: its verified ``tree.msgpack`` bytes, decoded."""
        try:
            return decode_tree(data)
        except CheckpointError as exc:
            raise exc.at(file=self._file(self.record(name), "tree.msgpack")) from None

    def check_tree_layout(self, name: str, decoded: DecodedTree) -> tuple[str, int]:
        """Step 15 for a ``tree`` component; returns the data file's path and size."""
        record = self.record(name)
        size = record.files["data.bin"].size
        try:
            check_layout(decoded.arrays, size)
        except CheckpointError as exc:
            raise exc.at(file=self._file(record, "tree.msgpack")) from None
        return self._file(record, "data.bin"), size

    def open_region(self, data_file: str, size: int) -> FileRegion:
        """Positioned reads of a data file (:meth:`Source.open_region`)."""
        return self.source.open_region(data_file, size)

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
        if copy:
            decoded, data_file, size = self.decoded_layout(name)
            fresh: dict[int, np.ndarray] = {}
            if decoded.arrays:
                with self.open_region(data_file, size) as region:
                    fresh = read_arrays(region, decoded.arrays, data_file, verify=verify)
            return _materialize_read(decoded, fresh, fw, map_location)
        decoded, data_map, data_file = self.decoded_tree(name)
        arrays: dict[tuple[int, int, str, tuple[int, ...]], Any] = {}

        def numpy_leaf(ref: ArrayRef) -> np.ndarray:
            view = array_view(data_map, ref)
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
                return fw.prng_key(node.impl, numpy_leaf(node.data), map_location=map_location)  # type: ignore[arg-type]  # data: an ArrayRef
            if isinstance(node, DtypeValue):
                return fw.dtype(node.name)
            return node

        return materialize(decoded.root, leaf) if decoded.has_placeholders else decoded.root

    def read_into(self, name: str, target: Any, *, verify: bool = True) -> Any:
        """Decode a tree component (NumPy), reading array bytes straight into ``target``'s arrays.

        Every array node whose place in ``target`` (same dict keys, same list
        positions) holds a writeable, C-contiguous NumPy array of its exact
        shape and dtype is read into that array; other nodes get fresh arrays.
        Returns the tree, holding the filled arrays themselves.

        The restore is verify-first, all or nothing: every array of the
        component is checked (CRC-32C, bool bytes) before the first byte of
        any target is written, the targets' bytes through one small scratch
        buffer (nothing is mapped, memory does not grow). If a check fails,
        the error is raised and every array of ``target`` is unchanged. This
        reads the targets' bytes twice; ``verify=False`` (an explicit opt-out
        of the checks, R-CHK-11) fills them in one pass without checking.

        >>> import numpy as np, tempfile, os
        >>> from opencheckpoint import Checkpoint
        >>> path = Checkpoint(w={"a": np.arange(3.0)}).save(os.path.join(tempfile.mkdtemp(), "c"))
        >>> live = {"a": np.zeros(3)}
        >>> with open_checkpoint(path) as ckpt:
        ...     tree = ckpt.read_into("w", live)
        >>> tree["a"] is live["a"], live["a"].tolist()
        (True, [0.0, 1.0, 2.0])
        """
        return self.prepare_into(name, target, verify=verify)()

    def prepare_into(self, name: str, target: Any, *, verify: bool = True) -> Callable[[], Any]:
        """:meth:`read_into` in two phases: everything is read and verified now, ``target`` untouched;
        the returned callable fills ``target``'s arrays (without checking again) and returns the tree.

        A restore of several components prepares every one before it fills any
        (:meth:`Checkpoint.load <opencheckpoint.Checkpoint.load>`).
        """
        decoded, data_file, size = self.decoded_layout(name)
        targets: dict[int, np.ndarray] = {}
        match_targets(decoded.root, target, targets)
        fresh: dict[int, np.ndarray] = {}
        deferred: list[tuple[ArrayRef, np.ndarray]] = []
        if decoded.arrays:
            with self.open_region(data_file, size) as region:
                fresh = read_arrays(region, decoded.arrays, data_file, verify=verify, targets=targets,
                                    deferred=deferred)

        def fill() -> Any:
            if deferred:
                with self.open_region(data_file, size) as region:
                    fill_targets(region, deferred, data_file, verify=verify)
            return _materialize_read(decoded, fresh, get_framework("numpy"), None)

        return fill

    # -- json and files components -----------------------------------------------------
    def json(self, name: str) -> Any:
        """Steps 12-14 for a ``json`` component: its verified, strictly parsed value."""
        self.check_kind(name, "json")
        return self.parse_json(name, self.read_small(name, "value.json"))

    def parse_json(self, name: str, data: bytes) -> Any:
        """Step 14 for a ``json`` component: its verified ``value.json`` bytes, strictly parsed."""
        return parse_ijson(data, file=self._file(self.record(name), "value.json"), document="value")

    def iter_files(self, name: str, *, verify: bool = True) -> Iterator[tuple[str, bytes]]:
        """(relative name, ``bytes``) of every file of a ``files`` component, each verified (R-CHK-12).

        The data is immutable ``bytes`` in both forms (:meth:`Source.read_file`).
        """
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
            # From here on a writer replacing the checkpoint cannot take its files away (R-RDR-14).
            source.pin(parsed.file_paths())
    except BaseException:
        source.close()
        raise
    return source, parsed


def _open_once(
    target: Path,
    understood: Collection[str] | Mapping[str, int],
    issues: list[CheckpointError] | None,
    check_files: bool,
) -> tuple[Path, Source, ParsedManifest]:
    """Steps 1-11 once: the target if it exists, else the R-PUB-13 fallback."""
    if os.path.exists(target):
        return (target, *_open_at(target, understood, issues, check_files))
    return _open_fallback(target, understood)


def _open_consistent(
    target: Path,
    understood: Collection[str] | Mapping[str, int],
    issues: list[CheckpointError] | None,
    check_files: bool,
) -> tuple[Path, Source, ParsedManifest]:
    """Open ``target``; if it failed because another process replaced the checkpoint meanwhile, once more.

    A failure counts as a race when the name resolves to another entry (or to nothing, or to something)
    after the attempt than before it (:func:`identity`): a writer published over it, so the checkpoint
    that was being read may have been deleted half-way. The retry reads the new, complete checkpoint
    (R-RDR-13). If that races too, :class:`ConcurrentModification` says so; an error with the name
    unchanged is the checkpoint's own and is raised as it is.
    """
    for attempt in range(2):
        before = identity(target)
        found: list[CheckpointError] | None = [] if issues is not None else None
        try:
            return _open_once(target, understood, found, check_files)
        except CheckpointError as exc:
            error: CheckpointError = exc
        except OSError as exc:  # an unforeseen race still never escapes as a raw OSError
            error = MissingFile(f"cannot read: {exc.strerror}", file=str(exc.filename or target), rule="R-CON-3")
        if identity(target) == before and not isinstance(error, ConcurrentModification):
            if issues is not None and found:
                issues.extend(found)
            raise error
        if attempt:
            raise ConcurrentModification(
                f"another process replaced or is writing the checkpoint while it was being opened, twice in a "
                f"row; the last attempt failed with {error}", file=str(target), rule="R-RDR-13") from None
    raise AssertionError("unreachable")  # pragma: no cover  (the loop returns or raises)


#: Errors of one rule reported one by one by the inventory; the rest are counted in one more error,
#: so a manifest listing a million absent files costs a million lookups, not a million error objects.
REPORTED_PER_RULE = 100


def check_inventory(source: Source, parsed: ParsedManifest, issues: list[CheckpointError] | None) -> None:
    """Step 10 (entry types, listed files present, unlisted files, archive members) and step 11 (sizes)."""
    files, errors, rejected = source.inventory()
    listed = parsed.file_paths()

    def under_rejected(rel: str) -> bool:
        return any(rel == bad or rel.startswith(bad + "/") for bad in rejected)

    missing = 0
    for rel, (component, key) in listed.items():
        if rel not in files and not under_rejected(rel):
            missing += 1
            if missing <= REPORTED_PER_RULE:
                errors.append(MissingFile("listed in the manifest but absent (or not a regular file)", file=rel,
                                          field=field_of("components", component, "files", key),
                                          rule="R-CON-3"))
    if missing > REPORTED_PER_RULE:
        errors.append(MissingFile(f"and {missing - REPORTED_PER_RULE} more listed files are absent (not reported "
                                  "one by one)", file=str(source.path), field="$.components", rule="R-CON-3"))
    extra = 0
    for rel in files:
        if rel != MANIFEST_NAME and rel not in listed:
            extra += 1
            if extra <= REPORTED_PER_RULE:
                errors.append(ExtraFile("no component lists this file", file=rel, rule="R-CON-2"))
    if extra > REPORTED_PER_RULE:
        errors.append(ExtraFile(f"and {extra - REPORTED_PER_RULE} more files that no component lists (not "
                                "reported one by one)", file=str(source.path), rule="R-CON-2"))
    _raise_first(errors, issues)
    components = parsed.manifest.components
    for rel, (component, key) in listed.items():
        expected = components[component].files[key].size
        if files[rel] != expected:
            error = IntegrityError(f"file is {files[rel]} bytes, the manifest says {expected} "
                                   f"({'truncated' if files[rel] < expected else 'extended'})", file=rel,
                                   field=field_of("components", component, "files", key, "size"),
                                   rule="R-CHK-6")
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
        writers = writers_at(target)
        hint = f" (another process is writing a checkpoint here: {writers[0]})" if writers else ""
        raise NotACheckpoint(f"no such file or directory{hint}", file=str(target), rule="R-PUB-10")
    raise NotACheckpoint(f"the path does not exist and {len(opened)} of {len(candidates)} "
                         f"'.{target.name}.oc-old-*' entries open cleanly (exactly one must)", file=str(target),
                         rule="R-PUB-14")


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
    rename: Any = None,
    subtree: str | None = None,
) -> Any:
    """Read one component's stored value (no live object needed), as ``framework`` objects.

    If another process replaces the checkpoint while it is read and the reader loses a file it
    could not hold open, the read starts over once on the new checkpoint (R-RDR-13).
    ``rename`` and ``subtree`` select and rename its key paths as in :meth:`Checkpoint.load
    <opencheckpoint.Checkpoint.load>` (:mod:`opencheckpoint.restore_plan`).
    """
    from .restore_plan import RestorePlan  # restore-side option: kept out of the reader's own imports

    plan = RestorePlan(rename, subtree)
    value: Any = None
    for attempt in range(2):
        try:
            with CheckpointReader(path) as reader:
                value = reader.read(name, framework=framework, verify=verify, map_location=map_location)
            break
        except ConcurrentModification:
            if attempt:
                raise
    try:
        return plan.apply(value, name)
    except CheckpointError as exc:
        raise exc.at(file=str(path), field=f"components.{name}") from None
