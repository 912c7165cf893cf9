"""The three stages every save runs: :func:`plan`, :func:`write`, :func:`commit`.

* :func:`plan` checks the target (nothing on disk changes before it passes),
  then runs each component's adapter against a recording writer: values the
  format cannot hold are refused here, before any byte is written; the
  plan knows its byte total.
* :func:`write` writes every planned component into the target's staging
  area, trees through the save's tree sink; returns the component records.
* :func:`commit` builds the manifest from the records and hands it to the
  target, which writes it last and publishes.

:mod:`.pipeline` strings them together for a save by one process, an async
save (plan now, write and commit in a thread) and, through :mod:`.collective`,
a collective save (every rank plans and writes, the coordinator commits).
Callers look the stages up on this module at call time, so a test can spy
on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..adapters.base import ComponentWriter
from ..container.publish import fault_point
from ..format.errors import CheckpointError
from ..sharding.sink import LocalSink
from ..tree.sink import TreeSink, planning
from .plan import SavePlan, SaveRequest, save_manifest
from .recording import ComponentPlan, RecordingWriter
from .target import Staging, Target

__all__ = ["commit", "plan", "write"]

Records = dict[str, dict[str, Any]]


def plan(target: Target, request: SaveRequest, *, rank: int = 0, world_size: int = 1,
         check: bool = True) -> SavePlan:
    """Check ``target`` (unless ``check`` is False: a collective save's other ranks), then record what each
    component's adapter writes. ``rank`` and ``world_size``: this process's place in a collective save (its
    shards; what adapters may leave to other ranks, :func:`~opencheckpoint.tree.sink.saving_ranks`)."""
    if check:
        target.check()
    scratch = target.scratch()
    planned: list[ComponentPlan] = []
    try:
        with planning(world_size):
            for spec in request.components:
                writer = RecordingWriter(scratch / "components" / spec.name, durable=request.durable,
                                         sha256=spec.sha256, options=spec.options, rank=rank)
                try:
                    spec.adapter.save(spec.value, writer)
                except CheckpointError as exc:
                    # The component being written is the "file" a save error is about; the field stays the
                    # location inside its value (e.g. ``$.layer1.w``).
                    raise exc.at(file=f"component {spec.name!r}") from None
                planned.append(ComponentPlan(spec.name, spec.adapter.kind, spec.adapter.kind_version, writer))
    except BaseException:
        SavePlan(target, request, planned, scratch).release()
        raise
    return SavePlan(target, request, planned, scratch)


def write(planned: SavePlan, staging: Staging | None, sink: TreeSink, root: Path | None = None) -> Records:
    """Write every planned component into ``staging`` (or below ``root``); their records by name.

    ``sink`` writes the trees: a :class:`~opencheckpoint.sharding.sink.LocalSink` for one process, a
    rank's :class:`~opencheckpoint.sharding.sink.RankSink` in a collective save (``root``: the rank's own).
    """
    base = root if staging is None or root is not None else staging.directory
    assert base is not None, "write() needs a staging area or a root"
    archive = staging.archive if staging is not None and root is None else None
    records: Records = {}
    for component in planned.components:
        name = component.name
        writer = ComponentWriter(base / "components" / name, durable=planned.request.durable,
                                 sha256=component.recording.sha256, archive=archive,
                                 member_prefix=f"components/{name}")
        fault_point(f"write-component:{name}")
        try:
            component.replay(writer, sink)
        except CheckpointError as exc:
            raise exc.at(file=f"component {name!r}") from None
        records[name] = writer.record(component.kind, component.kind_version, f"components/{name}")
        if archive is not None and staging is not None:
            staging.pack({name: records[name]})  # files an adapter wrote itself, in manifest order
        if isinstance(sink, LocalSink) and writer.directory in sink.sharded:
            records[name]["kind_version"] = 2  # a tree with sharded arrays (format version 2)
    return records


def commit(planned: SavePlan, staging: Staging, records: Records, unsynced: Sequence[Path] = ()) -> None:
    """Write the manifest of ``records`` last and publish (``unsynced``: files the commit fsyncs with it)."""
    planned.target.commit(staging, save_manifest(records, planned.fields), unsynced)
