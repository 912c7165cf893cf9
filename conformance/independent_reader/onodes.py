"""Tree node model (spec §8) and the dtype table (§10, Table 10-1)."""
from __future__ import annotations

DTYPES = {
    "bool": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8,
    "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8,
    "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8,
    "complex64": 8, "complex128": 16,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1,
}


class Node:
    __slots__ = ()


class NFloat(Node):
    __slots__ = ("bits",)

    def __init__(self, bits: int):
        self.bits = bits


class NBytes(Node):
    __slots__ = ("data",)

    def __init__(self, data: bytes):
        self.data = data


class NList(Node):
    __slots__ = ("items",)

    def __init__(self, items):
        self.items = items


class NTuple(Node):
    __slots__ = ("items",)

    def __init__(self, items):
        self.items = items


class NDict(Node):
    __slots__ = ("items",)

    def __init__(self, items):
        self.items = items  # list of (key: str|int, value)


class NNamedTuple(Node):
    __slots__ = ("type_name", "fields")

    def __init__(self, type_name, fields):
        self.type_name = type_name
        self.fields = fields


class NComplex(Node):
    __slots__ = ("re_bits", "im_bits")

    def __init__(self, re_bits, im_bits):
        self.re_bits = re_bits
        self.im_bits = im_bits


class NScalar(Node):
    __slots__ = ("dtype", "raw")

    def __init__(self, dtype, raw):
        self.dtype = dtype
        self.raw = raw


class NArray(Node):
    __slots__ = ("dtype", "shape", "offset", "nbytes", "crc32c", "ptr")

    def __init__(self, dtype, shape, offset, nbytes, crc32c, ptr):
        self.dtype = dtype
        self.shape = shape
        self.offset = offset
        self.nbytes = nbytes
        self.crc32c = crc32c
        self.ptr = ptr


class NPrngKey(Node):
    __slots__ = ("impl", "data")

    def __init__(self, impl, data):
        self.impl = impl
        self.data = data


class NDtype(Node):
    __slots__ = ("dtype",)

    def __init__(self, dtype):
        self.dtype = dtype
