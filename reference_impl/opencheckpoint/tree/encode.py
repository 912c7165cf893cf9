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
import os
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from itertools import repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import msgpack
import numpy as np

from ..format.dtypes import canonical_bools, dtype_name
from ..format.errors import CheckpointError, UnsupportedValue
from ..format.integrity import crc32c_of, file_entry, new_sha256
from ..format.limits import ARRAY_MAX_NDIM, TREE_MAX_DEPTH
from ..rules import raise_if, required
from ..rules.tree import TREE
from .ctree import compiled_pack
from .datafile import DataFilePlan, Writable
from .depth import ARRAY_NODE_DEPTH as _ARRAY_NODE_DEPTH
from .depth import check_depth as _check_depth
from .depth import wire_depth
from .file_array import FileArray
from .gc_pause import paused_gc
from .nodes import INT_MAX, INT_MIN, DtypeValue, NamedTupleValue, PRNGKeyValue, Tag
from .per_rank import PerRank, plan_per_rank
from .plan_runs import DTYPE_NAMES as _DTYPE_NAMES
from .plan_runs import NODES as _NODES
from .plan_runs import OFFSET as _OFFSET
from .plan_runs import SHAPE as _SHAPE
from .plan_runs import name_of as _name_of
from .plan_runs import plain_run as _plain_run
from .refusals import big_endian as _big_endian
from .refusals import lost_attributes as _lost_attributes
from .refusals import lost_subclass as _lost_subclass
from .refusals import plain_array as _plain_array
from .refusals import refuse, unencodable_path
from .shard_plan import ShardedValue, ShardPlan, check_cover
from .wire import big_int_bytes

if TYPE_CHECKING:
    from ..container.archive_writer import ArchiveWriter


#: Returns a replacement value for an object the core does not know, or NOT_HANDLED.
Converter = Callable[[Any], Any]
NOT_HANDLED: Final = object()

_MARK = {tag: msgpack.ExtType(int(tag), b"") for tag in Tag}
_MARK_ARRAY: Final = _MARK[Tag.ARRAY]


def _big_int(value: int, path: str) -> bytes:
    """The tag 3 magnitude of ``value``; refused at save beyond R-LIM-18, which every reader enforces."""
    magnitude = (value if value >= 0 else ~value).bit_length() // 8 + 1  # two's complement bytes
    raise_if(TREE.check("R-LIM-18", path, magnitude, "; store a larger number as a str or as bytes",
                        reported_as=UnsupportedValue))
    return big_int_bytes(value)


