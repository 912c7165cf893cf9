"""Step 15 for a ``tree`` component of kind_version 2: its data files and its sharded arrays.

Order (spec ``opencheckpoint-v2.md`` §S.5), each phase over every array before
the next: (a) each sharded array's global shape under the limits of a tag 6
array (R-LIM-13 .. R-LIM-16), then each of its shard records: inside the
global shape (R-SHD-6) and in a data file of the component (R-SHD-7);
(b) every data file (``data.bin`` first, then the shard data files in key
order) under the data file rules of spec §9 (R-LIM-13 .. R-LIM-16,
R-ARR-4 .. R-ARR-11), over its tag 6 arrays and the shards stored in it, each
shard an array node of the array's dtype and the shard's ``size``; (c) the
shard regions of each array (:func:`~opencheckpoint.rules.sharded.tiling_error`).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..format.errors import CheckpointError
from ..rules.sharded import SHD, tiling_error
from ..rules.v2 import is_shard_file
from ..tree.exact import DecodedTree
from ..tree.layout import check_layout, limit_error
from ..tree.nodes import ArrayRef

DATA_FILE = "data.bin"


def data_file_sizes(files: Mapping[str, int]) -> dict[str, int]:
    """The data files of a kind_version 2 component (inventory key -> size): ``data.bin`` first."""
    names = sorted(rel for rel in files if is_shard_file(rel))
    return {rel: files[rel] for rel in (DATA_FILE, *names) if rel in files}


def extents_by_file(decoded: DecodedTree) -> dict[str, list[ArrayRef]]:
    """The array extents of each data file: tag 6 arrays in ``data.bin``, each shard in its file."""
    out: dict[str, list[ArrayRef]] = {DATA_FILE: list(decoded.arrays)}
    for ref in decoded.sharded:
        for shard in ref.shards:
            out.setdefault(shard.file, []).append(shard.extent(ref.dtype))
    return out


def check_sharded_layout(decoded: DecodedTree, files: Mapping[str, int], component_path: str) -> None:
    """Raise the first violation of step 15 of a kind_version 2 tree component (see the module docstring).

    ``files`` maps the component's inventory keys to sizes. Errors of phase (b)
    name the data file; the others are left for the caller to place (``tree.msgpack``).
    """
    sizes = data_file_sizes(files)
    for ref in decoded.sharded:
        error = limit_error(ArrayRef(ref.dtype, ref.shape, 0, ref.nbytes, 0, ref.where))
        if error is not None:
            raise error
        for shard in ref.shards:
            error = (SHD.check("R-SHD-6", shard.path, ref.shape, shard.start, shard.size)
                     or SHD.check("R-SHD-7", shard.path, shard.file, sizes))
            if error is not None:
                raise error
    extents = extents_by_file(decoded)
    for rel, size in sizes.items():
        try:
            check_layout(extents.get(rel, []), size, rel)
        except CheckpointError as exc:
            raise exc.at(file=f"{component_path}/{rel}") from None
    for ref in decoded.sharded:
        error = tiling_error(ref.shape, [(s.start, s.size) for s in ref.shards], [s.crc32c for s in ref.shards],
                             [s.path for s in ref.shards], ref.path)
        if error is not None:
            raise error
