"""The one save pipeline: plan, then write and commit, for every save whatever its options.

* :func:`save` (:meth:`Checkpoint.save <opencheckpoint.Checkpoint.save>`, and through it
  :class:`~opencheckpoint.run.Rotation` and :class:`~opencheckpoint.run.RunCheckpointer`):
  the target from the location (directory, archive, object store), :func:`.stages.plan`,
  then :func:`finish`.
* :func:`finish`: :func:`.stages.write` and :func:`.stages.commit` under the progress
  reporter, whose total is the plan's byte total; by this process alone, or as one rank
  of a collective save (:mod:`.collective`: every rank plans and writes, the ranks agree
  on the plan, the coordinator commits once).
* An async save (:mod:`.async_save`) is :func:`.stages.plan` and a snapshot now,
  :func:`finish` in a writer thread later.

>>> import tempfile, pathlib, numpy as np
>>> from opencheckpoint.adapters.base import TreeAdapter
>>> from opencheckpoint.options import CheckpointOptions
>>> spec = ComponentSpec("w", {"a": np.ones(2)}, TreeAdapter(), CheckpointOptions(), sha256=False)
>>> request = SaveRequest([spec], {"metadata": None, "checkpoint_id": None, "created_at": None, "producer": None})
>>> target = pathlib.Path(tempfile.mkdtemp()) / "ckpt"
>>> save(target, request) == target and (target / "manifest.json").is_file()
True
"""

from __future__ import annotations

from pathlib import Path

from ..format.errors import UnsupportedValue
from ..progress import ProgressArg, reporting
from ..progress import check as check_progress
from ..remote.fspath import FsPath
from ..sharding.collective import Collective
from ..sharding.sink import LocalSink
from . import stages
from .collective import save_collective
from .plan import ComponentSpec, SavePlan, SaveRequest
from .target import LocalTarget, Target

__all__ = ["ComponentSpec", "SaveRequest", "finish", "open_target", "plan_for", "save"]


def open_target(location: Path | FsPath, *, form: str, durable: bool, overwrite: bool) -> Target:
    """The target of a save to ``location``: local, or an object store (fsspec) in directory form."""
    if isinstance(location, FsPath):
        from .object_store import ObjectStoreTarget  # the remote writer loads only when a remote path is used

        return ObjectStoreTarget(location, form=form)
    return LocalTarget(location.absolute(), form=form, durable=durable, overwrite=overwrite)


def check_collective(target: Target) -> None:
    """A collective save writes the directory form, to a local (shared) path or an object store."""
    if target.form != "directory":
        raise UnsupportedValue("a collective save writes the directory form only", field="format")


def plan_for(location: Path | FsPath, request: SaveRequest) -> SavePlan:
    """The plan stage of a save by one process of ``request`` to ``location``."""
    target = open_target(location, form=request.form, durable=request.durable, overwrite=request.overwrite)
    return stages.plan(target, request)


def save(location: Path | FsPath, request: SaveRequest, *, collective: Collective | None = None,
         progress: ProgressArg = None) -> Path | FsPath:
    """Save ``request`` at ``location`` through the three stages; return where it was published."""
    check_progress(progress)
    if collective is not None:
        return _save_as_rank(location, request, collective, progress)
    planned = plan_for(location, request)
    try:
        return finish(planned, progress=progress)
    finally:
        planned.release()


def _save_as_rank(location: Path | FsPath, request: SaveRequest, collective: Collective,
                  progress: ProgressArg) -> Path | FsPath:
    """This rank's part of a collective save. Only the coordinator checks the target (it alone creates the
    staging directory); a rank whose plan fails reports it to the others instead of leaving them waiting."""
    target = open_target(location, form=request.form, durable=request.durable, overwrite=request.overwrite)
    check_collective(target)  # every rank refuses the same arguments alike, before any collective step
    try:
        planned = stages.plan(target, request, rank=collective.rank, world_size=collective.world_size,
                              check=collective.rank == 0)
    except Exception as exc:
        save_collective(target.location, None, collective, failure=exc)  # raises it after the others know
        raise
    try:
        return finish(planned, collective=collective, progress=progress)
    finally:
        planned.release()


def finish(planned: SavePlan, *, collective: Collective | None = None, progress: ProgressArg = None,
           ) -> Path | FsPath:
    """The write and commit stages of a planned save, reported to ``progress`` against the plan's total."""
    target = planned.target
    with reporting(progress, planned.nbytes, f"saving {target.location.name}"):
        if collective is not None:
            save_collective(target.location, planned, collective)
        else:
            with target.open() as staging:
                records = stages.write(planned, staging, LocalSink())
                stages.commit(planned, staging, records)
    return target.location