class TreePlan:
    """The msgpack-ready node structure of a value and the arrays to write, with offsets."""

    def __init__(self, value: Any, converter: Converter | None = None, *, rank: int = 0) -> None:
        self._convert = converter
        self._rank = rank
        #: ``data.bin``: every tag-6 array's extent.
        self.data = DataFilePlan()
        #: This rank's shard data file and tag-10 nodes; None until the tree holds a :class:`ShardedValue`.
        self.shards: ShardPlan | None = None
        #: The per-rank value nodes (:mod:`.per_rank`) of a rank of a collective save, in document order.
        self.per_rank: list[list[Any]] = []
        with paused_gc():  # a node list per array, none of them garbage (gc_pause)
            self.root = self._node(value, 0, "$")

    @property
    def extents(self) -> list[Any]:
        """The distinct extents of ``data.bin``, in file order."""
        return self.data.extents

    @property
    def data_size(self) -> int:
        """The size of ``data.bin``."""
        return self.data.size

    # -- planning ---------------------------------------------------------------
    def _node(self, value: Any, depth: int, path: str) -> Any:
        """The msgpack-ready node of ``value``: plain leaves and arrays here, containers and the rest below.

        ``depth`` is that of the container holding ``value`` (0 for the root). Every msgpack array or map the
        node adds counts toward R-LIM-10 (spec §8.8: tagged nodes and an array node's ``shape`` too), so a
        value the reader would refuse as too deep is refused here, before anything is written.
        """
        kind = type(value)
        if value is None or kind is bool or kind is str or kind is bytes:
            return value
        if kind is int:
            if INT_MIN <= value <= INT_MAX:
                return value
            _check_depth(depth + 1, path)  # [tag, magnitude]
            return [_MARK[Tag.BIG_INT], _big_int(value, path)]
        if kind is float:
            return value
        if kind is np.ndarray:
            _check_depth(depth + _ARRAY_NODE_DEPTH, path)
            return self._array(value, path)
        if isinstance(value, np.generic):
            _check_depth(depth + 1, path)  # [tag, dtype, bytes]
            return self._scalar(value, path)
        if depth >= TREE_MAX_DEPTH and isinstance(value, (dict, list, tuple, Mapping)):
            _check_depth(depth + 1, path)
        container = self._container(value, depth, path)
        if container is not NOT_HANDLED:
            return container
        node = self._other(value, depth, path)
        _check_depth(depth + wire_depth(node), path)  # rare kinds: measured on the node they made
        return node

    def _container(self, value: Any, depth: int, path: str) -> Any:
        """The node of a dict, mapping, list or tuple (named or not); NOT_HANDLED for any other value."""
        kind = type(value)
        if kind is dict:
            return self._dict(value, depth, path)
        if isinstance(value, dict) or (isinstance(value, Mapping) and not hasattr(value, "state_dict")):
            return self._dict(self._plain_mapping(value, path), depth, path)
        if kind is list:
            return [self._node(item, depth + 1, f"{path}[{i}]") for i, item in enumerate(value)]
        if not isinstance(value, tuple):
            return NOT_HANDLED
        fields = getattr(type(value), "_fields", None)
        if isinstance(value, NamedTupleValue) or isinstance(fields, tuple):
            # An instance of a named tuple subclass may carry attributes of its own: not stored.
            if not isinstance(value, NamedTupleValue) and getattr(value, "__dict__", None):
                raise _lost_attributes(value, sorted(vars(value)), path)
            names = value._fields  # type: ignore[attr-defined]  # a named tuple: checked just above
            type_name = value.type_name if isinstance(value, NamedTupleValue) else (
                f"{type(value).__module__}.{type(value).__qualname__}")
            _check_depth(depth + 2, path)  # [tag, type name, {fields}]: the fields' map is one level further in
            body = {str(name): self._node(item, depth + 2, f"{path}.{name}")
                    for name, item in zip(names, value, strict=True)}
            return [_MARK[Tag.NAMED_TUPLE], type_name, body]
        if kind is not tuple and not _is_size(value):
            raise _lost_subclass(value, path)
        return [_MARK[Tag.TUPLE], *(self._node(item, depth + 1, f"{path}[{i}]") for i, item in enumerate(value))]

    def _other(self, value: Any, depth: int, path: str) -> Any:
        """The node of a value that is no plain leaf, array or container: complex numbers, array
        subclasses, PRNG keys, sharded arrays, dtypes, what the converter replaces; else the refusal."""
        kind = type(value)
        if isinstance(value, (bool, int, float, str, bytes, bytearray, memoryview)):
            # A subclass (an IntEnum, a StrEnum, a bytearray) would come back as the plain type.
            raise _lost_subclass(value, path)
        if kind is complex:
            return [_MARK[Tag.COMPLEX], value.real, value.imag]
        if isinstance(value, np.ndarray):
            return self._array(_plain_array(value, path), path)
        if kind is FileArray:
            return self._file_array(value, path)
        if isinstance(value, PRNGKeyValue):
            return self._prng_key(value, path)
        if kind is ShardedValue:
            return self._sharded(value, path)
        if kind is PerRank:
            return plan_per_rank(self, value, depth, path)
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
        raise _refusal(value, path)

    def _sharded(self, value: ShardedValue, path: str) -> list[Any]:
        """The tag-10 node of a sharded array; its shards go to this rank's shard data file."""
        if self.shards is None:
            self.shards = ShardPlan(self._rank)
        return self.shards.node(value, path)

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
                    raise refuse(f"converter turned a {kind.__qualname__} into a "
                                           f"{type(replacement).__qualname__}, not a dict", field=path)
                return replacement
        name = f"{kind.__module__}.{kind.__qualname__}"
        if attributes:
            lost = f"its attribute{'s' if len(attributes) > 1 else ''} {', '.join(attributes)} would be lost"
            hint = (" (a torch module state dict: store the module itself as a component, whose adapter keeps "
                    "the module versions, or store dict(state_dict) to drop them deliberately)"
                    if attributes == ["_metadata"] else "")
        else:
            lost, hint = "it would come back as a plain dict", ""
        raise refuse(
            f"cannot store this {name} as a tree dict: {lost}{hint}. Convert it to a plain dict, or use an "
            "adapter that keeps it (StateDictAdapter for objects with state_dict(), or your own Adapter)",
            field=path)

    def _dict(self, value: Mapping[Any, Any], depth: int, path: str) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        # The runs below plan array nodes without _node: only where an array node fits under R-LIM-10.
        runs = depth + 1 + _ARRAY_NODE_DEPTH <= TREE_MAX_DEPTH
        if runs and type(value) is dict and self.data.compiled_dict(value, _MARK_ARRAY, out):
            return out  # a state dict of plain arrays, planned in one C call
        if (runs and value and _ONLY_NDARRAY.issuperset(map(type, value.values()))
                and _ONLY_STR.issuperset(map(type, value))):
            self._array_run(list(value), list(value.values()), out, path)  # a state dict of arrays: one run
            return out
        keys: list[str] = []
        arrays: list[np.ndarray] = []  # the run of str-keyed arrays met last, planned together
        for key, item in value.items():
            if runs and type(key) is str and type(item) is np.ndarray:
                keys.append(key)
                arrays.append(item)
                continue
            if keys:
                self._array_run(keys, arrays, out, path)
                keys, arrays = [], []
            # Exact types only: an enum key would come back as the plain str or int (R-WTR-8).
            if type(key) is str or (type(key) is int and INT_MIN <= key <= INT_MAX):
                key_path = f"{path}.{key}" if type(key) is str else f"{path}[{key}]"
                out[key] = self._node(item, depth + 1, key_path)
            else:
                raise required(TREE.check(
                    "R-TREE-10", path, False, f"dict key {key!r} ({type(key).__name__})",
                    " of 64 bits (a subclass such as an enum would come back as the plain type: use str(key) or "
                    "int(key))", reported_as=UnsupportedValue))
        if keys:
            self._array_run(keys, arrays, out, path)
        return out

    def _array_run(self, keys: list[str], arrays: list[np.ndarray], out: dict[Any, Any], path: str) -> None:
        """Plan consecutive dict values that are arrays, in order: in one step when every one is a plain
        distinct array that owns its memory (:func:`_plain_run`; one C call when the extension is built),
        else one at a time (:meth:`_array`)."""
        if self.data.compiled_run(keys, arrays, _MARK_ARRAY, out):
            return
        named = _plain_run(arrays)
        planned = self.data.new_extents(arrays, named[1]) if named is not None else None
        if named is None or planned is None:
            for key, item in zip(keys, arrays, strict=True):
                # The common leaf: its path is built only when an error needs it (the checks
                # that raise run before anything is planned, so running again is harmless).
                try:
                    out[key] = self._array(item, "")
                except CheckpointError:
                    out[key] = self._array(item, f"{path}.{key}")
            return
        names, sizes = named
        nodes = list(map(list, zip(repeat(_MARK_ARRAY), names, map(_SHAPE, arrays), map(_OFFSET, planned), sizes,
                                   repeat(0))))
        deque(map(list.append, map(_NODES, planned), nodes), maxlen=0)  # each extent's one node
        out.update(zip(keys, nodes, strict=True))

    def _scalar(self, value: np.generic, path: str) -> list[Any]:
        name = dtype_name(value.dtype)
        raw = np.asarray(value).astype(value.dtype.newbyteorder("<"), copy=False).tobytes()
        return [_MARK[Tag.SCALAR], name, raw]

    def _prng_key(self, value: PRNGKeyValue, path: str) -> list[Any]:
        data = np.asarray(value.data)
        raise_if(TREE.check("R-TREE-26", path, str(data.dtype), reported_as=UnsupportedValue)  # '>u4' too
                 or TREE.check("R-TREE-27", path, value.impl, data.shape, reported_as=UnsupportedValue)
                 or TREE.check("R-TREE-28", path, value.impl, data.shape, reported_as=UnsupportedValue))
        return [_MARK[Tag.PRNG_KEY], value.impl, self._array(data, path + ".data")]

    def _array(self, array: np.ndarray, path: str) -> list[Any]:
        cached = _DTYPE_NAMES.get(array.dtype)  # inlined: one call less per array (20,000 tiny arrays)
        if cached is None:
            try:
                cached = _name_of(array.dtype)
            except CheckpointError as exc:
                raise exc.at(field=path) from None
        name, swapped = cached
        if array.ndim > ARRAY_MAX_NDIM:  # tested inline: an array within the limit costs no call
            raise required(TREE.check("R-LIM-13", path, array.ndim))
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
        planned = self.data.extent_for(array, nbytes, flags.owndata)
        node[3] = planned.offset
        planned.nodes.append(node)
        return node

    def _file_array(self, array: FileArray, path: str) -> list[Any]:
        """The node of an array streamed from a file at write time (never aliased: its own extent)."""
        if array.ndim > ARRAY_MAX_NDIM:
            raise required(TREE.check("R-LIM-13", path, array.ndim))
        node: list[Any] = [_MARK_ARRAY, array.dtype, array.shape, 0, array.nbytes, 0]
        if array.nbytes:
            planned = self.data.source_extent(array, array.nbytes)
            node[3] = planned.offset
            planned.nodes.append(node)
        return node

    def write_data(self, path: Path, *, durable: bool, sha256: bool) -> dict[str, Any]:
        """Stream every extent to ``path``; fill in each array node's crc32c; return the file entry."""
        return self.data.write(path, durable=durable, sha256=sha256)

    def stream_data(self, out: Writable, *, sha256: bool) -> dict[str, Any]:
        """Write every extent to ``out`` in order; fill in each array node's crc32c; return the file entry."""
        return self.data.stream(out, sha256=sha256)

    def size_bound(self) -> int:
        """The most bytes :meth:`pack` can return once the checksums are filled in.

        A checksum is the only value not known before the data is written, and msgpack stores
        any 32-bit unsigned int in at most 5 bytes, the width of 0xFFFFFFFF.
        """
        nodes = self.data.nodes()
        saved = [node[5] for node in nodes]
        for node in nodes:
            node[5] = 0xFFFFFFFF
        try:
            return len(self.pack())
        finally:
            for node, value in zip(nodes, saved, strict=True):
                node[5] = value

    def pack(self) -> bytes:
        """The msgpack bytes of the document (after :meth:`write_data` filled the checksums): in one C pass
        when the extension is built (:func:`~.ctree.compiled_pack`, the same bytes), else, or on any value it
        leaves to msgpack, by ``msgpack.packb``, which names a str that cannot be encoded (R-TREE-9)."""
        packed = compiled_pack(self.root)
        if packed is not None:
            return packed
        try:
            return msgpack.packb(self.root, use_bin_type=True, strict_types=False)  # type: ignore[no-any-return]
        except UnicodeEncodeError as exc:
            raise required(TREE.check("R-TREE-9", unencodable_path(self.root), exc,
                                      reported_as=UnsupportedValue)) from None


