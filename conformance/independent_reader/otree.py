"""tree.msgpack decoding per spec section 8 (and R-LIM-10..12, R-ARR-1..3, R-DT-1).

Two passes over the bytes:
  1. limit scan: depth (R-LIM-10), node count (R-LIM-11) and str/bin lengths
     (R-LIM-12), checked on the declared headers before anything is allocated;
     a malformation stops the scan silently (pass 2 reports it);
  2. strict decode into node objects, enforcing R-TREE-*, R-ARR-1..3, R-DT-1.
"""
from __future__ import annotations

import re
import struct

from errors import CheckpointError
from onodes import (  # noqa: F401
    DTYPES,
    NArray,
    NBytes,
    NComplex,
    NDict,
    NDtype,
    NFloat,
    NList,
    NNamedTuple,
    Node,
    NPrngKey,
    NScalar,
    NTuple,
)

MAX_DEPTH = 128
MAX_NODES = 10_000_000
MAX_STRLEN = 256 * 1024 * 1024
MAX_BIGINT = 1024  # bytes of a big int magnitude (R-LIM-18)


_IMPL_RE = re.compile(r"[a-z][a-z0-9-]*(\.[a-z0-9-]+)+/[a-z0-9_.-]+")


class _Malformed(Exception):
    pass


# ------------------------------------------------------------- pass 1: limits
def limit_scan(buf, file: str):
    """Check R-LIM-10..12 on declared headers.  Returns silently on malformation."""
    n = len(buf)
    pos = 0
    stack = [1]  # remaining objects to read at each open level (level 0 = document)
    nodes = 0

    def lim(field, msg, req):
        raise CheckpointError("LimitExceeded", file, field, msg, req)

    while stack:
        if stack[-1] == 0:
            stack.pop()
            continue
        stack[-1] -= 1
        if pos >= n:
            return
        b = buf[pos]
        nodes += 1
        if nodes > MAX_NODES:
            lim(f"byte {pos}", f"tree node count exceeds {MAX_NODES}", "R-LIM-11")
        if b <= 0x7F or b >= 0xE0 or b in (0xC0, 0xC2, 0xC3):
            pos += 1
        elif 0xA0 <= b <= 0xBF:
            pos += 1 + (b & 0x1F)
        elif 0x90 <= b <= 0x9F or 0x80 <= b <= 0x8F or b in (0xDC, 0xDD, 0xDE, 0xDF):
            if 0x90 <= b <= 0x9F:
                cnt, hl, ismap = b & 0x0F, 1, False
            elif 0x80 <= b <= 0x8F:
                cnt, hl, ismap = b & 0x0F, 1, True
            else:
                w = 2 if b in (0xDC, 0xDE) else 4
                if pos + 1 + w > n:
                    return
                cnt = int.from_bytes(buf[pos + 1:pos + 1 + w], "big")
                hl, ismap = 1 + w, b in (0xDE, 0xDF)
            depth = len(stack)  # document level is stack[0]; this container's depth
            if depth > MAX_DEPTH:
                lim(f"byte {pos}", f"tree depth exceeds {MAX_DEPTH}", "R-LIM-10")
            children = cnt * 2 if ismap else cnt
            if nodes + sum(stack) + children > MAX_NODES:
                lim(f"byte {pos}", f"tree node count exceeds {MAX_NODES}", "R-LIM-11")
            pos += hl
            stack.append(children)
        elif b in (0xC4, 0xC5, 0xC6, 0xD9, 0xDA, 0xDB):
            w = {0xC4: 1, 0xC5: 2, 0xC6: 4, 0xD9: 1, 0xDA: 2, 0xDB: 4}[b]
            if pos + 1 + w > n:
                return
            ln = int.from_bytes(buf[pos + 1:pos + 1 + w], "big")
            if ln > MAX_STRLEN:
                lim(f"byte {pos}", f"str/bin length {ln} exceeds {MAX_STRLEN}", "R-LIM-12")
            pos += 1 + w + ln
        elif b in (0xCC, 0xD0):
            pos += 2
        elif b in (0xCD, 0xD1):
            pos += 3
        elif b in (0xCE, 0xD2, 0xCA):
            pos += 5
        elif b in (0xCF, 0xD3, 0xCB):
            pos += 9
        elif b == 0xC7:
            if pos + 3 > n or buf[pos + 1] != 0:
                # an ext 8 with a payload is outside the vocabulary: the scan stops there (spec 8.8)
                return
            pos += 3
        else:
            # c1, fixext, ext16/32: outside the vocabulary; the scan stops (spec 8.8), pass 2 reports
            return


