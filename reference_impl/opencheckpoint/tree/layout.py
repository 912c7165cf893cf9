"""Data file layout rules (spec "Array data file"), checked before any array byte is read.

Order: alignment, bounds, partial overlaps (identical extents are aliases and
must agree on the checksum), then "the extents end exactly at the end of
the file". Zero padding is checked by :func:`check_padding` (``validate``).

>>> from .nodes import ArrayRef
>>> check_layout([ArrayRef("float32", (2,), 0, 8, 1, "$.a"), ArrayRef("float32", (2,), 32, 8, 2, "$.b")], 40)
Traceback (most recent call last):
...
opencheckpoint.errors.ArrayLayoutError: ArrayLayoutError: $.b: offset 32 is not a multiple of 64 [R-ARR-4]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import ArrayLayoutError
from ..limits import ALIGNMENT
from .nodes import ArrayRef


def check_layout(arrays: Sequence[ArrayRef], file_size: int) -> None:
    """Raise :class:`ArrayLayoutError` unless the arrays tile ``data.bin`` as the spec requires."""
    extents: dict[tuple[int, int], ArrayRef] = {}
    for ref in arrays:
        if ref.nbytes == 0:
            if ref.offset != 0 or ref.crc32c != 0:
                raise ArrayLayoutError("an empty array has offset 0 and crc32c 0", field=ref.path, section="R-ARR-6")
            continue
        if ref.offset % ALIGNMENT:
            raise ArrayLayoutError(f"offset {ref.offset} is not a multiple of {ALIGNMENT}", field=ref.path,
                                   section="R-ARR-4")
        if ref.offset + ref.nbytes > file_size:
            raise ArrayLayoutError(
                f"bytes [{ref.offset}, {ref.offset + ref.nbytes}) run past the end of data.bin ({file_size} bytes)",
                field=ref.path, section="R-ARR-5")
        first = extents.setdefault((ref.offset, ref.nbytes), ref)
        if first is not ref and first.crc32c != ref.crc32c:
            raise ArrayLayoutError(f"aliases {first.path} (same bytes) but records a different crc32c",
                                   field=ref.path, section="R-ARR-8")
    end = 0
    previous: ArrayRef | None = None
    for (offset, nbytes), ref in sorted(extents.items()):
        if previous is not None and offset < end:
            raise ArrayLayoutError(f"overlaps {previous.path} without being the same extent", field=ref.path,
                                   section="R-ARR-7")
        end = max(end, offset + nbytes)
        previous = ref
    if end != file_size:
        raise ArrayLayoutError(f"data.bin is {file_size} bytes but its arrays end at {end}", field="$",
                               section="R-ARR-9")


def check_padding(arrays: Sequence[ArrayRef], data: memoryview) -> None:
    """Every byte of data.bin outside an array extent is zero."""
    position = 0
    for offset, nbytes in sorted({(r.offset, r.nbytes) for r in arrays if r.nbytes}):
        if offset > position and np.frombuffer(data[position:offset], dtype=np.uint8).any():
            raise ArrayLayoutError(f"padding bytes [{position}, {offset}) are not zero", field="$",
                                   section="R-ARR-10")
        position = max(position, offset + nbytes)
