"""``diff``: what differs between two checkpoints — components, arrays, values and metadata.

Arrays are equal when their dtype, shape and bytes are equal (so ``-0.0`` and
``0.0`` differ, and a NaN equals the same NaN). For a changed floating-point
array the report gives the largest absolute and relative difference.

>>> import numpy as np, tempfile, os
>>> from opencheckpoint import Checkpoint
>>> folder = tempfile.mkdtemp()
>>> a = Checkpoint(m={"w": np.zeros(3, np.float32)}).save(os.path.join(folder, "a"), metadata={"step": 1})
>>> b = Checkpoint(m={"w": np.array([0, 0.5, 0], np.float32)}).save(os.path.join(folder, "b"), metadata={"step": 2})
>>> report = diff(a, b)
>>> report.equal, [(c.path, c.change, c.max_abs_diff) for c in report.changes]
(False, [('metadata.step', 'changed', None), ('m/$.w', 'changed', 0.5)])
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from ..format import migrations
from ..format.dtypes import numpy_dtype
from ..read.array_streams import ARRAYS, ChunkStats, StreamedTree, paired_chunks, whole
from ..read.reader import CheckpointReader
from ..tree.nodes import ArrayRef, NamedTupleValue
from ..tree.treepath import segment

Change = Literal["added", "removed", "changed"]


@dataclass
class Difference:
    """One difference: where (``component/$.tree.path``, ``component``, or ``metadata.key``) and what."""

    path: str
    change: Change
    detail: str = ""
    max_abs_diff: float | None = None
    max_rel_diff: float | None = None


@dataclass
class DiffReport:
    """Every difference between checkpoint ``a`` and checkpoint ``b``; ``equal`` when there is none."""

    a: str
    b: str
    changes: list[Difference] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return not self.changes

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "equal": self.equal,
                "changes": [{k: v for k, v in asdict(c).items() if v is not None and v != ""}
                            for c in self.changes]}


def diff(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> DiffReport:
    """Compare two checkpoints (every array is read and verified); raises :class:`CheckpointError` if unreadable."""
    report = DiffReport(str(a), str(b))
    with CheckpointReader(a) as left, CheckpointReader(b) as right:
        _compare_mapping(report, "metadata", left.manifest.get("metadata") or {},
                         right.manifest.get("metadata") or {})
        lc, rc = left.components, right.components
        for name in lc:
            if name not in rc:
                report.changes.append(Difference(name, "removed", f"a {lc[name].kind} component"))
        for name in rc:
            if name not in lc:
                report.changes.append(Difference(name, "added", f"a {rc[name].kind} component"))
        for name in (n for n in lc if n in rc):
            kind_a, kind_b = lc[name].kind, rc[name].kind
            if kind_a != kind_b:
                report.changes.append(Difference(name, "changed", f"kind {kind_a} -> {kind_b}"))
            elif kind_a == "tree":
                _compare_components(report, name, left, right)
            elif kind_a == "json":
                if left.json(name) != right.json(name):
                    report.changes.append(Difference(name, "changed", "JSON value differs"))
            else:
                files_a = {rel: (f.size, f.crc32c) for rel, f in lc[name].files.items()}
                files_b = {rel: (f.size, f.crc32c) for rel, f in rc[name].files.items()}
                _compare_mapping(report, name, files_a, files_b)
    return report


def _compare_mapping(report: DiffReport, prefix: str, a: dict[str, Any], b: dict[str, Any]) -> None:
    for key in a:
        if key not in b:
            report.changes.append(Difference(f"{prefix}.{key}", "removed"))
        elif a[key] != b[key]:
            report.changes.append(Difference(f"{prefix}.{key}", "changed", f"{a[key]!r} -> {b[key]!r}"))
    for key in b:
        if key not in a:
            report.changes.append(Difference(f"{prefix}.{key}", "added"))


def leaves(value: Any, path: str = "$") -> Iterator[tuple[str, Any]]:
    """Every leaf of a tree with its ``$``-rooted path in document order, in the notation ``inspect`` and
    error messages use (``$.key``, ``$['0.weight']``, ``$[0]``: :func:`~opencheckpoint.tree.treepath.segment`).

    >>> print(*(path for path, _ in leaves({"w": 1, "0.bias": 2})))
    $.w $['0.bias']
    """
    if isinstance(value, NamedTupleValue):
        for key, item in value._asdict().items():
            yield from leaves(item, path + segment(key))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(item, path + (segment(key) if isinstance(key, (str, int)) else f"[{key!r}]"))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from leaves(item, f"{path}[{index}]")
    else:
        yield path, value


def _compare_components(report: DiffReport, name: str, left: CheckpointReader, right: CheckpointReader) -> None:
    """Compare one tree component of both checkpoints, array by array: no array is read whole
    (:mod:`opencheckpoint.array_streams`), so memory does not grow with the checkpoints."""
    if any(migrations.DEFAULT_CHAIN.rewrites_payload(r.parsed.written_version, "tree") for r in (left, right)):
        # An older format whose payload is migrated on read: compared as read (whole arrays).
        _compare_trees(report, name, left.read(name), right.read(name), None)
        return
    with StreamedTree(left, name) as a, StreamedTree(right, name) as b:
        _compare_trees(report, name, a.root, b.root, (a, b))


def _compare_trees(report: DiffReport, name: str, a: Any, b: Any,
                   sides: tuple[StreamedTree, StreamedTree] | None) -> None:
    left, right = dict(leaves(a)), dict(leaves(b))
    for path, value in left.items():
        where = f"{name}/{path}"
        if path not in right:
            report.changes.append(Difference(where, "removed", _describe(value)))
            continue
        other = right[path]
        change: Difference | None = None
        if type(value) is ArrayRef and type(other) is ArrayRef and sides is not None:
            change = _compare_streamed(where, value, other, sides)
        elif isinstance(value, ARRAYS) and isinstance(other, ARRAYS):
            change = _compare_arrays(where, whole(value, sides, 0), whole(other, sides, 1))
        elif type(value) is not type(other) or not _same(value, other):
            change = Difference(where, "changed", f"{_describe(value)} -> {_describe(other)}")
        if change is not None:
            report.changes.append(change)
    for path, value in right.items():
        if path not in left:
            report.changes.append(Difference(f"{name}/{path}", "added", _describe(value)))


def _compare_streamed(where: str, a: ArrayRef, b: ArrayRef,
                      sides: tuple[StreamedTree, StreamedTree]) -> Difference | None:
    """Two stored arrays compared chunk by chunk (each chunk verified as part of its array's CRC-32C)."""
    if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
        return Difference(where, "changed", f"{_describe(a)} -> {_describe(b)}")
    stats = ChunkStats(numpy_dtype(a.dtype))
    for x, y in paired_chunks(sides[0], a, sides[1], b):
        stats.add(x, y)
    return _difference(where, stats, _describe(a))


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) or (a != a and b != b)  # NaN scalars stored the same way are the same value
    except (TypeError, ValueError):
        return False


def _describe(value: Any) -> str:
    if isinstance(value, (np.ndarray, *ARRAYS)):
        return f"{value.dtype}{list(value.shape)}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _compare_arrays(where: str, a: np.ndarray, b: np.ndarray) -> Difference | None:
    if a.dtype != b.dtype or a.shape != b.shape:
        return Difference(where, "changed", f"{_describe(a)} -> {_describe(b)}")
    stats = ChunkStats(a.dtype)
    stats.add(np.ascontiguousarray(a).reshape(-1), np.ascontiguousarray(b).reshape(-1))
    return _difference(where, stats, _describe(a))


def _difference(where: str, stats: ChunkStats, described: str) -> Difference | None:
    found = stats.detail(described)
    return None if found is None else Difference(where, "changed", *found)