def _refusal(value: Any, path: str) -> UnsupportedValue:
    """R-WTR-3: why ``value`` cannot be stored in a tree, and the fix (a component of its own, an adapter)."""
    kind = type(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return refuse(
            f"cannot store the dataclass {kind.__module__}.{kind.__qualname__} inside a tree: its type would "
            "not come back. Make it a component of its own (Checkpoint(config=value) restores its fields "
            "into a live instance with DataclassAdapter), or store dataclasses.asdict(value)",
            field=path)
    if callable(getattr(value, "state_dict", None)) and callable(getattr(value, "load_state_dict", None)):
        fix = ("it has state_dict()/load_state_dict(): make it a component of its own (Checkpoint(name=value) "
               "saves it with StateDictAdapter, keeping its state whole)")
    else:
        fix = "register an adapter or convert it to arrays, dicts, lists and scalars"
    return refuse(f"cannot store a {kind.__module__}.{kind.__qualname__} in a tree ({fix})", field=path)


_ONLY_NDARRAY = frozenset({np.ndarray})
_ONLY_STR = frozenset({str})


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
    return write_plan(plan, directory, durable=durable, sha256=sha256, archive=archive, member_prefix=member_prefix)


def write_plan(
    plan: TreePlan, directory: Path, *, durable: bool, sha256: bool, archive: ArchiveWriter | None,
    member_prefix: str,
) -> dict[str, dict[str, Any]]:
    """Write every file of a planned tree that one process saves whole; their file entries."""
    if plan.shards is not None:
        return write_sharded_tree(plan, directory, durable=durable, sha256=sha256, archive=archive)
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


def write_sharded_tree(plan: TreePlan, directory: Path, *, durable: bool, sha256: bool,
                       archive: ArchiveWriter | None) -> dict[str, dict[str, Any]]:
    """Write a tree holding sharded arrays that one process saves whole: its shard file, data.bin, tree.msgpack.

    Only the directory form: a shard data file is a file of the component
    directory, and the archive writer streams its members in one pass.
    """
    assert plan.shards is not None
    if archive is not None:
        raise refuse("sharded arrays are saved in the directory form only (format='directory')")
    entries = plan.shards.write(directory, durable=durable, sha256=sha256)
    for path, node in plan.shards.nodes:
        check_cover(node[2], node[3], path)
    data_entry = plan.write_data(directory / "data.bin", durable=durable, sha256=sha256)
    tree_entry = write_small_file(directory / "tree.msgpack", plan.pack(), durable=durable, sha256=sha256)
    return {"tree.msgpack": tree_entry, "data.bin": data_entry, **entries}


__all__ = ["NOT_HANDLED", "TreePlan", "Writable", "big_int_bytes", "small_file_entry", "write_plan",
           "write_sharded_tree", "write_small_file", "write_tree"]
