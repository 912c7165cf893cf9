"""Format version 2: the sharded array node (tree tag 10), spec/opencheckpoint-v2.md S.4 to S.6.

* `read_sharded` decodes one tag 10 node during step 14 (R-SHD-4, R-SHD-5, R-LIM-20);
* `layout` runs step 15 of a `tree` component of kind_version 2 (S.9: (a) global shapes and
  records, (b) every data file as in version 1, (c) R-SHD-8 … R-SHD-11);
* `assemble` builds the global array from verified shards for the canonical rendering (S.6, S.8).
"""
from __future__ import annotations

import olayout
from ocommon import SHARD_FILE_RE, E
from onodes import DTYPES, NArray, Node

MAX_SHARDS = 65_536  # R-LIM-20


class NShard(NArray):
    """A shard record: an extent of `file` (an array node of shape `size`, §9 via S.5)."""
    __slots__ = ("file", "start")

    def __init__(self, dtype, file, start, size, offset, nbytes, crc32c, ptr):
        super().__init__(dtype, size, offset, nbytes, crc32c, ptr)
        self.file = file
        self.start = start


class NSharded(Node):
    """A sharded array node [m, dtype, shape, shards]; `data` is set once assembled."""
    __slots__ = ("dtype", "shape", "shards", "ptr", "nbytes", "data")

    def __init__(self, dtype, shape, shards, ptr):
        self.dtype = dtype
        self.shape = shape
        self.shards = shards
        self.ptr = ptr
        self.nbytes = 0  # no declared nbytes: R-LIM-16 holds trivially, R-LIM-15 bounds the product
        self.data = b""


# ------------------------------------------------------------------ step 14
def _str(d, ptr):
    kind, v = d.header(ptr)
    if kind != "str":
        d.skip_after_header(kind, v, ptr)
        d.err(ptr, f"field must be a str, found {kind}", "R-SHD-4")
    return d.read_str(v, ptr)


def _array_header(d, ptr, what):
    kind, v = d.header(ptr)
    if kind != "array":
        d.skip_after_header(kind, v, ptr)
        d.err(ptr, f"{what} must be a msgpack array, found {kind}", "R-SHD-4")
    return v


def _uints(d, ptr, what):
    return [d.uint_field(f"{ptr}/{i}", "R-SHD-4") for i in range(_array_header(d, ptr, what))]


def read_sharded(d, nf, ptr):
    """Decode the fields of a tag 10 node (the tag marker is already read); `nf` fields follow."""
    if nf != 3:
        d.err(ptr, f"sharded array node has {nf} fields, expected 3", "R-SHD-4")
    dt = _str(d, ptr + "/1")
    d.check_dtype(dt, ptr + "/1")
    shape = _uints(d, ptr + "/2", "global shape")
    sptr = ptr + "/3"
    n = _array_header(d, sptr, "shards")
    if n > MAX_SHARDS:  # R-LIM-0: on the declared count, before any record is read
        d.err(sptr, f"{n} shard records (max {MAX_SHARDS})", "R-LIM-20", "LimitExceeded")
    node = NSharded(dt, shape, [], ptr)
    for i in range(n):
        rp = f"{sptr}/{i}"
        cnt = _array_header(d, rp, "shard record")
        if cnt != 6:
            d.err(rp, f"shard record has {cnt} elements, expected 6", "R-SHD-4")
        if d.pos < d.n and d.buf[d.pos] == 0xC7:
            d.err(rp + "/0", "shard record is tagged; it must be an untagged array", "R-SHD-4")
        file = _str(d, rp + "/0")
        start = _uints(d, rp + "/1", "start")
        size = _uints(d, rp + "/2", "size")
        off, nb, crc = (d.uint_field(f"{rp}/{k}", "R-SHD-4") for k in (3, 4, 5))
        if crc > 0xFFFFFFFF:
            d.err(rp + "/5", f"crc32c {crc} exceeds 2^32-1", "R-SHD-4")
        for what, v, k in (("start", start, 1), ("size", size, 2)):
            if len(v) != len(shape):
                d.err(f"{rp}/{k}", f"{what} has {len(v)} elements, the global shape {len(shape)}", "R-SHD-5")
        shard = NShard(dt, file, start, size, off, nb, crc, rp)
        node.shards.append(shard)
        d.arrays.append(shard)  # extents in document order (step 16 order)
    d.sharded.append(node)
    return node


def forbid_sharded(d, nf, ptr):
    """Tag 10 in a `tree` component of kind_version 1 of a format version 2 checkpoint."""
    d.err(ptr + "/0", "sharded array node (tag 10) in a tree component of kind_version 1", "R-SHD-1")


# ------------------------------------------------------------------ step 15
def data_files(files):
    """The data files of a kind_version 2 component in step 15 (b) order: data.bin, then shard files."""
    return ["data.bin", *sorted(k for k in files if SHARD_FILE_RE.fullmatch(k))]


