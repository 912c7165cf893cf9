"""The collective save: every rank of a group writes its shards, the coordinator publishes once.

The writer procedure of format version 2 (spec ``opencheckpoint-v2.md``):

0. Every rank runs the plan stage (:func:`.stages.plan`): its adapters'
   writes recorded, its values checked; the coordinator also checks the target
   with the rules of a single-process save (R-PUB: nothing there, or a
   checkpoint it may replace). A rank's plan failure is reported in step 3.
1. The coordinator creates the staging directory and broadcasts its path and
   its plan's agreement (:meth:`.plan.SavePlan.agreement`: the save's
   arguments, components, adapters), or its error. Every rank compares its own
   plan's agreement with it: the ranks agree on the plan before any byte is written.
2. Every rank runs the write stage (:func:`.stages.write`) through its
   :class:`~opencheckpoint.sharding.sink.RankSink`: it writes its own
   ``shards/rank-NNNNN.bin`` into the staging directory; the coordinator also
   writes ``data.bin`` (tag-6 arrays) and any json or files component.
3. Every rank sends the coordinator its shard file entries and shard records as
   JSON bytes (or the error that stopped it).
4. The coordinator merges the records, checks each sharded array is tiled,
   writes ``tree.msgpack``, and runs the commit stage (:func:`.stages.commit`):
   ``manifest.json`` once, published atomically, exactly as a single-process save.
5. The coordinator broadcasts the outcome; every rank raises the error if any.

If any rank fails or dies before it has reported (step 3), nothing is published
(a rank dying after it reported does not stop publication; a coordinator dying
after its rename has published, though the others raise): the coordinator removes the
staging directory (if it dies itself, the directory is debris the next save
removes), the previous checkpoint at the target is untouched, and every surviving
rank raises a :class:`~opencheckpoint.format.errors.CheckpointError` (a
:class:`CollectiveError` when the group broke) within the collective's timeout.

To an object store (``s3://``; no file system is shared): every rank writes into
its own local scratch directory, and in step 2 each rank but the coordinator
uploads its shard files straight to their final object names under its own
writer marker (:class:`~opencheckpoint.remote.publish.RankUpload`) before it
reports. The coordinator's commit (step 4) uploads its own files and
``manifest.json`` last, so the manifest exists only once every rank's objects
do (spec §12.7, R-PUB-22). A rank told the save failed deletes its objects and
marker; a rank killed, or cut off from the outcome, leaves marked debris that
the next save to the target removes (R-PUB-24). ``memory://`` is one process's
memory: a collective save to it is refused unless every rank runs in the
coordinator's process.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..container.debris import process_token
from ..container.staged import StagedCheckpoint
from ..format.errors import CheckpointError, UnsupportedLocation, UnsupportedValue
from ..remote.fspath import FsPath
from ..sharding.collective import Collective, CollectiveError, error_from_json, error_to_json, from_json, to_json
from ..sharding.sink import RankSink
from ..tree.refusals import refuse
from . import stages
from .plan import SavePlan

if TYPE_CHECKING:
    from ..remote.publish import RankUpload

__all__ = ["save_collective"]

#: Arguments sent as digests of their JSON (large mappings): a differing one is named, its digest not shown.
_DIGESTS = frozenset({"metadata", "producer"})


def save_collective(target: Path | FsPath, planned: SavePlan | None, collective: Collective, *,
                    failure: BaseException | None = None) -> None:
    """Save on every rank of ``collective`` (each rank calls it); publish ``target`` once, or raise everywhere.

    ``planned``: this rank's plan (:func:`.stages.plan`), or None with the ``failure`` that stopped it; a rank
    whose plan's agreement differs from the coordinator's is refused like one saving to another path. A broken
    group (:class:`CollectiveError`: a rank died or stalled) is reported naming this rank and the target.
    """
    try:
        _save_collective(target, planned, collective, failure)
    except CollectiveError as exc:
        if not exc.message.startswith("rank "):
            exc.message = f"rank {collective.rank} of {collective.world_size}: {exc.message}"
        raise exc.at(file=str(target)) from exc.__cause__


def _save_collective(target: Path | FsPath, planned: SavePlan | None, collective: Collective,
                     failure: BaseException | None) -> None:
    rank = collective.rank
    upload: RankUpload | None = None
    outcome: dict[str, Any] | None = None
    with contextlib.ExitStack() as cleanup:  # closed in reverse: the sink, then the staging area
        staged, opening, refused = _open_staging(target, planned, failure, cleanup) if rank == 0 else (None, None,
                                                                                                         None)
        opened = from_json(collective.broadcast_bytes(None if opening is None else to_json(opening)),
                           "staging directory")
        if not opened["ok"]:
            raise refused or error_from_json(opened["error"])  # the coordinator re-raises its own error
        failure = failure or _differs(rank, target, planned, opened)
        sink: RankSink | None = None
        if failure is not None or planned is None:
            failure = failure or CollectiveError(f"rank {rank} has no plan to write")
            records: dict[str, dict[str, Any]] = {}
            report = {"ok": False, "error": error_to_json(failure, rank)}
        else:
            sink = _rank_sink(rank, planned, opened, collective.world_size, cleanup)
            records, failure, report = _write_rank(planned, sink)
            if failure is None and rank != 0 and isinstance(target, FsPath):
                upload, failure, report = _upload_rank(target, sink)
                if upload is not None:  # no outcome (the group broke): it cannot know whether the coordinator
                    cleanup.callback(upload.abandon)  # published, so its objects stay, marked, for R-PUB-24 clean-up
        gathered = collective.gather_bytes(to_json(report))
        if sink is not None and rank != 0:
            shutil.rmtree(sink.root, ignore_errors=True)  # its scratch: removed while the coordinator publishes
        if staged is not None:
            assert sink is not None and planned is not None  # the coordinator never differs from itself
            if gathered is None:
                raise CollectiveError("the coordinator received no reports from the gather")
            outcome, coordinator_failure = _finish(planned, staged, sink, records, gathered, failure)
            failure = failure or coordinator_failure
        outcome = from_json(collective.broadcast_bytes(None if outcome is None else to_json(outcome)), "outcome")
        if upload is not None:
            upload.settle(published=outcome.get("ok") is True)
    if failure is not None:
        raise failure
    assert outcome is not None
    if not outcome["ok"]:
        raise error_from_json(outcome["error"])


def _rank_sink(rank: int, planned: SavePlan, opened: dict[str, Any], world_size: int,
               cleanup: contextlib.ExitStack) -> RankSink:
    """This rank's sink: into the coordinator's staging directory (shared), or, to an object store, into a
    local scratch directory of its own (the coordinator's is its staging area); removed when the save ends."""
    remote = isinstance(planned.target.location, FsPath)
    if remote and rank != 0:
        staging = Path(tempfile.mkdtemp(prefix=f"opencheckpoint-rank-{rank:05d}-upload-"))
        cleanup.callback(shutil.rmtree, staging, ignore_errors=True)
    else:
        staging = Path(opened["staging"])
    sink = RankSink(rank, staging, durable=planned.request.durable and planned.target.durable, world_size=world_size)
    if rank != 0:
        cleanup.callback(shutil.rmtree, sink.root, ignore_errors=True)  # gone already, unless the gather failed
    cleanup.callback(sink.close)
    return sink


def _upload_rank(target: FsPath, sink: RankSink) -> tuple[RankUpload | None, BaseException | None, dict[str, Any]]:
    """Step 2 on an object store: this rank's shard files uploaded to their objects before it reports."""
    from ..remote.failures import storage_errors
    from ..remote.publish import RankUpload

    objects = [f"{rel}/{name}" for rel, tree in sink.report.items() for name in tree["files"]]
    upload = RankUpload(sink.staging, objects, target)
    try:
        with storage_errors(target, "save a checkpoint here"):
            upload.upload()
    except Exception as exc:  # uploaded objects withdrawn: reported, re-raised after the outcome
        return None, exc, {"ok": False, "error": error_to_json(exc, sink.rank)}
    return upload, None, {"ok": True, "trees": sink.report}


def _process_local(target: FsPath) -> bool:
    """Whether ``target``'s filesystem lives in this process's memory (fsspec's ``memory://``)."""
    protocols = target.fs.protocol if isinstance(target.fs.protocol, tuple) else (target.fs.protocol,)
    return "memory" in protocols


def _differs(rank: int, target: Path | FsPath, planned: SavePlan | None,
             opened: dict[str, Any]) -> CheckpointError | None:
    """The error of a rank whose path or plan's agreement is not the coordinator's, if they differ."""
    if opened["target"] != str(target):
        return UnsupportedValue(f"rank {rank} saves to {target}, the coordinator to {opened['target']}: "
                                "every rank of a collective save passes the same path", field="path")
    if isinstance(target, FsPath) and _process_local(target) and opened.get("process") != process_token():
        return UnsupportedLocation(f"{target.fs.protocol!r} is the memory of one process: a collective save over "
                                   "several processes needs a store every process reaches (s3://, gs://, ...)",
                                   file=str(target))
    arguments = {} if planned is None else planned.agreement()
    theirs = opened.get("arguments", {})
    names = sorted(name for name in set(arguments) | set(theirs) if arguments.get(name) != theirs.get(name))
    if "components" in names:
        names = ["components"]  # the per-component arguments differ too: the component names say it best
    if names:
        shown = ", ".join(f"a {name}= differing from the coordinator's" if name in _DIGESTS else
                          f"{name}={arguments.get(name)!r} (coordinator: {theirs.get(name)!r})" for name in names)
        return refuse(f"rank {rank} passes {shown}: every rank of a collective save passes the same "
                      "arguments", field=names[0])
    return None


def _open_staging(target: Path | FsPath, planned: SavePlan | None, failure: BaseException | None,
                  cleanup: contextlib.ExitStack,
                  ) -> tuple[StagedCheckpoint | None, dict[str, Any], BaseException | None]:
    """Coordinator, step 1: the entered staging checkpoint (left by ``cleanup``) and the message announcing it
    (with the plan's agreement), or the refusal (message and error): its plan's failure, or the target's."""
    if planned is None:
        assert failure is not None
        return None, {"ok": False, "error": error_to_json(failure, 0)}, failure
    area = planned.target.open()
    try:
        staged = cleanup.enter_context(area)
    except Exception as exc:  # the other ranks wait for this message: they get the error instead
        if isinstance(area, StagedCheckpoint):
            area.__exit__(None, None, None)  # what a failed entry left (its working name) goes
        return None, {"ok": False, "error": error_to_json(exc, 0)}, exc
    assert isinstance(staged, StagedCheckpoint)
    return staged, {"ok": True, "staging": str(staged.directory), "target": str(target),
                    "arguments": planned.agreement(), "process": process_token()}, None


def _write_rank(planned: SavePlan, sink: RankSink,
                ) -> tuple[dict[str, dict[str, Any]], BaseException | None, dict[str, Any]]:
    """Step 2: the write stage through ``sink``; the records, the error if any, and the report for rank 0."""
    try:
        records = stages.write(planned, None, sink, root=sink.root)
        sink.note_records(records)
    except Exception as exc:  # reported to the coordinator, then re-raised here after the outcome
        return {}, exc, {"ok": False, "error": error_to_json(exc, sink.rank)}
    return records, None, {"ok": True, "trees": sink.report}


def _finish(planned: SavePlan, staged: StagedCheckpoint, sink: RankSink, records: dict[str, dict[str, Any]],
            gathered: list[bytes], failure: BaseException | None) -> tuple[dict[str, Any], BaseException | None]:
    """Coordinator, steps 4 and 5: commit when every rank succeeded; the outcome to broadcast, and its error."""
    reports = [from_json(data, "rank report") for data in gathered]
    failed = next((report for report in reports if not report.get("ok")), None)
    if failed is not None:
        return {"ok": False, "error": failed["error"]}, None
    if failure is not None:
        return {"ok": False, "error": error_to_json(failure, 0)}, None
    try:
        sink.finish(records, [report["trees"] for report in reports])
        stages.commit(planned, staged, records, sink.unsynced)
    except Exception as exc:
        return {"ok": False, "error": error_to_json(exc, 0)}, exc
    return {"ok": True}, None
