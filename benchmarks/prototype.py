"""A prototype (not project code) of verified restore into existing arrays, to size a fix.

It does what a restore into existing parameters must do, and nothing more:
map ``data.bin``, and for each array copy 1 MiB chunks from the map into
the destination while CRC-32C runs over the same chunk (hot in cache).
Comparing it with ``Checkpoint.load`` in the same run shows how much the
current restore path spends on intermediate copies.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Any

import crc32c
import msgpack
import numpy as np

CHUNK = 1 << 20


def _nodes(path: Path, component: str) -> tuple[Path, dict[str, list[Any]]]:
    directory = Path(path) / "components" / component
    tree = msgpack.unpackb((directory / "tree.msgpack").read_bytes(), raw=False, strict_map_key=False,
                           ext_hook=lambda code, data: code)
    nodes: dict[str, list[Any]] = {}
    _arrays(tree, nodes)
    return directory, nodes


def verified_read_into(path: Path, component: str, destination: dict[str, np.ndarray]) -> None:
    """Like :func:`verified_restore_into` but without a map: ``readinto`` 1 MiB chunks, CRC each while hot.

    No file page is mapped, so the process's RSS grows by nothing but the
    destination (which already exists for a restore, or is the one copy a
    fresh load needs).
    """
    directory, nodes = _nodes(path, component)
    with open(directory / "data.bin", "rb", buffering=0) as handle:
        for key, node in nodes.items():
            offset, nbytes, stored = node[3], node[4], node[5]
            target = destination[key].reshape(-1).view(np.uint8).data  # a memoryview, no copy
            handle.seek(offset)
            crc = 0
            for start in range(0, nbytes, CHUNK):
                piece = target[start: min(start + CHUNK, nbytes)]
                got = handle.readinto(piece)
                while got < len(piece):  # short reads are legal
                    more = handle.readinto(piece[got:])
                    if not more:
                        raise EOFError(key)
                    got += more
                crc = crc32c.crc32c(piece, crc)
            if crc != stored:
                raise ValueError(f"crc mismatch in {key}")


def _arrays(node: object, out: dict[str, list[Any]]) -> None:
    # The benchmark's tree is a flat dict name -> array node [ext, dtype, shape, offset, nbytes, crc].
    assert isinstance(node, dict)
    for key, value in node.items():
        out[key] = value


def verified_restore_into(path: Path, component: str, destination: dict[str, np.ndarray]) -> None:
    """Copy each stored array into ``destination[name]`` chunk by chunk, checking CRC-32C as it goes."""
    directory, nodes = _nodes(path, component)
    fd = os.open(directory / "data.bin", os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        mapped = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)
    try:
        _copy_all(np.frombuffer(mapped, dtype=np.uint8), nodes, destination)
    finally:
        mapped.close()


def _copy_all(source: np.ndarray, nodes: dict[str, list[Any]], destination: dict[str, np.ndarray]) -> None:
    for key, node in nodes.items():
        offset, nbytes, stored = node[3], node[4], node[5]
        target = destination[key].reshape(-1).view(np.uint8)
        crc = 0
        for start in range(0, nbytes, CHUNK):
            chunk = source[offset + start: offset + min(start + CHUNK, nbytes)]
            crc = crc32c.crc32c(chunk.data, crc)  # the buffer itself, no copy
            target[start: start + len(chunk)] = chunk
        if crc != stored:
            raise ValueError(f"crc mismatch in {key}")
