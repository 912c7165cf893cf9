"""The exact parser of ``tree.msgpack`` (spec §8, step 14 of §15): every rule, byte by byte.

A small MessagePack reader written for this format rather than
``msgpack.unpackb``, because the rules need what a general decoder hides:
the exact encoding of ext objects (R-TREE-13), where a tag marker sits
(R-TREE-15), float 32 NaN payloads (R-TREE-8), depth and node counts
checked before anything is allocated (R-LIM-10 .. R-LIM-12, R-LIM-0), and
the location of every bad byte. :mod:`.fast` accepts canonical documents
faster and defers to this parser on any doubt; :mod:`.decode` chooses.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, NoReturn

import numpy as np

from ..dtypes import numpy_dtype
from ..errors import LimitExceeded, TreeError
from ..limits import TREE_MAX_BIG_INT_BYTES, TREE_MAX_DEPTH, TREE_MAX_NODES, TREE_MAX_STR_BYTES
from .encode import big_int_bytes
from .nodes import (
    INT_MAX,
    INT_MIN,
    PRNG_IMPL_KEY_SHAPES,
    ArrayRef,
    DtypeValue,
    NamedTupleValue,
    PRNGKeyValue,
    ShardedArrayRef,
    Tag,
)
from .sharded import parse_sharded
from .treepath import ROOT, TreePath
from .wire import ARRAY_BYTES as _ARRAY_BYTES
from .wire import BIN_BYTES as _BIN_BYTES
from .wire import EXT_BYTES as _EXT_BYTES
from .wire import FLOAT_BYTES as _FLOAT_BYTES
from .wire import INT_BYTES as _INT_BYTES
from .wire import MAP_BYTES as _MAP_BYTES
from .wire import STR_BYTES as _STR_BYTES
from .wire import itemsize as _itemsize

_PRNG_IMPL = re.compile(r"[a-z][a-z0-9-]*(\.[a-z0-9-]+)+/[a-z0-9_.-]+", re.ASCII)
#: Fields (after the marker) of each fixed-size tag (R-TREE-16).
_FIELDS: dict[int, int] = {Tag.NAMED_TUPLE: 2, Tag.BIG_INT: 1, Tag.COMPLEX: 2, Tag.SCALAR: 2, Tag.ARRAY: 5,
                           Tag.PRNG_KEY: 2, Tag.DTYPE: 1}
_UINT = {0xCC: (1, ">B"), 0xCD: (2, ">H"), 0xCE: (4, ">I"), 0xCF: (8, ">Q")}
_SINT = {0xD0: (1, ">b"), 0xD1: (2, ">h"), 0xD2: (4, ">i"), 0xD3: (8, ">q")}


@dataclass
class DecodedTree:
    """A decoded document: the value with placeholders and every array node in document order."""

    root: Any
    arrays: list[ArrayRef]
    has_placeholders: bool
    #: Sharded array nodes (tag 10, format version 2) in document order.
    sharded: list[ShardedArrayRef] = field(default_factory=list)



class _Parser:
    """Recursive descent over one msgpack document; depth is bounded by R-LIM-10 before recursing."""

    def __init__(self, data: bytes, understood_tags: Collection[int], format_version: int = 1,
                 kind_version: int = 1) -> None:
        self.data = data
        self.end = len(data)
        self.pos = 0
        self.nodes = 0
        # Objects declared by the headers of open arrays and maps but not begun yet: R-LIM-11 counts
        # them too, so a header declaring too many objects fails even in a truncated file (§8.8).
        self.pending = 0
        self.arrays: list[ArrayRef] = []
        self.placeholders = False
        self.understood_tags = understood_tags
        #: Tag 10 is a sharded array from format version 2 on (and R-TREE-18's reserved tag before).
        self.format_version = format_version
        self.kind_version = kind_version
        self.sharded: list[ShardedArrayRef] = []

    # -- primitives ------------------------------------------------------------------
    def fail(self, message: str, path: TreePath, rule: str) -> NoReturn:
        raise TreeError(f"{message} (byte {self.pos})", field=str(path), rule=rule)

    def count(self, path: TreePath) -> None:
        """One object begins: every object but the root is one its parent's header declared."""
        if self.nodes:
            self.pending -= 1
        self.nodes += 1
        if self.nodes > TREE_MAX_NODES:
            raise LimitExceeded(f"more than {TREE_MAX_NODES} msgpack objects", field=str(path), rule="R-LIM-11")

    def take(self, size: int, path: TreePath) -> bytes:
        if self.pos + size > self.end:
            self.fail("the document ends inside an object", path, "R-TREE-1")
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return chunk

    def peek(self, path: TreePath) -> int:
        if self.pos >= self.end:
            self.fail("the document ends where an object was expected", path, "R-TREE-1")
        return self.data[self.pos]

    def unpack(self, fmt: str, size: int, path: TreePath) -> Any:
        return struct.unpack(fmt, self.take(size, path))[0]

    def container_length(self, minimum_each: int, path: TreePath,
                         declared: Callable[[int], None] | None = None) -> int:
        """Header of an array (elements >= 1 byte) or map (entries >= 2 bytes); consumes it.

        ``declared`` checks a node-specific limit on the declared length (R-LIM-20):
        like R-LIM-11, it runs on what the header declares, before R-TREE-1.
        """
        byte = self.data[self.pos]
        self.pos += 1
        length: int
        if byte in (0xDC, 0xDE):
            length = self.unpack(">H", 2, path)
        elif byte in (0xDD, 0xDF):
            length = self.unpack(">I", 4, path)
        else:
            length = byte & 0x0F
        # R-LIM-11 on what the header declares (objects begun + objects still declared), before R-TREE-1.
        self.pending += length * minimum_each
        if self.nodes + self.pending > TREE_MAX_NODES:
            raise LimitExceeded(f"declares {length} {'entries' if minimum_each == 2 else 'elements'}: the "
                                f"document would hold {self.nodes + self.pending} msgpack objects, limit "
                                f"{TREE_MAX_NODES}", field=str(path), rule="R-LIM-11")
        if declared is not None:
            declared(length)
        # Every element needs at least one byte: no allocation beyond what the bytes can hold (R-LIM-0).
        if length * minimum_each > self.end - self.pos:
            self.fail(f"declares {length} elements but only {self.end - self.pos} bytes follow", path, "R-TREE-1")
        return length

    def enter(self, depth: int, path: TreePath) -> int:
        if depth + 1 > TREE_MAX_DEPTH:
            raise LimitExceeded(f"nested deeper than {TREE_MAX_DEPTH} arrays and maps", field=str(path),
                                rule="R-LIM-10")
        return depth + 1

    def sized(self, byte: int, path: TreePath, small_base: int, codes: tuple[int, int, int],
              big_int: bool = False) -> bytes:
        """Read a str or bin payload after its header byte, checking R-LIM-12 (and for a big int's
        magnitude R-LIM-18) on the declared length before R-TREE-1."""
        if small_base and small_base <= byte < small_base + 32:
            length = byte - small_base
        elif byte == codes[0]:
            length = self.unpack(">B", 1, path)
        elif byte == codes[1]:
            length = self.unpack(">H", 2, path)
        else:
            length = self.unpack(">I", 4, path)
        if length > TREE_MAX_STR_BYTES:
            raise LimitExceeded(f"a str or bin of {length} bytes, limit {TREE_MAX_STR_BYTES}", field=str(path),
                                rule="R-LIM-12")
        if big_int and length > TREE_MAX_BIG_INT_BYTES:
            raise LimitExceeded(f"a big int magnitude of {length} bytes, limit {TREE_MAX_BIG_INT_BYTES}",
                                field=str(path), rule="R-LIM-18")
        return self.take(length, path)

    def string(self, path: TreePath) -> str:
        byte = self.data[self.pos]
        self.pos += 1
        raw = self.sized(byte, path, 0xA0, (0xD9, 0xDA, 0xDB))
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            self.fail("a str is not valid UTF-8", path, "R-TREE-9")

    def binary(self, path: TreePath, *, big_int: bool = False) -> bytes:
        byte = self.data[self.pos]
        self.pos += 1
        return self.sized(byte, path, 0, (0xC4, 0xC5, 0xC6), big_int)

    def integer(self, path: TreePath) -> int:
        byte = self.data[self.pos]
        self.pos += 1
        if byte < 0x80:
            return byte
        if byte >= 0xE0:
            return byte - 0x100
        size, fmt = _UINT.get(byte) or _SINT[byte]
        return int(self.unpack(fmt, size, path))

    def floating(self, path: TreePath) -> float:
        byte = self.data[self.pos]
        self.pos += 1
        if byte == 0xCB:
            return float(self.unpack(">d", 8, path))
        bits = self.unpack(">I", 4, path)
        if bits & 0x7F800000 == 0x7F800000 and bits & 0x007FFFFF:
            # R-TREE-8: keep sign and payload, no quieting (a C float -> double cast may set the quiet bit).
            double = ((bits >> 31) << 63) | (0x7FF << 52) | ((bits & 0x007FFFFF) << 29)
            return float(struct.unpack(">d", struct.pack(">Q", double))[0])
        return float(struct.unpack(">f", struct.pack(">I", bits))[0])

    def marker(self, path: TreePath) -> int:
        """Read an ext object; return its type if it is a well-formed tag marker (R-TREE-13, R-TREE-14)."""
        byte = self.data[self.pos]
        self.pos += 1
        if byte != 0xC7:
            self.fail(f"ext object encoded with {byte:#04x}; tag markers are exactly c7 00 T", path, "R-TREE-13")
        length = self.unpack(">B", 1, path)
        code: int = self.unpack(">b", 1, path)
        if length != 0:
            self.fail(f"ext object with a {length}-byte payload; tag markers have none", path, "R-TREE-13")
        if not 1 <= code <= 127:
            self.fail(f"tag marker type {code} is not in 1..127", path, "R-TREE-14")
        return code

    # -- nodes -----------------------------------------------------------------------
    def value(self, depth: int, path: TreePath) -> Any:
        byte = self.peek(path)
        self.count(path)
        if byte in _INT_BYTES:
            return self.integer(path)
        if byte in _STR_BYTES:
            return self.string(path)
        if byte in _ARRAY_BYTES:
            return self.array(depth, path)
        if byte in _MAP_BYTES:
            return self.mapping(depth, path, int_keys=True)
        if byte == 0xC0:
            self.pos += 1
            return None
        if byte in (0xC2, 0xC3):
            self.pos += 1
            return byte == 0xC3
        if byte in _FLOAT_BYTES:
            return self.floating(path)
        if byte in _BIN_BYTES:
            return self.binary(path)
        if byte in _EXT_BYTES:
            self.marker(path)
            self.fail("a tag marker may only be element 0 of an array", path, "R-TREE-15")
        self.fail(f"byte {byte:#04x} starts no msgpack object of the node vocabulary", path, "R-TREE-3")

    def array(self, depth: int, path: TreePath) -> Any:
        depth = self.enter(depth, path)
        length = self.container_length(1, path)
        if length and self.data[self.pos] in _EXT_BYTES:
            self.count(path.child(0))
            tag = self.marker(path.child(0))
            return self.tagged(tag, length - 1, depth, path)
        return [self.value(depth, path.child(i)) for i in range(length)]

    def mapping(self, depth: int, path: TreePath, *, int_keys: bool) -> dict[str | int, Any]:
        depth = self.enter(depth, path)
        length = self.container_length(2, path)
        out: dict[str | int, Any] = {}
        for _ in range(length):
            byte = self.peek(path)
            self.count(path)
            key: str | int
            if byte in _STR_BYTES:
                key = self.string(path)
            elif byte in _INT_BYTES and int_keys:
                key = self.integer(path)
            elif byte in _EXT_BYTES:
                self.marker(path)
                self.fail("a tag marker may only be element 0 of an array, not a map key", path, "R-TREE-15")
            elif int_keys:
                self.fail(f"map key starting with byte {byte:#04x} is not a str or an int", path, "R-TREE-10")
            else:
                self.fail("named tuple field names are str", path, "R-TREE-20")
            if key in out:
                self.fail(f"duplicate map key {key!r}", path, "R-TREE-11")
            out[key] = self.value(depth, path.child(key))
        return out

    def expect(self, kinds: frozenset[int], what: str, path: TreePath, rule: str) -> None:
        byte = self.peek(path)
        if byte not in kinds:
            self.fail(f"field must be {what}, found a value starting with byte {byte:#04x}", path, rule)
        self.count(path)

    def uint(self, path: TreePath, rule: str) -> int:
        self.expect(_INT_BYTES, "an unsigned int", path, rule)
        number = self.integer(path)
        if number < 0:
            self.fail(f"field is {number}; it must be >= 0", path, rule)
        return number

    def tagged(self, tag: int, fields: int, depth: int, path: TreePath) -> Any:
        if tag == Tag.TUPLE:
            return tuple(self.value(depth, path.child(i)) for i in range(1, fields + 1))
        if tag == Tag.SHARDED_ARRAY and self.format_version >= 2:
            ref = parse_sharded(self, fields, depth, path)
            self.sharded.append(ref)
            self.placeholders = True
            return ref
        if 9 <= tag <= 63:
            self.fail(f"tag {tag} is reserved for future versions of the format", path, "R-TREE-18")
        if tag >= 64 and tag not in self.understood_tags:
            self.fail(f"tag {tag} belongs to an extension this reader does not understand", path, "R-TREE-19")
        expected = _FIELDS.get(tag)
        if expected is None:  # an understood extension tag: this reader defines none
            self.fail(f"tag {tag} is not implemented", path, "R-TREE-19")
        if fields != expected:
            self.fail(f"a {Tag(tag).name} node has {expected} fields after the marker, found {fields}", path,
                      "R-TREE-16")
        if tag == Tag.ARRAY:
            return self.array_node(depth, path)
        if tag == Tag.NAMED_TUPLE:
            self.expect(_STR_BYTES, "a str (type name)", path.child(1), "R-TREE-17")
            type_name = self.string(path.child(1))
            self.expect(_MAP_BYTES, "a map (fields)", path.child(2), "R-TREE-17")
            body = self.mapping(depth, path.child(2), int_keys=False)
            return NamedTupleValue(type_name, body)  # type: ignore[arg-type]  # int_keys=False: str keys only
        if tag == Tag.BIG_INT:
            self.expect(_BIN_BYTES, "a bin (magnitude)", path.child(1), "R-TREE-17")
            raw = self.binary(path.child(1), big_int=True)
            if not raw or big_int_bytes(int.from_bytes(raw, "little", signed=True)) != raw:
                self.fail("big int magnitude is not the minimal two's complement encoding", path, "R-TREE-21")
            number = int.from_bytes(raw, "little", signed=True)
            if INT_MIN <= number <= INT_MAX:
                self.fail("big int value lies within -2**63 .. 2**64-1 and must be a msgpack int", path,
                          "R-TREE-22")
            return number
        if tag == Tag.COMPLEX:
            parts = []
            for index in (1, 2):
                self.expect(_FLOAT_BYTES, "a float", path.child(index), "R-TREE-17")
                parts.append(self.floating(path.child(index)))
            return complex(parts[0], parts[1])
        if tag == Tag.SCALAR:
            self.expect(_STR_BYTES, "a str (dtype)", path.child(1), "R-TREE-17")
            name = self.string(path.child(1))
            self.expect(_BIN_BYTES, "a bin (raw value)", path.child(2), "R-TREE-17")
            raw = self.binary(path.child(2))
            size = _itemsize(name, path.child(1))
            if len(raw) != size:
                self.fail(f"{name} scalar needs {size} bytes, got {len(raw)}", path.child(2), "R-TREE-23")
            if name == "bool" and raw not in (b"\x00", b"\x01"):
                self.fail(f"bool scalar byte is {raw.hex()}, not 00 or 01", path.child(2), "R-TREE-24")
            return np.frombuffer(raw, dtype=numpy_dtype(name))[0]
        if tag == Tag.PRNG_KEY:
            return self.prng_key(depth, path)
        # Tag.DTYPE
        self.expect(_STR_BYTES, "a str (dtype)", path.child(1), "R-TREE-17")
        name = self.string(path.child(1))
        _itemsize(name, path.child(1))
        self.placeholders = True
        return DtypeValue(name)

    def array_node(self, depth: int, path: TreePath) -> ArrayRef:
        self.expect(_STR_BYTES, "a str (dtype)", path.child(1), "R-TREE-17")
        name = self.string(path.child(1))
        shape_path = path.child(2)
        self.expect(_ARRAY_BYTES, "an array of unsigned ints (shape)", shape_path, "R-ARR-1")
        inner = self.enter(depth, shape_path)
        del inner
        length = self.container_length(1, shape_path)
        shape = tuple(self.uint(shape_path.child(i), "R-ARR-1") for i in range(length))
        offset = self.uint(path.child(3), "R-ARR-2")
        nbytes = self.uint(path.child(4), "R-ARR-2")
        crc = self.uint(path.child(5), "R-ARR-2")
        if crc > 0xFFFFFFFF:
            self.fail(f"crc32c {crc} does not fit 32 bits", path.child(5), "R-ARR-3")
        _itemsize(name, path.child(1))
        ref = ArrayRef(name, shape, offset, nbytes, crc, path)
        self.arrays.append(ref)
        self.placeholders = True
        return ref

    def prng_key(self, depth: int, path: TreePath) -> PRNGKeyValue:
        self.expect(_STR_BYTES, "a str (impl)", path.child(1), "R-TREE-17")
        impl = self.string(path.child(1))
        data_path = path.child(2)
        byte = self.peek(data_path)
        start = self.pos
        if byte not in _ARRAY_BYTES:
            self.fail("PRNG key data must be an array node (tag 6)", data_path, "R-TREE-17")
        data = self.value(depth, data_path)
        if not isinstance(data, ArrayRef) or data.where is not data_path:
            self.pos = start
            self.fail("PRNG key data must be an array node (tag 6)", data_path, "R-TREE-17")
        if impl not in PRNG_IMPL_KEY_SHAPES and not _PRNG_IMPL.fullmatch(impl):
            self.fail(f"PRNG impl {impl!r} is not threefry2x32, rbg, unsafe_rbg or a namespaced name",
                      path.child(1), "R-TREE-25")
        if data.dtype != "uint32":
            self.fail(f"PRNG key data has dtype {data.dtype}, not uint32", data_path, "R-TREE-26")
        key_shape = PRNG_IMPL_KEY_SHAPES.get(impl)
        if key_shape is not None and (not data.shape or data.shape[-1] != key_shape[0]):
            rule = "R-TREE-27" if impl == "threefry2x32" else "R-TREE-28"
            self.fail(f"{impl} key data shape {list(data.shape)} must end in {key_shape[0]}", data_path, rule)
        self.placeholders = True
        return PRNGKeyValue(impl, data)  # type: ignore[arg-type]  # an ArrayRef until the array is read

    def document(self) -> Any:
        if self.end == 0:
            self.fail("tree.msgpack is empty", ROOT, "R-TREE-1")
        root = self.value(0, ROOT)
        if self.pos != self.end:
            raise TreeError(f"{self.end - self.pos} bytes after the end of the root object", field="$",
                            rule="R-TREE-2")
        return root


def exact_decode(data: bytes, *, understood_tags: Collection[int] = (), format_version: int = 1,
                 kind_version: int = 1) -> DecodedTree:
    """The authoritative parser: every rule checked byte by byte, errors with their byte position.

    ``format_version`` and ``kind_version`` (of the checkpoint and the component) decide what
    tag 10 is: reserved (R-TREE-18) in format version 1, a sharded array from version 2 on.
    """
    parser = _Parser(bytes(data), understood_tags, format_version, kind_version)
    try:
        root = parser.document()
    except RecursionError:  # cannot happen below the depth limit; kept so no other exception escapes
        raise LimitExceeded(f"nested deeper than {TREE_MAX_DEPTH}", field="$", rule="R-LIM-10") from None
    return DecodedTree(root, parser.arrays, parser.placeholders, parser.sharded)
