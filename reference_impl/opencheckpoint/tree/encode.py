"""Writing a tree: plan the msgpack document, then stream array bytes to ``data.bin``.

Array bytes go straight from the source buffer to the file (no serialization
buffer). Big arrays are checksummed in a second thread while the main
thread writes them (``crc32c`` releases the GIL); the data file's own
CRC-32C is derived from the array CRCs with :func:`crc32c_combine`, so no
byte is hashed twice.

>>> import numpy as np, tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> files = write_tree({"w": np.arange(3, dtype=np.float32), "step": 7}, d)
>>> sorted(files), files["data.bin"]["size"]
(['data.bin', 'tree.msgpack'], 12)
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

import crc32c as _crc32c_module
import msgpack
import numpy as np

from ..crc_combine import _multmodp, _x8nmodp
from ..dtypes import canonical_bools, dtype_name
from ..errors import CheckpointError, LimitExceeded, UnsupportedValue
from ..integrity import crc32c_of, file_entry, new_sha256
from ..limits import ALIGNMENT, ARRAY_MAX_NDIM, TREE_MAX_BIG_INT_BYTES, TREE_MAX_DEPTH
from ..progress import advance
from .nodes import INT_MAX, INT_MIN, PRNG_IMPL_KEY_SHAPES, DtypeValue, NamedTupleValue, PRNGKeyValue, Tag
from .refusals import big_endian as _big_endian
from .refusals import lost_attributes as _lost_attributes
from .refusals import lost_subclass as _lost_subclass
from .refusals import plain_array as _plain_array

if TYPE_CHECKING:
    from ..container.archive_writer import ArchiveWriter


class Writable(Protocol):
    """Where :meth:`TreePlan.stream_data` writes: a raw file or an archive member stream."""

    def write(self, buffer: Any, /) -> int | None: ...


#: Returns a replacement value for an object the core does not know, or NOT_HANDLED.
Converter = Callable[[Any], Any]
NOT_HANDLED: Final = object()

_MARK = {tag: msgpack.ExtType(int(tag), b"") for tag in Tag}
_MARK_ARRAY: Final = _MARK[Tag.ARRAY]
#: Arrays at least this big are checksummed in the helper thread while being written
#: (below, the hand-off costs more than the overlap gains).
_THREADED_CRC_BYTES: Final = 512 << 10
#: Small arrays are gathered into one buffer to save system calls.
_COALESCE_BYTES: Final = 64 << 10
#: The gathered buffer is written (and folded into the file CRC) once it holds this much.
_PENDING_BYTES: Final = 1 << 20
_WRITE_CHUNK: Final = 16 << 20
_ZEROS: Final = bytes(ALIGNMENT)


_crc32c: Final = _crc32c_module.crc32c


def _address(array: np.ndarray, nbytes: int) -> tuple[int, int]:
    """The alias key of an array: its data address and length."""
    return array.__array_interface__["data"][0], nbytes


def big_int_bytes(value: int) -> bytes:
    """Minimal two's complement little-endian encoding of an int."""
    length = ((value if value >= 0 else ~value).bit_length() + 8) // 8
    return value.to_bytes(length, "little", signed=True)


def _big_int(value: int, path: str) -> bytes:
    """The tag 3 magnitude of ``value``; refused at save beyond R-LIM-18, which every reader enforces."""
    if (value if value >= 0 else ~value).bit_length() >= TREE_MAX_BIG_INT_BYTES * 8:
        raise UnsupportedValue(
            f"an int of {value.bit_length()} bits: a tree int may take at most {TREE_MAX_BIG_INT_BYTES} bytes "
            f"(two's complement, R-LIM-18); store a larger number as a str or as bytes", field=path,
            rule="R-LIM-18")
    return big_int_bytes(value)


class _Planned:
    """One distinct extent of data.bin and the array nodes that refer to it."""

    __slots__ = ("array", "nodes", "offset", "nbytes")

    def __init__(self, array: np.ndarray, offset: int, nbytes: int) -> None:
        self.array = array  # C-contiguous, little-endian; kept alive until written
        self.nodes: list[list[Any]] = []
        self.offset = offset
        self.nbytes = nbytes

    @property
    def buffer(self) -> memoryview:
        """The extent's bytes (no copy)."""
        try:
            return self.array.data.cast("B")  # .data is memoryview(array), typed as one on Python 3.11
        except (TypeError, ValueError):  # dtypes without a buffer format (ml_dtypes, 0-d arrays)
            return self.array.reshape(-1).view(np.uint8).data


