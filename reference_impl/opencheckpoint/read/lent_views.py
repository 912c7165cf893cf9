"""Array views of a data file lent to an object's own load method, and taking them back.

An object restored through its own ``load_state_dict`` usually copies the
arrays it is given into arrays it already has and then drops them. Handing
it views of the data file's pages instead of fresh arrays makes that restore
one copy, from the page cache into memory the object has touched already
(a fresh array costs a page fault per page, then the object copies it
again). Some objects keep what they are given instead of copying it: those
must not end up holding arrays that live in a map of the checkpoint's file.

So the views are lent, never given: :func:`lend_tree` maps the data file
privately (copy-on-write: the views are writeable, a write never reaches
the file, and the map belongs to this load alone), verifies every array it
will lend, and returns the tree of views. After the object's method has
returned, :meth:`LentTree.returned` closes the map, which succeeds exactly
when no view of it is alive anywhere in the process (Python refuses to close
a map while a buffer exported from it exists; a NumPy view holds one through
its base). When a view is still alive, the object kept it: the caller then
gives the object owned arrays instead, read from the file again (never
copied from the map, whose pages the object may have written; see
:mod:`opencheckpoint.adapters.state_dict`).
"""

from __future__ import annotations

import contextlib
import gc
import mmap
from typing import TYPE_CHECKING, Any

import numpy as np

from ..format import migrations
from ..tree.decode import DecodedTree
from ..tree.nodes import ArrayRef
from .arrays import array_view, verify_views
from .sharded import ComponentFiles, assemble
from .to_framework import materialize_views, numpy_framework

if TYPE_CHECKING:
    from .reader import CheckpointReader


class LentTree:
    """A tree whose arrays are views of one private map, and the map they must all give back.

    The tree is handed out once (:meth:`take`): the lender keeps no reference
    to a view, so that :meth:`returned` can tell whether anyone else does.
    """

    __slots__ = ("_tree", "_map", "_start", "_size", "_decoded", "_file", "_files", "_verify")

    def __init__(self, data_map: mmap.mmap, start: int, size: int, decoded: DecodedTree, file: str,
                 files: ComponentFiles | None, *, verify: bool) -> None:
        self._verify = verify
        self._map = data_map
        self._start = start
        self._size = size
        self._decoded = decoded
        self._file = file
        self._files = files
        self._tree: Any = None

    def lend(self) -> None:
        """Build the tree of views (verified when the tree was lent with ``verify``), for :meth:`take`."""
        self._tree = self.build(verify=self._verify)

    def take(self) -> Any:
        """The tree of lent views (a second call gets None: the lender holds no view)."""
        tree, self._tree = self._tree, None
        return tree

    def build(self, *, verify: bool) -> Any:
        """The tree with every array a view of the map (checked when ``verify``; the map must be open)."""
        data = memoryview(self._map)[self._start : self._start + self._size]
        built: list[tuple[np.ndarray, ArrayRef]] = []

        def leaf(ref: ArrayRef) -> np.ndarray:
            array = array_view(data, ref)
            built.append((array, ref))
            return array

        files = self._files
        tree = materialize_views(self._decoded, leaf, numpy_framework(), None,
                                 lambda ref: assemble(ref, files, verify=verify))  # type: ignore[arg-type]  # set when sharded
        if verify:  # every array in one checksum pass (caller + pool), before any is handed out
            verify_views(built, self._file)
        return tree

    def returned(self) -> bool:
        """Close the map if no view of it is alive; True when it is closed (now or before).

        A view caught in a reference cycle that nothing reaches any more is
        collected first (one ``gc.collect()``, only when the first attempt
        fails). False means something still holds a view: the map stays
        open until that view dies.
        """
        if self._map.closed:
            return True
        for attempt in range(2):
            try:
                self._map.close()
                return True
            except BufferError:
                if attempt == 0:
                    gc.collect()
        return False


def lend_tree(reader: CheckpointReader, name: str, *, verify: bool) -> LentTree | None:
    """The component's tree (NumPy) with every array a writeable view of a private map of its data file,
    verified (CRC-32C, bool bytes) unless ``verify`` is False; None where no view can be lent.

    None (the caller reads fresh arrays instead): a component of another kind
    than ``tree``, a tree a format migration rewrites (its arrays are new values),
    a checkpoint on a remote store (nothing to map), an empty data file.
    """
    record = reader.record(name)
    if record.kind != "tree" or migrations.DEFAULT_CHAIN.rewrites_payload(reader.parsed.written_version, "tree"):
        return None
    decoded, data_file, size = reader.decoded_layout(name)
    mapped = reader.source.private_map(data_file, size) if size else None
    if mapped is None:
        return None
    data_map, start = mapped
    lent = LentTree(data_map, start, size, decoded, data_file,
                    reader.component_files(name) if decoded.sharded else None, verify=verify)
    try:
        lent.lend()
    except BaseException:
        _close_quietly(data_map)
        raise
    return lent


def _close_quietly(data_map: mmap.mmap) -> None:
    """Close a map whose views were never handed out (an error while lending); views an error's traceback
    still holds keep it open until they die."""
    with contextlib.suppress(BufferError):
        data_map.close()