def file_of(a):
    return a.file if isinstance(a, NShard) else "data.bin"


def layout(tfp, path, files, size_of, arrays, sharded):
    """Step 15 for a `tree` component of kind_version 2 (S.9)."""
    A = lambda a, msg, req, f="": E("ArrayLayoutError", tfp, a.ptr + f, msg, req)  # noqa: E731
    for s in sharded:                                                            # (a)
        olayout.limits(tfp, [s])
        for r in s.shards:
            for dim, (a, b, g) in enumerate(zip(r.start, r.shape, s.shape)):
                if a + b > g:
                    raise A(r, f"shard region {a} + {b} exceeds the global dimension {g} (dimension {dim})",
                            "R-SHD-6", f"/1/{dim}")
            if r.file != "data.bin" and (r.file not in files or not SHARD_FILE_RE.fullmatch(r.file)):
                raise A(r, f"shard file {r.file!r} is neither data.bin nor a listed shard data file", "R-SHD-7", "/0")
    for key in data_files(files):                                                # (b)
        olayout.layout(tfp, f"{path}/{key}", key, size_of(key), [a for a in arrays if file_of(a) == key])
    for s in sharded:                                                            # (c)
        coverage(A, s)


def _prod(v):
    p = 1
    for x in v:
        p *= x
    return p


def coverage(A, s):
    """R-SHD-8, then R-SHD-9, then R-SHD-10, then R-SHD-11 for one sharded array."""
    zero = any(g == 0 for g in s.shape)
    if zero and s.shards:
        raise A(s.shards[0], "the global shape has a zero dimension, so the shards array must be empty", "R-SHD-8")
    for r in s.shards:
        if any(b == 0 for b in r.shape):
            raise A(r, f"shard size {r.shape} has a zero extent", "R-SHD-8", "/2")
    regions = {}
    for r in s.shards:
        regions.setdefault((tuple(r.start), tuple(r.shape)), r)
    disjoint(A, list(regions.values()))
    for r in s.shards:
        first = regions[(tuple(r.start), tuple(r.shape))]
        if r.crc32c != first.crc32c:
            raise A(r, f"replica of {first.ptr} has crc32c {r.crc32c:08x}, not {first.crc32c:08x}", "R-SHD-10", "/5")
    if not zero:
        covered = sum(_prod(r.shape) for r in regions.values())
        total = _prod(s.shape)
        if covered != total:  # distinct regions are disjoint and inside the shape: a smaller sum is a gap
            raise A(s, f"the shards cover {covered} of the {total} elements", "R-SHD-11", "/3")


def disjoint(A, regs):
    """R-SHD-9 over distinct regions: sort on one dimension, then test each region only against the
    regions that start inside it on that dimension (vectorised), never all pairs in Python."""
    if len(regs) < 2 or not regs[0].shape:
        return
    import numpy as np  # here, not at the top: a reader of format version 1 cases never pays its import

    lo = np.array([r.start for r in regs], dtype=np.int64)
    hi = lo + np.array([r.shape for r in regs], dtype=np.int64)
    j = int(np.argmax([len(np.unique(lo[:, k])) for k in range(lo.shape[1])]))
    order = np.argsort(lo[:, j], kind="stable")
    lo, hi = lo[order], hi[order]
    for i in range(len(regs) - 1):
        stop = int(np.searchsorted(lo[:, j], hi[i, j], side="left"))
        if stop <= i + 1:
            continue
        c_lo, c_hi = lo[i + 1:stop], hi[i + 1:stop]
        hit = np.nonzero(np.all((c_lo < hi[i]) & (lo[i] < c_hi), axis=1))[0]
        if hit.size:
            a, b = regs[int(order[i])], regs[int(order[i + 1 + int(hit[0])])]
            raise A(b, f"shard region overlaps the region of {a.ptr} partially", "R-SHD-9", "/1")


# ------------------------------------------------------------------ rendering
def assemble(s, data_of):
    """The global array's bytes (C order), each region copied from one verified replica (S.6)."""
    item = DTYPES[s.dtype]
    if _prod(s.shape) == 0:
        return b""
    import numpy as np  # here, not at the top: a reader of format version 1 cases never pays its import

    out = np.zeros((*tuple(s.shape), item), dtype=np.uint8)
    done = set()
    for r in s.shards:
        key = (tuple(r.start), tuple(r.shape))
        if key in done:
            continue  # R-SHD-10: any one replica may be read
        done.add(key)
        src = np.frombuffer(data_of(r.file), dtype=np.uint8, count=r.nbytes, offset=r.offset)
        out[tuple(slice(a, a + b) for a, b in zip(r.start, r.shape))] = src.reshape((*tuple(r.shape), item))
    return out.tobytes()
