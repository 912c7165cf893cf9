"""What a component's adapter asks to write, recorded at the plan stage and replayed at the write stage.

Every save runs each selected component's adapter once, at the plan stage,
against a :class:`RecordingWriter`: trees become planned
:class:`~opencheckpoint.tree.encode.TreePlan` documents (the tree encoded,
each distinct array extent listed once: the plan's byte total is their sum),
JSON values and files are kept, files an adapter dumps itself (``dump(path)``)
go to the plan's scratch directory (on the target's file system, so the
write stage moves them instead of copying). :meth:`ComponentPlan.replay`
then writes it all through the real
:class:`~opencheckpoint.adapters.base.ComponentWriter` of the staging area,
trees through the save's :class:`~opencheckpoint.tree.sink.TreeSink` (one
process: the whole tree; one rank of a collective save: its shards), given
as an argument, not looked up.

JSON values are encoded at the plan stage and file contents kept as
``bytes`` (a ``bytes`` object is kept, not copied), so the live state may
change before they are written (an async save writes them later).

>>> import tempfile, pathlib, numpy as np
>>> from opencheckpoint.options import CheckpointOptions
>>> writer = RecordingWriter(pathlib.Path(tempfile.mkdtemp()) / "w", durable=False, sha256=False,
...                          options=CheckpointOptions(), rank=0)
>>> writer.write_tree({"w": np.zeros(3, dtype=np.float32)}); writer.write_json({"lr": 0.1})
>>> [extent.nbytes for plan in writer.plans for extent in plan.extents], len(writer.steps)
([12], 2)
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..adapters.base import ComponentWriter
from ..adapters.component_io import encode_json
from ..adapters.frameworks import convert_leaf
from ..options import CheckpointOptions
from ..tree.encode import TreePlan
from ..tree.sink import TreeSink

__all__ = ["ComponentPlan", "RecordingWriter"]

#: One recorded call: replays itself on the real writer, trees through the sink.
Step = Callable[[ComponentWriter, TreeSink], None]


class RecordingWriter(ComponentWriter):
    """A :class:`ComponentWriter` that records what an adapter writes (replayed by :meth:`ComponentPlan.replay`)."""

    def __init__(self, directory: Path, *, durable: bool, sha256: bool, options: CheckpointOptions, rank: int) -> None:
        # the object's own save method gets the component's save_args/save_kwargs now
        super().__init__(directory, durable=durable, sha256=sha256, method_args=options.save_args or (),
                         method_kwargs=dict(options.save_kwargs or {}))
        self.steps: list[Step] = []
        self.plans: list[TreePlan] = []
        self._rank = rank

    def write_tree(self, value: Any) -> None:
        plan = TreePlan(value, convert_leaf, rank=self._rank)  # unsupported values raise here, before any write
        self.plans.append(plan)
        self.steps.append(lambda writer, sink: _write_tree(writer, sink, plan))

    def write_json(self, value: Any) -> None:
        data = encode_json(value)  # encoded now (a value that cannot be stored raises here): nothing to copy
        self.steps.append(lambda writer, sink: writer.write_encoded_json(data))

    def write_file(self, rel: str, data: bytes, *, sha256: bool | None = None) -> None:
        kept = bytes(data)  # no copy of a bytes object; a buffer the adapter may reuse is copied
        self.steps.append(lambda writer, sink: writer.write_file(rel, kept, sha256=sha256))

    def inventory_directory(self) -> None:
        # The files are in the plan's scratch directory now; they are inventoried where they are written.
        self.steps.append(lambda writer, sink: writer.inventory_directory())


def _write_tree(writer: ComponentWriter, sink: TreeSink, plan: TreePlan) -> None:
    """A planned tree written through ``sink`` into the component ``writer`` stands for."""
    if writer.archive is None:
        writer.directory.mkdir(parents=True, exist_ok=True)
    writer.files.update(sink.write_tree(plan, writer.directory, durable=writer.durable, sha256=writer.sha256,
                                        archive=writer.archive, member_prefix=writer.member_prefix))


@dataclass
class ComponentPlan:
    """One component of a save's plan: its adapter's kind and what the adapter asked to write."""

    name: str
    kind: str
    kind_version: int
    recording: RecordingWriter

    @property
    def extents(self) -> list[Any]:
        """The distinct array extents of its trees (what a snapshot copies, what progress counts)."""
        return [extent for plan in self.recording.plans for extent in plan.extents]

    @property
    def nbytes(self) -> int:
        """The bytes its trees' extents take, each rounded up to 64 (no step per extent: 20,000 tiny arrays)."""
        return sum(plan.data.aligned_size for plan in self.recording.plans)

    def replay(self, writer: ComponentWriter, sink: TreeSink) -> None:
        """Write the component: files the adapter dumped moved in, then every recorded call in order."""
        _move_dumped(self.recording.directory, writer.directory)
        for step in self.recording.steps:
            step(writer, sink)
        writer.hints.update(self.recording.hints)
        if self.recording.metadata is not None:
            writer.metadata = {**(writer.metadata or {}), **self.recording.metadata}


def _move_dumped(dumped: Path, directory: Path) -> None:
    """Move the files an adapter dumped at the plan stage to the component's directory (copied across file
    systems, or when the directory is there already)."""
    if not dumped.is_dir() or not any(dumped.iterdir()):
        return
    directory.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(dumped, directory)
        return
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR, errno.ENOTDIR):
            raise
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copytree(dumped, directory, dirs_exist_ok=True)
