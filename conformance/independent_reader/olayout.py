"""Array data files (spec §9): the layout checks of step 15 and the content checks of step 16.

In format version 1 the only data file is `data.bin` and its extents are the tag 6 array nodes.
Format version 2 (S.5) applies the same rules to every data file of a `tree` component of
kind_version 2, with each shard record as an extent (an array node of shape `size`).
"""
from __future__ import annotations

import ocrc
from ocommon import E
from onodes import DTYPES


def limits(tfp, arrays):
    """R-LIM-13 .. R-LIM-16 on each extent's shape and nbytes."""
    L = lambda a, msg, req, f="": E("LimitExceeded", tfp, a.ptr + f, msg, req)  # noqa: E731
    for a in arrays:
        if len(a.shape) > 64:
            raise L(a, f"array has {len(a.shape)} dimensions (max 64)", "R-LIM-13", "/2")
        for i, d in enumerate(a.shape):
            if d > 2**63 - 1:
                raise L(a, f"dimension {d} exceeds 2^63-1", "R-LIM-14", f"/2/{i}")
        prod = 1
        for d in a.shape:
            prod *= d
            if prod >= 2**63:
                raise L(a, "running product of the shape reaches 2^63", "R-LIM-15", "/2")
        if prod * DTYPES[a.dtype] >= 2**63:
            raise L(a, "shape product times itemsize reaches 2^63", "R-LIM-15", "/2")
        if a.nbytes >= 2**63:
            raise L(a, f"nbytes {a.nbytes} reaches 2^63", "R-LIM-16", "/4")


def layout(tfp, dfp, name, dsize, arrays):
    """Step 15 for data file `name` (full path `dfp`, `dsize` bytes) holding `arrays` (document order)."""
    A = lambda a, msg, req, f="": E("ArrayLayoutError", tfp, a.ptr + f, msg, req)  # noqa: E731
    limits(tfp, arrays)
    for a in arrays:
        prod = 1
        for d in a.shape:
            prod *= d
        if a.nbytes != prod * DTYPES[a.dtype]:
            raise A(a, f"nbytes {a.nbytes} != shape product {prod} x itemsize {DTYPES[a.dtype]}", "R-ARR-4", "/4")
    for a in arrays:
        if a.offset % 64 != 0:
            raise A(a, f"offset {a.offset} is not a multiple of 64", "R-ARR-5", "/3")
        if a.nbytes == 0 and a.offset != 0:
            raise A(a, "zero-length extent must have offset 0", "R-ARR-6", "/3")
        if a.nbytes == 0 and a.crc32c != 0:
            raise A(a, "zero-length extent must have crc32c 0", "R-ARR-7", "/5")
        if a.offset + a.nbytes > dsize:
            raise A(a, f"extent [{a.offset}, {a.offset + a.nbytes}) exceeds {name} size {dsize}", "R-ARR-8", "/3")
    overlaps(A, arrays)
    end = max((a.offset + a.nbytes for a in arrays if a.nbytes > 0), default=0)
    if dsize != end:
        raise E("ArrayLayoutError", dfp, "-", f"{name} is {dsize} bytes, the largest extent end is {end}", "R-ARR-11")


def overlaps(A, arrays):
    """R-ARR-9, R-ARR-10 by one sort and a sweep (never pairwise)."""
    ext = sorted((a for a in arrays if a.nbytes > 0), key=lambda a: (a.offset, a.nbytes))
    prev = None
    max_end, max_a = 0, None
    for a in ext:
        if prev is not None and (a.offset, a.nbytes) == (prev.offset, prev.nbytes):
            if a.crc32c != prev.crc32c:
                raise A(a, f"extents identical to {prev.ptr or '/'} have a different crc32c", "R-ARR-10", "/5")
        elif a.offset < max_end:
            raise A(a, f"extent [{a.offset}, {a.offset + a.nbytes}) overlaps "
                    f"[{max_a.offset}, {max_a.offset + max_a.nbytes}) of {max_a.ptr or '/'}", "R-ARR-9", "/3")
        prev = a
        if a.offset + a.nbytes > max_end:
            max_end, max_a = a.offset + a.nbytes, a


def content(tfp, dfp, data, arrays):
    """Step 16 for one data file: extent by extent in document order R-ARR-14 then R-ARR-13; then R-ARR-12."""
    done = {}
    for a in arrays:
        if a.nbytes == 0:
            continue
        k = (a.offset, a.nbytes)
        if k not in done:
            done[k] = ocrc.crc32c(memoryview(data)[a.offset:a.offset + a.nbytes])
        if done[k] != a.crc32c:
            raise E("IntegrityError", tfp, a.ptr + "/5",
                    f"crc32c mismatch: stored {a.crc32c:08x}, computed {done[k]:08x}", "R-ARR-14")
        if a.dtype == "bool" and _bytes_other_than(data, a.offset, a.offset + a.nbytes, b"\x00\x01"):
            raise E("ArrayLayoutError", tfp, a.ptr, "bool elements contain a byte other than 00/01", "R-ARR-13")
    pos = 0
    gaps = []
    for off, nb in sorted(done):
        if off > pos:
            gaps.append((pos, off))
        pos = max(pos, off + nb)
    if pos < len(data):
        gaps.append((pos, len(data)))
    for s, e in gaps:
        if _bytes_other_than(data, s, e, b"\x00"):
            raise E("ArrayLayoutError", dfp, f"bytes [{s}, {e})", "byte outside every extent is not 00", "R-ARR-12")


def _bytes_other_than(data, start, end, allowed):
    """Whether bytes [start, end) of `data` hold a byte not in `allowed`: a C-level scan a chunk at a time
    (bytes.translate deletes the allowed bytes), so the reader needs no numpy for it (numpy's import is
    most of a small case's CPU time) and its memory stays one chunk."""
    with memoryview(data) as view:
        for lo in range(start, end, 1 << 20):
            if bytes(view[lo:min(end, lo + (1 << 20))]).translate(None, allowed):
                return True
    return False