#: dtype object -> (spec name, stored byte-swapped); equal dtypes are usually one object.
_DTYPE_NAMES: dict[np.dtype, tuple[str, bool]] = {}


def _name_of(dtype: np.dtype) -> tuple[str, bool]:
    cached = _DTYPE_NAMES.get(dtype)
    if cached is None:
        cached = (dtype_name(dtype), dtype.byteorder == ">")
        if len(_DTYPE_NAMES) < 1024:
            _DTYPE_NAMES[dtype] = cached
    return cached


@functools.lru_cache(maxsize=256)
def _x8n(nbytes: int) -> int:
    """x^(8 * nbytes) mod P, memoised: models repeat the same tensor sizes."""
    return _x8nmodp(nbytes)


def _combine(crc1: int, crc2: int, len2: int) -> int:
    """:func:`crc32c_combine` with the length-dependent factor memoised."""
    return _multmodp(_x8n(len2), crc1) ^ crc2



def _crc_in(pool: ThreadPoolExecutor, buffer: Any) -> Future[int] | None:
    """The checksum of ``buffer`` computed in ``pool`` while the caller writes it; None when the pool refuses
    work: at interpreter exit concurrent.futures stops accepting it, and a save still in flight then (an
    async save finishing at exit) checksums inline instead of failing."""
    try:
        return pool.submit(_crc32c, buffer)
    except RuntimeError:
        return None