# ------------------------------------------------------------- pass 2: decode
class _Decoder:
    def __init__(self, buf, file, tag10=None):
        self.buf = buf
        self.n = len(buf)
        self.pos = 0
        self.file = file
        self.arrays = []  # extents in document order: tag 6 nodes and (format version 2) shard records
        self.sharded = []  # tag 10 nodes in document order
        self.tag10 = tag10  # format version 2: decodes (or forbids) tag 10; None: reserved tag (R-TREE-18)

    def err(self, ptr, msg, req, cls="TreeError"):
        raise CheckpointError(cls, self.file, ptr or "/", msg, req)

    def need(self, k, ptr):
        if self.pos + k > self.n:
            self.err(ptr, f"truncated msgpack object at byte {self.pos}", "R-TREE-1")

    def take(self, k, ptr):
        self.need(k, ptr)
        b = self.buf[self.pos:self.pos + k]
        self.pos += k
        return bytes(b)

    def uint(self, k, ptr):
        return int.from_bytes(self.take(k, ptr), "big")

    # Low-level: read one msgpack object header.
    # returns (kind, value) with kind in: nil, bool, int, f64, f32, str, bin, array(count), map(count), ext(len,type)
    def header(self, ptr):
        self.need(1, ptr)
        start = self.pos
        b = self.buf[self.pos]
        self.pos += 1
        if b <= 0x7F:
            return "int", b
        if b >= 0xE0:
            return "int", b - 0x100
        if 0x80 <= b <= 0x8F:
            return "map", b & 0x0F
        if 0x90 <= b <= 0x9F:
            return "array", b & 0x0F
        if 0xA0 <= b <= 0xBF:
            return "str", b & 0x1F
        if b == 0xC0:
            return "nil", None
        if b == 0xC2:
            return "bool", False
        if b == 0xC3:
            return "bool", True
        if b == 0xC4:
            return "bin", self.uint(1, ptr)
        if b == 0xC5:
            return "bin", self.uint(2, ptr)
        if b == 0xC6:
            return "bin", self.uint(4, ptr)
        if b == 0xC7:
            ln = self.uint(1, ptr)
            t = struct.unpack(">b", self.take(1, ptr))[0]
            return "ext", (ln, t, start)
        if b == 0xCA:
            return "f32", self.uint(4, ptr)
        if b == 0xCB:
            return "f64", self.uint(8, ptr)
        if b == 0xCC:
            return "int", self.uint(1, ptr)
        if b == 0xCD:
            return "int", self.uint(2, ptr)
        if b == 0xCE:
            return "int", self.uint(4, ptr)
        if b == 0xCF:
            return "int", self.uint(8, ptr)
        if b == 0xD0:
            return "int", struct.unpack(">b", self.take(1, ptr))[0]
        if b == 0xD1:
            return "int", struct.unpack(">h", self.take(2, ptr))[0]
        if b == 0xD2:
            return "int", struct.unpack(">i", self.take(4, ptr))[0]
        if b == 0xD3:
            return "int", struct.unpack(">q", self.take(8, ptr))[0]
        if b == 0xD9:
            return "str", self.uint(1, ptr)
        if b == 0xDA:
            return "str", self.uint(2, ptr)
        if b == 0xDB:
            return "str", self.uint(4, ptr)
        if b == 0xDC:
            return "array", self.uint(2, ptr)
        if b == 0xDD:
            return "array", self.uint(4, ptr)
        if b == 0xDE:
            return "map", self.uint(2, ptr)
        if b == 0xDF:
            return "map", self.uint(4, ptr)
        if b == 0xC1:
            self.err(ptr, "byte c1 is never used in msgpack", "R-TREE-3")
        if 0xD4 <= b <= 0xD8 or b in (0xC8, 0xC9):
            self.err(ptr, f"ext object with first byte {b:02x} is not a tag marker (c7 00 T)", "R-TREE-13")
        self.err(ptr, f"unsupported msgpack byte {b:02x}", "R-TREE-3")

    def read_str(self, ln, ptr):
        if ln > MAX_STRLEN:
            self.err(ptr, "str too long", "R-LIM-12", "LimitExceeded")
        raw = self.take(ln, ptr)
        try:
            return raw.decode("utf-8", errors="strict")
        except UnicodeDecodeError:
            self.err(ptr, "str is not valid UTF-8", "R-TREE-9")

    def read_bin(self, ln, ptr):
        if ln > MAX_STRLEN:
            self.err(ptr, "bin too long", "R-LIM-12", "LimitExceeded")
        return self.take(ln, ptr)

    def bad_ext(self, v, ptr, first=False):
        ln, t, _ = v
        if ln != 0:
            self.err(ptr, f"ext object has length {ln}; only tag markers c7 00 T are allowed", "R-TREE-13")
        if not (1 <= t <= 127):
            self.err(ptr, f"tag marker type {t} outside 1..127", "R-TREE-14")
        self.err(ptr, "tag marker outside element 0 of an array", "R-TREE-15")

    def node(self, ptr):
        kind, v = self.header(ptr)
        if kind == "nil":
            return None
        if kind == "bool":
            return v
        if kind == "int":
            return v
        if kind == "f64":
            return NFloat(v)
        if kind == "f32":
            return NFloat(f32_to_f64_bits(v))
        if kind == "str":
            return self.read_str(v, ptr)
        if kind == "bin":
            return NBytes(self.read_bin(v, ptr))
        if kind == "ext":
            self.bad_ext(v, ptr)
        if kind == "map":
            return self.read_map(v, ptr)
        if kind == "array":
            return self.read_array(v, ptr)
        raise AssertionError(kind)

    def read_map(self, cnt, ptr):
        items = []
        seen_str = set()
        seen_int = set()
        for _ in range(cnt):
            kptr = ptr + "/<key>"
            kind, v = self.header(kptr)
            if kind == "str":
                key = self.read_str(v, kptr)
                raw = key.encode("utf-8")
                if raw in seen_str:
                    self.err(ptr + "/" + _esc(key), "duplicate map key", "R-TREE-11")
                seen_str.add(raw)
            elif kind == "int":
                key = v
                if key in seen_int:
                    self.err(ptr + "/" + str(key), "duplicate map key", "R-TREE-11")
                seen_int.add(key)
            elif kind == "ext":
                ln, t, _ = v
                if ln != 0:
                    self.err(kptr, f"ext object has length {ln}", "R-TREE-13")
                if not (1 <= t <= 127):
                    self.err(kptr, f"tag marker type {t} outside 1..127", "R-TREE-14")
                self.err(kptr, "map key is a tag marker (not a str or int)", "R-TREE-15")
            else:
                self.err(kptr, f"map key of msgpack type {kind} (must be str or int)", "R-TREE-10")
            vptr = ptr + "/" + (_esc(key) if isinstance(key, str) else str(key))
            items.append((key, self.node(vptr)))
        return NDict(items)

    def read_array(self, cnt, ptr):
        if cnt >= 1 and self.pos < self.n and self.buf[self.pos] == 0xC7:
            mptr = ptr + "/0"
            _kind, v = self.header(mptr)
            ln, t, _ = v
            if ln != 0:
                self.err(mptr, f"ext object has length {ln}; only tag markers c7 00 T are allowed", "R-TREE-13")
            if not (1 <= t <= 127):
                self.err(mptr, f"tag marker type {t} outside 1..127", "R-TREE-14")
            return self.tagged(t, cnt - 1, ptr)
        return NList([self.node(f"{ptr}/{i}") for i in range(cnt)])

    # --- tagged nodes
    def field(self, ptr, want):
        """Read one field that must have msgpack type `want` (str, bin, uint, float, uintarray, map)."""
        kind, v = self.header(ptr)
        if want == "str":
            if kind != "str":
                self.skip_after_header(kind, v, ptr)
                self.err(ptr, f"field must be a str, found {kind}", "R-TREE-17")
            return self.read_str(v, ptr)
        if want == "bin":
            if kind != "bin":
                self.skip_after_header(kind, v, ptr)
                self.err(ptr, f"field must be a bin, found {kind}", "R-TREE-17")
            return self.read_bin(v, ptr)
        if want == "float":
            if kind == "f64":
                return v
            if kind == "f32":
                return f32_to_f64_bits(v)
            self.skip_after_header(kind, v, ptr)
            self.err(ptr, f"field must be a float, found {kind}", "R-TREE-17")
        raise AssertionError(want)

    def skip_after_header(self, kind, v, ptr):
        # we report the error immediately; nothing to skip
        if kind == "ext":
            ln, t, _ = v
            if ln != 0:
                self.err(ptr, f"ext object has length {ln}", "R-TREE-13")
            if not (1 <= t <= 127):
                self.err(ptr, f"tag marker type {t} outside 1..127", "R-TREE-14")
            self.err(ptr, "tag marker outside element 0 of an array", "R-TREE-15")

    def tagged(self, t, nf, ptr):
        if t == 10 and self.tag10 is not None:
            return self.tag10(self, nf, ptr)
        if 9 <= t <= 63:
            self.err(ptr + "/0", f"reserved tag {t}", "R-TREE-18")
        if 64 <= t <= 127:
            self.err(ptr + "/0", f"extension tag {t} not defined by an understood extension", "R-TREE-19")
        expected = {2: 2, 3: 1, 4: 2, 5: 2, 6: 5, 7: 2, 8: 1}
        if t == 1:
            return NTuple([self.node(f"{ptr}/{i + 1}") for i in range(nf)])
        if nf != expected[t]:
            self.err(ptr, f"tag {t} node has {nf} fields, expected {expected[t]}", "R-TREE-16")
        if t == 2:
            tn = self.field(ptr + "/1", "str")
            fptr = ptr + "/2"
            kind, v = self.header(fptr)
            if kind != "map":
                self.skip_after_header(kind, v, fptr)
                self.err(fptr, f"named tuple fields must be a map, found {kind}", "R-TREE-17")
            d = self.read_map(v, fptr)
            for k, _ in d.items:
                if not isinstance(k, str):
                    self.err(fptr + "/" + str(k), "named tuple field key is not a str", "R-TREE-20")
            return NNamedTuple(tn, d.items)
        if t == 3:
            mag = self.field(ptr + "/1", "bin")
            if len(mag) > MAX_BIGINT:
                self.err(ptr + "/1", f"big int magnitude of {len(mag)} bytes exceeds {MAX_BIGINT}", "R-LIM-18",
                         "LimitExceeded")
            if len(mag) == 0:
                self.err(ptr + "/1", "big int magnitude is empty", "R-TREE-21")
            if len(mag) >= 2 and ((mag[-1] == 0x00 and mag[-2] < 0x80) or (mag[-1] == 0xFF and mag[-2] >= 0x80)):
                self.err(ptr + "/1", "big int magnitude is not minimal", "R-TREE-21")
            val = int.from_bytes(mag, "little", signed=True)
            if -(2**63) <= val <= 2**64 - 1:
                self.err(ptr + "/1", "big int value lies inside -2^63..2^64-1", "R-TREE-22")
            return val
        if t == 4:
            r = self.field(ptr + "/1", "float")
            i = self.field(ptr + "/2", "float")
            return NComplex(r, i)
        if t == 5:
            dt = self.field(ptr + "/1", "str")
            self.check_dtype(dt, ptr + "/1")
            raw = self.field(ptr + "/2", "bin")
            if len(raw) != DTYPES[dt]:
                self.err(ptr + "/2", f"typed scalar raw has {len(raw)} bytes, dtype {dt} has itemsize {DTYPES[dt]}",
                         "R-TREE-23")
            if dt == "bool" and raw[0] not in (0, 1):
                self.err(ptr + "/2", "bool typed scalar byte is not 00 or 01", "R-TREE-24")
            return NScalar(dt, raw)
        if t == 6:
            return self.array_fields(ptr)
        if t == 7:
            impl = self.field(ptr + "/1", "str")
            if impl not in ("threefry2x32", "rbg", "unsafe_rbg") and not _IMPL_RE.fullmatch(impl):
                self.err(ptr + "/1", f"invalid PRNG impl {impl!r}", "R-TREE-25")
            dptr = ptr + "/2"
            kind, v = self.header(dptr)
            if kind != "array" or v < 1 or self.pos >= self.n or self.buf[self.pos] != 0xC7:
                self.skip_after_header(kind, v, dptr)
                self.err(dptr, "PRNG key data must be an array node (tag 6)", "R-TREE-17")
            _mkind, mv = self.header(dptr + "/0")
            ln, tt, _ = mv
            if ln != 0:
                self.err(dptr + "/0", f"ext object has length {ln}", "R-TREE-13")
            if not (1 <= tt <= 127):
                self.err(dptr + "/0", f"tag marker type {tt} outside 1..127", "R-TREE-14")
            if tt != 6:
                self.err(dptr, f"PRNG key data must be an array node (tag 6), found tag {tt}", "R-TREE-17")
            if v - 1 != 5:
                self.err(dptr, f"tag 6 node has {v - 1} fields, expected 5", "R-TREE-16")
            arr = self.array_fields(dptr)
            if arr.dtype != "uint32":
                self.err(dptr + "/1", f"PRNG key data dtype is {arr.dtype}, must be uint32", "R-TREE-26")
            if impl == "threefry2x32" and (len(arr.shape) == 0 or arr.shape[-1] != 2):
                self.err(dptr + "/2", "threefry2x32 key data shape must end with 2", "R-TREE-27")
            if impl in ("rbg", "unsafe_rbg") and (len(arr.shape) == 0 or arr.shape[-1] != 4):
                self.err(dptr + "/2", f"{impl} key data shape must end with 4", "R-TREE-28")
            return NPrngKey(impl, arr)
        if t == 8:
            dt = self.field(ptr + "/1", "str")
            self.check_dtype(dt, ptr + "/1")
            return NDtype(dt)
        raise AssertionError(t)

    def check_dtype(self, dt, ptr):
        if dt not in DTYPES:
            self.err(ptr, f"unknown dtype {dt!r}", "R-DT-1", "UnknownDtype")

    def uint_field(self, ptr, req):
        kind, v = self.header(ptr)
        if kind != "int":
            self.skip_after_header(kind, v, ptr)
            self.err(ptr, f"field must be a uint, found {kind}", req)
        if v < 0:
            self.err(ptr, f"field must be >= 0, found {v}", req)
        return v

    def array_fields(self, ptr):
        dt = self.field(ptr + "/1", "str")
        self.check_dtype(dt, ptr + "/1")
        sptr = ptr + "/2"
        kind, v = self.header(sptr)
        if kind != "array":
            self.skip_after_header(kind, v, sptr)
            self.err(sptr, f"array shape must be a msgpack array, found {kind}", "R-ARR-1")
        shape = []
        for i in range(v):
            shape.append(self.uint_field(f"{sptr}/{i}", "R-ARR-1"))
        off = self.uint_field(ptr + "/3", "R-ARR-2")
        nb = self.uint_field(ptr + "/4", "R-ARR-2")
        crc = self.uint_field(ptr + "/5", "R-ARR-2")
        if crc > 0xFFFFFFFF:
            self.err(ptr + "/5", f"crc32c {crc} exceeds 2^32-1", "R-ARR-3")
        a = NArray(dt, shape, off, nb, crc, ptr)
        self.arrays.append(a)
        return a


def _esc(k: str) -> str:
    return k.replace("~", "~0").replace("/", "~1")


def f32_to_f64_bits(b32: int) -> int:
    sign = b32 >> 31
    exp = (b32 >> 23) & 0xFF
    frac = b32 & 0x7FFFFF
    if exp == 0xFF and frac != 0:  # NaN: no quieting (R-TREE-8)
        return (sign << 63) | (0x7FF << 52) | (frac << 29)
    val = struct.unpack(">f", b32.to_bytes(4, "big"))[0]
    return int.from_bytes(struct.pack(">d", val), "big")


def decode_tree(buf, file: str, tag10=None):
    """Returns (root_node, extents, sharded_nodes).  Raises CheckpointError.

    `tag10` is the format version 2 hook for tag 10 (see oshard); without it tag 10 is reserved."""
    limit_scan(buf, file)
    d = _Decoder(buf, file, tag10)
    if len(buf) == 0:
        d.err("/", "tree.msgpack is empty", "R-TREE-1")
    root = d.node("")
    if d.pos != d.n:
        d.err("/", f"{d.n - d.pos} trailing bytes after the root object", "R-TREE-2")
    return root, d.arrays, d.sharded
