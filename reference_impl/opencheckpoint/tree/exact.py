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

import struct
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, NoReturn

import numpy as np

from ..format.dtypes import numpy_dtype
from ..format.errors import CheckpointError
from ..format.limits import TREE_MAX_DEPTH, TREE_MAX_NODES, TREE_MAX_STR_BYTES
from ..rules import raise_if, required, table_of
from ..rules.tree import TREE
from .nodes import (
    INT_MAX,
    INT_MIN,
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
from .wire import big_int_bytes
from .wire import itemsize as _itemsize

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
    #: From the compiled decoder (:mod:`.ctree`) only: each array node's (offset, nbytes, crc32c) as native
    #: uint64s in document order, when every node is within R-LIM-13..16 with nbytes = shape x itemsize.
    columns: bytes | None = None



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
        """Raise ``rule``'s error (its table's class: the tree rules', or a tag 10 node's) at the current byte."""
        raise table_of(rule).error(rule, f"{message} (byte {self.pos})", field=str(path))

    def broke(self, error: CheckpointError | None) -> None:
        """Raise a rule table's error (:mod:`opencheckpoint.rules.tree`) at the current byte, as :meth:`fail`."""
        if error is not None:
            error.message = f"{error.message} (byte {self.pos})"
            error.args = (error.message,)
            raise error

    def incomplete(self, message: str, path: TreePath) -> NoReturn:
        """R-TREE-1: the document is not exactly one complete msgpack object (it ends early, or is empty)."""
        self.fail(message, path, "R-TREE-1")

    def stray_marker(self, path: TreePath, where: str = "") -> NoReturn:
        """R-TREE-15: a tag marker (read here) anywhere but as element 0 of an array."""
        self.marker(path)
        self.fail(f"a tag marker may only be element 0 of an array{where}", path, "R-TREE-15")

    def field_type(self, path: TreePath, what: str, kinds: frozenset[int] | None = None, ok: bool = True) -> None:
        """R-TREE-17: a tagged node's field has the msgpack type of Table 8-2: its first byte is one of
        ``kinds`` (then the field's object is counted), or ``ok`` says whether the field read is."""
        if kinds is not None:
            self.expect(kinds, what, path, "R-TREE-17")
        elif not ok:
            self.fail(what, path, "R-TREE-17")

    def count(self, path: TreePath) -> None:
        """One object begins: every object but the root is one its parent's header declared."""
        if self.nodes:
            self.pending -= 1
        self.nodes += 1
        if self.nodes > TREE_MAX_NODES:  # tested inline: a node within the limit costs no call
            raise required(TREE.check("R-LIM-11", str(path), self.nodes))

    def take(self, size: int, path: TreePath) -> bytes:
        if self.pos + size > self.end:
            self.incomplete("the document ends inside an object", path)
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return chunk

    def peek(self, path: TreePath) -> int:
        if self.pos >= self.end:
            self.incomplete("the document ends where an object was expected", path)
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
            raise required(TREE.check("R-LIM-11", str(path), self.nodes + self.pending,
                                      f"{length} {'entries' if minimum_each == 2 else 'elements'}"))
        if declared is not None:
            declared(length)
        # Every element needs at least one byte: no allocation beyond what the bytes can hold (R-LIM-0).
        if length * minimum_each > self.end - self.pos:
            self.incomplete(f"declares {length} elements but only {self.end - self.pos} bytes follow", path)
        return length

    def enter(self, depth: int, path: TreePath) -> int:
        if depth + 1 > TREE_MAX_DEPTH:  # tested inline: a container within the limit costs no call
            raise required(TREE.check("R-LIM-10", str(path), depth + 1))
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
            raise TREE.error("R-LIM-12", f"a str or bin of {length} bytes, limit {TREE_MAX_STR_BYTES}",
                             field=str(path))
        if big_int:
            raise_if(TREE.check("R-LIM-18", str(path), length))
        return self.take(length, path)

    def string(self, path: TreePath) -> str:
        byte = self.data[self.pos]
        self.pos += 1
        raw = self.sized(byte, path, 0xA0, (0xD9, 0xDA, 0xDB))
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            self.broke(TREE.check("R-TREE-9", str(path), exc))
            raise  # unreachable: a decoding failure breaks the rule

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
            self.stray_marker(path)
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
                self.stray_marker(path, ", not a map key")
            elif int_keys:
                self.broke(TREE.check("R-TREE-10", str(path), False, f"map key starting with byte {byte:#04x}"))
                raise AssertionError("unreachable")  # the key broke R-TREE-10
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
            self.field_type(path.child(1), "a str (type name)", _STR_BYTES)
            type_name = self.string(path.child(1))
            self.field_type(path.child(2), "a map (fields)", _MAP_BYTES)
            body = self.mapping(depth, path.child(2), int_keys=False)
            return NamedTupleValue(type_name, body)  # type: ignore[arg-type]  # int_keys=False: str keys only
        if tag == Tag.BIG_INT:
            return self.big_int(path)
        if tag == Tag.COMPLEX:
            parts = []
            for index in (1, 2):
                self.field_type(path.child(index), "a float", _FLOAT_BYTES)
                parts.append(self.floating(path.child(index)))
            return complex(parts[0], parts[1])
        if tag == Tag.SCALAR:
            return self.scalar(path)
        if tag == Tag.PRNG_KEY:
            return self.prng_key(depth, path)
        # Tag.DTYPE
        self.field_type(path.child(1), "a str (dtype)", _STR_BYTES)
        name = self.string(path.child(1))
        _itemsize(name, path.child(1))
        self.placeholders = True
        return DtypeValue(name)

    def big_int(self, path: TreePath) -> int:
        """Tag 3's field: a minimal two's complement magnitude of a value outside the msgpack int range."""
        self.field_type(path.child(1), "a bin (magnitude)", _BIN_BYTES)
        raw = self.binary(path.child(1), big_int=True)
        if not raw or big_int_bytes(int.from_bytes(raw, "little", signed=True)) != raw:
            self.fail("big int magnitude is not the minimal two's complement encoding", path, "R-TREE-21")
        number = int.from_bytes(raw, "little", signed=True)
        if INT_MIN <= number <= INT_MAX:
            self.fail("big int value lies within -2**63 .. 2**64-1 and must be a msgpack int", path, "R-TREE-22")
        return number

    def scalar(self, path: TreePath) -> Any:
        """Tag 5's fields: a dtype name and exactly one element's raw bytes."""
        self.field_type(path.child(1), "a str (dtype)", _STR_BYTES)
        name = self.string(path.child(1))
        self.field_type(path.child(2), "a bin (raw value)", _BIN_BYTES)
        raw = self.binary(path.child(2))
        size = _itemsize(name, path.child(1))
        if len(raw) != size:
            self.fail(f"{name} scalar needs {size} bytes, got {len(raw)}", path.child(2), "R-TREE-23")
        if name == "bool" and raw not in (b"\x00", b"\x01"):
            self.fail(f"bool scalar byte is {raw.hex()}, not 00 or 01", path.child(2), "R-TREE-24")
        return np.frombuffer(raw, dtype=numpy_dtype(name))[0]

    def array_node(self, depth: int, path: TreePath) -> ArrayRef:
        self.field_type(path.child(1), "a str (dtype)", _STR_BYTES)
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
        self.field_type(path.child(1), "a str (impl)", _STR_BYTES)
        impl = self.string(path.child(1))
        data_path = path.child(2)
        byte = self.peek(data_path)
        start = self.pos
        not_array = "PRNG key data must be an array node (tag 6)"
        self.field_type(data_path, not_array, ok=byte in _ARRAY_BYTES)
        data = self.value(depth, data_path)
        if not isinstance(data, ArrayRef) or data.where is not data_path:
            self.pos = start
            self.field_type(data_path, not_array, ok=False)
        assert isinstance(data, ArrayRef)  # for mypy: anything else failed R-TREE-17 above
        self.broke(TREE.check("R-TREE-25", str(path.child(1)), impl))
        where = str(data_path)
        self.broke(TREE.check("R-TREE-26", where, data.dtype) or TREE.check("R-TREE-27", where, impl, data.shape)
                   or TREE.check("R-TREE-28", where, impl, data.shape))
        self.placeholders = True
        return PRNGKeyValue(impl, data)  # type: ignore[arg-type]  # an ArrayRef until the array is read

    def document(self) -> Any:
        if self.end == 0:
            self.incomplete("tree.msgpack is empty", ROOT)
        root = self.value(0, ROOT)
        if self.pos != self.end:
            raise TREE.error("R-TREE-2", f"{self.end - self.pos} bytes after the end of the root object", field="$")
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
        raise required(TREE.check("R-LIM-10", "$", TREE_MAX_DEPTH + 1)) from None
    return DecodedTree(root, parser.arrays, parser.placeholders, parser.sharded)
