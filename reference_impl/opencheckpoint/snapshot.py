"""A checkpoint's state captured now and written later: what :meth:`Checkpoint.save_async` writes.

Every selected component's adapter runs its ``save`` right away, against a
:class:`RecordingWriter` that keeps what it was asked to write instead of
writing it: trees as planned :class:`~opencheckpoint.tree.encode.TreePlan`
documents (the tree already encoded, each distinct array extent listed once),
JSON values as copies, files as bytes, files an adapter dumps itself
(``dump(path)``) in a private temporary directory, plus hints and metadata.
:meth:`Snapshot.copy_arrays` then copies every array extent into host memory
owned by the snapshot (torch tensors, CUDA ones included, and JAX arrays
were already turned into NumPy arrays by their adapters while planning), so
the live state may change as soon as it returns.

:meth:`Snapshot.checkpoint` gives a :class:`~opencheckpoint.Checkpoint` whose
components replay those calls on the real writer: its ``save`` is the one
code path every save publishes through (staging, atomic rename, fsync).
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .adapters.base import Adapter, ComponentWriter
from .adapters.frameworks import convert_leaf
from .format.errors import CheckpointError
from .format.limits import ALIGNMENT
from .options import CheckpointOptions
from .progress import ProgressArg, check, reporting
from .tree.encode import TreePlan

if TYPE_CHECKING:
    from .checkpoint import Checkpoint

#: One recorded call: replays itself on the real writer.
_Step = Callable[[ComponentWriter], None]


class RecordingWriter(ComponentWriter):
    """A :class:`ComponentWriter` that records what an adapter writes, to be replayed by :class:`ReplayAdapter`."""

    def __init__(self, directory: Path, *, durable: bool, sha256: bool, options: CheckpointOptions) -> None:
        # the object's own save method gets the component's save_args/save_kwargs now, as in save()
        super().__init__(directory, durable=durable, sha256=sha256, method_args=options.save_args or (),
                         method_kwargs=dict(options.save_kwargs or {}))
        self.steps: list[_Step] = []
        self.plans: list[TreePlan] = []

    def write_tree(self, value: Any) -> None:
        plan = TreePlan(value, convert_leaf)  # unsupported values raise here, in the caller's thread
        self.plans.append(plan)
        self.steps.append(lambda writer: writer.write_tree(plan))

    def write_json(self, value: Any) -> None:
        kept = copy.deepcopy(value)
        self.steps.append(lambda writer: writer.write_json(kept))

    def write_file(self, rel: str, data: bytes, *, sha256: bool | None = None) -> None:
        kept = bytes(data)
        self.steps.append(lambda writer: writer.write_file(rel, kept, sha256=sha256))

    def inventory_directory(self) -> None:
        # The files are in the temporary directory now; they are inventoried where they are published.
        self.steps.append(lambda writer: writer.inventory_directory())


class ReplayAdapter(Adapter):
    """Writes a recorded component: the original adapter's kind, its calls replayed in order."""

    def __init__(self, kind: str, kind_version: int, recording: RecordingWriter) -> None:
        self.kind = kind
        self.kind_version = kind_version
        self.recording = recording

    def save(self, value: Any, writer: ComponentWriter) -> None:
        dumped = self.recording.directory
        if dumped.is_dir() and any(dumped.iterdir()):
            writer.directory.mkdir(parents=True, exist_ok=True)
            shutil.copytree(dumped, writer.directory, dirs_exist_ok=True)
        for step in self.recording.steps:
            step(writer)
        writer.hints.update(self.recording.hints)
        if self.recording.metadata is not None:
            writer.metadata = {**(writer.metadata or {}), **self.recording.metadata}


#: Host buffer of a finished snapshot, kept for the next one: a training loop saves the same state
#: again and again, and copying into memory already mapped avoids the page faults that make copying
#: into fresh memory several times slower than memcpy (at most one is kept; see :func:`release_buffers`).
_spare: list[np.ndarray] = []
_spare_lock = threading.Lock()


def _buffer(nbytes: int) -> np.ndarray:
    """A host buffer of at least ``nbytes``: the spare one if it is big enough, else a new one."""
    with _spare_lock:
        spare = _spare.pop() if _spare else None
    if spare is not None and spare.nbytes >= nbytes:
        return spare
    del spare  # too small: freed before the new one is allocated
    return np.empty(max(nbytes, 1), dtype=np.uint8)


