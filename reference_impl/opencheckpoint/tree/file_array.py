"""``FileArray``: an array whose bytes lie in a file, written by a save chunk by chunk, never held whole.

A converter hands a save a tree of these for a large foreign file (a safetensors
file's tensors): the save plans each as an array node from its dtype and shape,
then streams its bytes from the file through one reusable buffer, so the memory
of the save does not grow with the file. The bytes must be raw little-endian,
C order, as the format stores them; bool bytes other than 00 are written as 01
(R-ARR-13), as NumPy and torch read them.

>>> import tempfile, numpy as np
>>> with tempfile.NamedTemporaryFile(suffix=".bin") as f:
...     _ = f.write(b"head" + np.arange(3, dtype="<f4").tobytes()); f.flush()
...     array = FileArray(f.name, 4, "float32", (3,))
...     (array.nbytes, b"".join(bytes(c) for c in array.chunks(8)) == np.arange(3, dtype="<f4").tobytes())
(12, True)
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from typing import Final

import numpy as np

from ..format.dtypes import numpy_dtype
from ..format.errors import ConcurrentModification

#: Bytes read per chunk when a save streams a file array (the buffer is reused: the save's memory).
CHUNK_BYTES: Final = 8 << 20


class FileArray:
    """``nbytes`` bytes at ``offset`` of the file ``path``: an array of OpenCheckpoint dtype ``dtype`` and ``shape``."""

    __slots__ = ("path", "offset", "dtype", "shape", "nbytes")

    def __init__(self, path: str | os.PathLike[str], offset: int, dtype: str, shape: Sequence[int]) -> None:
        self.path = os.fspath(path)
        self.offset = int(offset)
        self.dtype = dtype
        self.shape = tuple(int(d) for d in shape)
        self.nbytes = math.prod(self.shape) * numpy_dtype(dtype).itemsize  # an unknown name raises here

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def chunks(self, size: int = CHUNK_BYTES) -> Iterator[memoryview]:
        """The bytes in pieces of at most ``size`` bytes, each a view of one reused buffer (valid until the
        next piece); bool bytes made 00/01. Raises :class:`ConcurrentModification` if the file is shorter."""
        buffer = bytearray(max(1, min(size, self.nbytes)))
        view = memoryview(buffer)
        fd = os.open(self.path, os.O_RDONLY)
        try:
            done = 0
            while done < self.nbytes:
                piece = view[: min(len(view), self.nbytes - done)]
                got = 0
                while got < len(piece):
                    count = os.preadv(fd, [piece[got:]], self.offset + done + got)
                    if count == 0:
                        raise ConcurrentModification(f"the file ended at byte {self.offset + done + got} while "
                                                     f"an array of {self.nbytes} bytes at {self.offset} was read",
                                                     file=self.path)
                    got += count
                if self.dtype == "bool":
                    flags = np.frombuffer(piece, dtype=np.uint8)
                    np.minimum(flags, 1, out=flags)
                yield piece
                done += len(piece)
        finally:
            os.close(fd)

    def read(self) -> np.ndarray:
        """The whole array, in memory (small arrays the writer gathers into one buffer)."""
        out = np.empty(self.nbytes, np.uint8)
        done = 0
        for piece in self.chunks():
            out[done : done + len(piece)] = np.frombuffer(piece, np.uint8)
            done += len(piece)
        return out.view(numpy_dtype(self.dtype)).reshape(self.shape)

    def __repr__(self) -> str:
        return f"FileArray({self.dtype}{list(self.shape)}, {self.path!r}@{self.offset})"