class TreePlan:
    """The msgpack-ready node structure of a value and the arrays to write, with offsets."""

    def __init__(self, value: Any, converter: Converter | None = None) -> None:
        self._convert = converter
        self.extents: list[_Planned] = []
        self._by_address: dict[tuple[int, int], _Planned] = {}
        # Arrays that own their memory cannot share it with another owner: they are keyed by
        # object until the first view (which may alias one) turns on keying by data address.
        self._by_id: dict[int, _Planned] = {}
        self._by_address_mode = False
        self.data_size = 0
        self.root = self._node(value, 0, "$")

    # -- planning ---------------------------------------------------------------
    def _node(self, value: Any, depth: int, path: str) -> Any:
        kind = type(value)
        if value is None or kind is bool or kind is str or kind is bytes:
            return value
        if kind is int:
            return value if INT_MIN <= value <= INT_MAX else [_MARK[Tag.BIG_INT], _big_int(value, path)]
        if kind is float:
            return value
        if kind is np.ndarray:
            return self._array(value, path)
        if isinstance(value, np.generic):
            return self._scalar(value, path)
        if depth >= TREE_MAX_DEPTH and isinstance(value, (dict, list, tuple, Mapping)):
            raise LimitExceeded(f"tree nested deeper than {TREE_MAX_DEPTH}", field=path, rule="R-LIM-10")
        if kind is dict:
            return self._dict(value, depth, path)
        if isinstance(value, dict) or (isinstance(value, Mapping) and not hasattr(value, "state_dict")):
            return self._dict(self._plain_mapping(value, path), depth, path)
        if kind is list:
            return [self._node(item, depth + 1, f"{path}[{i}]") for i, item in enumerate(value)]
        if isinstance(value, tuple):
            fields = getattr(type(value), "_fields", None)
            if isinstance(value, NamedTupleValue) or isinstance(fields, tuple):
                # An instance of a named tuple subclass may carry attributes of its own: not stored.
                if not isinstance(value, NamedTupleValue) and getattr(value, "__dict__", None):
                    raise _lost_attributes(value, sorted(vars(value)), path)
                names = value._fields  # type: ignore[attr-defined]  # a named tuple: checked just above
                type_name = value.type_name if isinstance(value, NamedTupleValue) else (
                    f"{type(value).__module__}.{type(value).__qualname__}")
                body = {str(name): self._node(item, depth + 1, f"{path}.{name}")
                        for name, item in zip(names, value, strict=True)}
                return [_MARK[Tag.NAMED_TUPLE], type_name, body]
            if kind is not tuple and not _is_size(value):
                raise _lost_subclass(value, path)
            return [_MARK[Tag.TUPLE], *(self._node(item, depth + 1, f"{path}[{i}]") for i, item in enumerate(value))]
        if isinstance(value, (bool, int, float, str, bytes, bytearray, memoryview)):
            # A subclass (an IntEnum, a StrEnum, a bytearray) would come back as the plain type.
            raise _lost_subclass(value, path)
        if kind is complex:
            return [_MARK[Tag.COMPLEX], value.real, value.imag]
        if isinstance(value, np.ndarray):
            return self._array(_plain_array(value, path), path)
        if isinstance(value, PRNGKeyValue):
            return self._prng_key(value, path)
        if isinstance(value, DtypeValue):
            return [_MARK[Tag.DTYPE], value.name]
        if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
            dtype = np.dtype(value)
            if dtype.byteorder == ">":
                raise _big_endian(dtype, path)
            return [_MARK[Tag.DTYPE], dtype_name(dtype)]
        if self._convert is not None:
            try:
                replacement = self._convert(value)
            except CheckpointError as exc:
                raise exc.at(field=path) from None
            if replacement is not NOT_HANDLED:
                return self._node(replacement, depth, path)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            raise UnsupportedValue(
                f"cannot store the dataclass {kind.__module__}.{kind.__qualname__} inside a tree: its type would "
                "not come back. Make it a component of its own (Checkpoint(config=value) restores its fields "
                "into a live instance with DataclassAdapter), or store dataclasses.asdict(value)",
                field=path, rule="R-WTR-3")
        if callable(getattr(value, "state_dict", None)) and callable(getattr(value, "load_state_dict", None)):
            fix = ("it has state_dict()/load_state_dict(): make it a component of its own (Checkpoint(name=value) "
                   "saves it with StateDictAdapter, keeping its state whole)")
        else:
            fix = "register an adapter or convert it to arrays, dicts, lists and scalars"
        raise UnsupportedValue(f"cannot store a {kind.__module__}.{kind.__qualname__} in a tree ({fix})",
                               field=path, rule="R-WTR-3")

    def _plain_mapping(self, value: Mapping[Any, Any], path: str) -> Mapping[Any, Any]:
        """A mapping that is not a plain ``dict``, if it comes back as one without losing anything.

        An ``OrderedDict`` is stored as a plain dict (spec §8.3). Every other
        mapping type, and any mapping carrying instance attributes (torch's
        ``OrderedDict._metadata``), would lose its type or attributes: a
        framework converter may turn it into plain values (``FrozenDict``),
        otherwise the value is refused (R-WTR-3) naming what would be lost.
        """
        kind = type(value)
        attributes = sorted(vars(value)) if hasattr(value, "__dict__") else []
        if kind is OrderedDict and not attributes:
            return value
        if not attributes and self._convert is not None and not isinstance(value, dict):
            replacement = self._convert(value)
            if replacement is not NOT_HANDLED:
                if type(replacement) is not dict:
                    raise UnsupportedValue(f"converter turned a {kind.__qualname__} into a "
                                           f"{type(replacement).__qualname__}, not a dict", field=path,
                                           rule="R-WTR-3")
                return replacement
        name = f"{kind.__module__}.{kind.__qualname__}"
        if attributes:
            lost = f"its attribute{'s' if len(attributes) > 1 else ''} {', '.join(attributes)} would be lost"
            hint = (" (a torch module state dict: store the module itself as a component, whose adapter keeps "
                    "the module versions, or store dict(state_dict) to drop them deliberately)"
                    if attributes == ["_metadata"] else "")
        else:
            lost, hint = "it would come back as a plain dict", ""
        raise UnsupportedValue(
            f"cannot store this {name} as a tree dict: {lost}{hint}. Convert it to a plain dict, or use an "
            "adapter that keeps it (StateDictAdapter for objects with state_dict(), or your own Adapter)",
            field=path, rule="R-WTR-3")

    def _dict(self, value: Mapping[Any, Any], depth: int, path: str) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if type(key) is str and type(item) is np.ndarray:
                # The common leaf: its path is built only when an error needs it (the checks
                # that raise run before anything is planned, so running again is harmless).
                try:
                    out[key] = self._array(item, "")
                except CheckpointError:
                    out[key] = self._array(item, f"{path}.{key}")
                continue
            # Exact types only: an enum key would come back as the plain str or int (R-WTR-8).
            if type(key) is str or (type(key) is int and INT_MIN <= key <= INT_MAX):
                key_path = f"{path}.{key}" if type(key) is str else f"{path}[{key}]"
                out[key] = self._node(item, depth + 1, key_path)
            else:
                raise UnsupportedValue(
                    f"dict key {key!r} ({type(key).__name__}) is not a str or a 64-bit int (a subclass such as an "
                    "enum would come back as the plain type: use str(key) or int(key))",
                    field=path, rule="R-TREE-10",
                )
        return out

    def _scalar(self, value: np.generic, path: str) -> list[Any]:
        name = dtype_name(value.dtype)
        raw = np.asarray(value).astype(value.dtype.newbyteorder("<"), copy=False).tobytes()
        return [_MARK[Tag.SCALAR], name, raw]

    def _prng_key(self, value: PRNGKeyValue, path: str) -> list[Any]:
        expected = PRNG_IMPL_KEY_SHAPES.get(value.impl)
        data = np.asarray(value.data)
        if data.dtype != np.uint32:
            raise UnsupportedValue(f"PRNG key data must be uint32, got {data.dtype}", field=path, rule="R-TREE-26")
        if expected is not None and tuple(data.shape[len(data.shape) - len(expected):]) != expected:
            raise UnsupportedValue(f"{value.impl} key data must end with shape {expected}, got {data.shape}",
                                   field=path, rule="R-TREE-27" if value.impl == "threefry2x32" else "R-TREE-28")
        return [_MARK[Tag.PRNG_KEY], value.impl, self._array(data, path + ".data")]

    def _array(self, array: np.ndarray, path: str) -> list[Any]:
        try:
            name, swapped = _name_of(array.dtype)
        except CheckpointError as exc:
            raise exc.at(field=path) from None
        if array.ndim > ARRAY_MAX_NDIM:
            raise LimitExceeded(f"array has {array.ndim} dimensions, limit {ARRAY_MAX_NDIM}", field=path,
                                rule="R-LIM-13")
        if swapped:
            # Spec dtypes are little-endian: a byte-swapped copy would come back as another dtype.
            raise _big_endian(array.dtype, path)
        flags = array.flags
        if not flags.c_contiguous:
            array = np.ascontiguousarray(array)
            flags = array.flags
        if name == "bool":  # a byte other than 00/01 is True to NumPy and torch: stored as 01 (R-ARR-13)
            array = canonical_bools(array)
            flags = array.flags
        nbytes = array.nbytes
        node: list[Any] = [_MARK_ARRAY, name, array.shape, 0, nbytes, 0]
        if nbytes == 0:
            return node
        if flags.owndata and not self._by_address_mode:
            planned = self._by_id.get(id(array))
            if planned is None:
                planned = self._by_id[id(array)] = self._plan_extent(array, nbytes)
        else:
            if not self._by_address_mode:
                self._by_address_mode = True
                for earlier in self._by_id.values():
                    self._by_address.setdefault(_address(earlier.array, earlier.nbytes), earlier)
            address = _address(array, nbytes)
            planned = self._by_address.get(address)
            if planned is None:
                planned = self._by_address[address] = self._plan_extent(array, nbytes)
        node[3] = planned.offset
        planned.nodes.append(node)
        return node

    def _plan_extent(self, array: np.ndarray, nbytes: int) -> _Planned:
        offset = -(-self.data_size // ALIGNMENT) * ALIGNMENT
        planned = _Planned(array, offset, nbytes)
        self.extents.append(planned)
        self.data_size = offset + nbytes
        return planned

    # -- writing ----------------------------------------------------------------
    def write_data(self, path: Path, *, durable: bool, sha256: bool) -> dict[str, Any]:
        """Stream every extent to ``path``; fill in each array node's crc32c; return the file entry."""
        with open(path, "wb", buffering=0) as out:
            entry = self.stream_data(out, sha256=sha256)
            if durable:
                os.fsync(out.fileno())
        return entry

    def size_bound(self) -> int:
        """The most bytes :meth:`pack` can return once the checksums are filled in.

        A checksum is the only value not known before the data is written, and msgpack stores
        any 32-bit unsigned int in at most 5 bytes, the width of 0xFFFFFFFF.
        """
        nodes = [node for extent in self.extents for node in extent.nodes]
        saved = [node[5] for node in nodes]
        for node in nodes:
            node[5] = 0xFFFFFFFF
        try:
            return len(self.pack())
        finally:
            for node, value in zip(nodes, saved, strict=True):
                node[5] = value

    def stream_data(self, out: Writable, *, sha256: bool) -> dict[str, Any]:
        """Write every extent to ``out`` in order; fill in each array node's crc32c; return the file entry."""
        digest = new_sha256() if sha256 else None
        file_crc = 0
        pending = bytearray()
        position = 0
        with ThreadPoolExecutor(1, "oc-crc32c") as pool:

            def emit(chunk: Any) -> None:
                view = memoryview(chunk)
                for start in range(0, len(view), _WRITE_CHUNK):
                    piece = view[start : start + _WRITE_CHUNK]
                    while piece:
                        written = out.write(piece)
                        assert written is not None
                        piece = piece[written:]
                if digest is not None:
                    digest.update(chunk)
                advance(len(view))

            for extent in self.extents:
                padding = extent.offset - position
                if padding:
                    pending += _ZEROS[:padding]
                buffer = extent.buffer
                if extent.nbytes < _COALESCE_BYTES:
                    # The file CRC of gathered bytes is computed over the whole buffer when it is
                    # written (one call), not combined per array.
                    crc = _crc32c(buffer)
                    pending += buffer
                    if len(pending) >= _PENDING_BYTES:
                        file_crc = _crc32c(pending, file_crc)
                        emit(pending)
                        pending = bytearray()
                else:
                    if pending:
                        file_crc = _crc32c(pending, file_crc)
                        emit(pending)
                        pending = bytearray()
                    future = _crc_in(pool, buffer) if extent.nbytes >= _THREADED_CRC_BYTES else None
                    if future is not None:
                        emit(buffer)
                        crc = future.result()
                    else:
                        crc = _crc32c(buffer)
                        emit(buffer)
                    file_crc = _combine(file_crc, crc, extent.nbytes)
                for node in extent.nodes:
                    node[5] = crc
                position = extent.offset + extent.nbytes
            if pending:
                file_crc = _crc32c(pending, file_crc)
                emit(pending)
        return file_entry(position, file_crc, digest)

    def pack(self) -> bytes:
        """The msgpack bytes of the document (after :meth:`write_data` filled the checksums)."""
        try:
            packed: bytes = msgpack.packb(self.root, use_bin_type=True, strict_types=False)
            return packed
        except UnicodeEncodeError as exc:
            raise UnsupportedValue(f"string is not valid Unicode: {exc.reason}", rule="R-TREE-9") from None


def _is_size(value: tuple[Any, ...]) -> bool:
    """``torch.Size``: a tuple of ints by definition, stored as a tuple (a live ``torch.Size`` target gets one)."""
    kind = type(value)
    return kind.__name__ == "Size" and kind.__module__ == "torch"


def write_small_file(path: Path, data: bytes, *, durable: bool, sha256: bool) -> dict[str, Any]:
    """Write a whole file from memory and return its file entry."""
    with open(path, "wb", buffering=0) as out:
        view = memoryview(data)
        while view:
            written = out.write(view)
            assert written is not None
            view = view[written:]
        if durable:
            os.fsync(out.fileno())
    return small_file_entry(data, sha256=sha256)


def small_file_entry(data: bytes, *, sha256: bool) -> dict[str, Any]:
    """The file entry (size, crc32c, optional sha256) of bytes held in memory."""
    digest = new_sha256() if sha256 else None
    if digest is not None:
        digest.update(data)
    return file_entry(len(data), crc32c_of(data), digest)


def write_tree(
    value: Any, directory: Path, *, converter: Converter | None = None, durable: bool = True, sha256: bool = False,
    archive: ArchiveWriter | None = None, member_prefix: str = "",
) -> dict[str, dict[str, Any]]:
    """Write ``tree.msgpack`` and ``data.bin`` for ``value``; return their file entries.

    Into ``directory``, or, given ``archive``, as the members ``<member_prefix>/tree.msgpack`` and
    ``<member_prefix>/data.bin`` streamed straight into the archive (one pass: the array bytes are
    written once, at their final offset; the tree document, which needs their checksums, fills the
    room reserved before them). ``value`` may be a :class:`TreePlan` made earlier (an async save's snapshot).
    """
    plan = value if isinstance(value, TreePlan) else TreePlan(value, converter)
    if archive is None:
        data_entry = plan.write_data(directory / "data.bin", durable=durable, sha256=sha256)
        tree_entry = write_small_file(directory / "tree.msgpack", plan.pack(), durable=durable, sha256=sha256)
        return {"tree.msgpack": tree_entry, "data.bin": data_entry}
    slot = archive.reserve(f"{member_prefix}/tree.msgpack", plan.size_bound())
    with archive.stream(f"{member_prefix}/data.bin", plan.data_size) as member:
        data_entry = plan.stream_data(member, sha256=sha256)
    packed = plan.pack()
    archive.fill(slot, packed)
    return {"tree.msgpack": small_file_entry(packed, sha256=sha256), "data.bin": data_entry}


__all__ = ["NOT_HANDLED", "TreePlan", "Writable", "big_int_bytes", "small_file_entry", "write_small_file", "write_tree"]