def _after_fork_in_child() -> None:
    global _spare_lock
    _spare_lock = threading.Lock()  # a writer thread the child does not have may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)


def release_buffers() -> None:
    """Free the host buffer kept from the last finished async save (the next one allocates afresh)."""
    with _spare_lock:
        _spare.clear()


class Snapshot:
    """The recorded components of one save; :attr:`nbytes` is what :meth:`copy_arrays` allocates."""

    def __init__(self, source: Checkpoint, recordings: dict[str, tuple[Adapter, RecordingWriter]],
                 scratch: Path) -> None:
        self.source = source
        self.recordings = recordings
        self.scratch = scratch
        self.extents = [extent for _, rec in recordings.values() for plan in rec.plans for extent in plan.extents]
        self.nbytes = sum(-(-extent.nbytes // ALIGNMENT) * ALIGNMENT for extent in self.extents)
        self._arena: np.ndarray | None = None

    def copy_arrays(self) -> None:
        """Copy every planned array extent into one host buffer the snapshot owns (the live arrays may
        change afterwards); the buffer is handed to the next snapshot when this one is released."""
        arena = self._arena = _buffer(self.nbytes)
        offset = 0
        for extent in self.extents:
            source = extent.array
            copy = arena[offset : offset + extent.nbytes].view(source.dtype).reshape(source.shape)
            np.copyto(copy, source, casting="no")
            extent.array = copy
            offset += -(-extent.nbytes // ALIGNMENT) * ALIGNMENT

    def checkpoint(self) -> Checkpoint:
        """The source checkpoint (its class and settings: a shallow copy) holding the recorded components."""
        replay = copy.copy(self.source)
        replay.save_components = None
        replay._components = {name: (None, ReplayAdapter(adapter.kind, adapter.kind_version, recording))
                              for name, (adapter, recording) in self.recordings.items()}
        # The options were applied while recording (the adapter chosen, the save arguments given); the
        # replay keeps only each component's sha256 choice, which the real writer applies.
        replay._options = {name: CheckpointOptions(sha256=recording.sha256)
                           for name, (_, recording) in self.recordings.items()}
        return replay

    def release(self) -> None:
        """Drop the copies and the temporary directory (the snapshot is spent); keep the buffer as the spare."""
        self.recordings, self.extents = {}, []
        shutil.rmtree(self.scratch, ignore_errors=True)
        arena, self._arena = self._arena, None
        if arena is not None:
            with _spare_lock:
                if not _spare or _spare[0].nbytes < arena.nbytes:
                    _spare[:] = [arena]


def record(checkpoint: Checkpoint, names: list[str], options: Mapping[str, CheckpointOptions]) -> Snapshot:
    """Run the adapters of ``names`` now against recording writers (no array byte is copied yet).

    ``options``: each component's merged options (``Checkpoint._save_options``): its adapter, its
    ``sha256``, the arguments of the object's own save method.
    """
    scratch = Path(tempfile.mkdtemp(prefix="opencheckpoint-snapshot-"))
    recordings: dict[str, tuple[Adapter, RecordingWriter]] = {}
    try:
        for name in names:
            value = checkpoint.components[name]
            adapter = checkpoint._adapter(name, options[name])
            chosen = options[name].sha256
            sha256 = checkpoint.sha256 if chosen is None else chosen
            writer = RecordingWriter(scratch / name, durable=checkpoint.durable, sha256=sha256, options=options[name])
            try:
                adapter.save(value, writer)
            except CheckpointError as exc:
                raise exc.at(file=f"component {name!r}") from None  # as Checkpoint.save reports it
            recordings[name] = (adapter, writer)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return Snapshot(checkpoint, recordings, scratch)


def save_planned(checkpoint: Checkpoint, target: Path, names: list[str], options: Mapping[str, CheckpointOptions],
                 progress: ProgressArg, **save_args: Any) -> Path:
    """``checkpoint.save`` of ``names`` with progress: every component is planned first, so the total is known."""
    check(progress)
    snapshot = record(checkpoint, names, options)
    try:
        with reporting(progress, snapshot.nbytes, f"saving {target.name}"):
            return snapshot.checkpoint().save(target, **save_args)
    finally:
        snapshot.release()


__all__ = ["RecordingWriter", "ReplayAdapter", "Snapshot", "record", "release_buffers", "save_planned"]
