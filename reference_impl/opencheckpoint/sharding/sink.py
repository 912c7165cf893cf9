"""The tree sinks of a save: what each rank writes of a tree, and what the coordinator finishes.

:class:`LocalSink` serves a single-process save: every tree is written whole at
once (:func:`~opencheckpoint.tree.encode.write_plan`), and the sink remembers the
components holding sharded arrays (they are ``tree`` kind_version 2).

:class:`RankSink` serves one rank of a collective save. Every rank writes its own
shard data file; the coordinator also writes ``data.bin`` (tag-6 arrays, that
is plain tensors, are written by the coordinator only) and keeps the plan, whose
``tree.msgpack`` it writes once every rank's shard records are in
(:meth:`RankSink.finish`). Other ranks run the adapters into a private scratch
directory (a json or files component is the coordinator's to write), mapped back
to the staging directory for their shard files.
"""

from __future__ import annotations

import base64
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgpack

from ..container.publish import fsync_together
from ..tree.encode import write_plan, write_small_file
from ..tree.refusals import refuse
from ..tree.shard_plan import SHARDED_ARRAY_TAG, merge_records
from ..tree.skeleton import first_difference, skeleton_digest, value_checksums

if TYPE_CHECKING:
    from ..container.archive_writer import ArchiveWriter
    from ..tree.encode import TreePlan

__all__ = ["LocalSink", "RankSink"]


class LocalSink:
    """Writes every tree at once, as one process saving alone; notes which components hold sharded arrays."""

    rank = 0

    def __init__(self) -> None:
        #: Component directories whose tree holds a sharded array.
        self.sharded: set[Path] = set()

    def write_tree(self, plan: TreePlan, directory: Path, *, durable: bool, sha256: bool,
                   archive: ArchiveWriter | None, member_prefix: str) -> dict[str, dict[str, Any]]:
        if plan.shards is not None:
            self.sharded.add(directory)
        return write_plan(plan, directory, durable=durable, sha256=sha256, archive=archive,
                          member_prefix=member_prefix)


class RankSink:
    """One rank's part of the trees of a collective save into ``staging``."""

    #: Trees planned under this sink belong to a collective save (per-rank values are planned per rank).
    collective = True

    def __init__(self, rank: int, staging: Path, *, durable: bool, world_size: int = 1) -> None:
        self.rank = rank
        #: The number of ranks of the collective save (:func:`~opencheckpoint.tree.sink.saving_ranks`).
        self.world_size = world_size
        self.staging = staging
        self.durable = durable
        #: Where this rank's adapters write: the staging directory itself on the coordinator, a private
        #: temporary directory elsewhere (outside the staging directory, which only the coordinator creates).
        self.root = staging if rank == 0 else Path(tempfile.mkdtemp(prefix=f"opencheckpoint-rank-{rank:05d}-"))
        #: component path ("components/NAME") -> (plan, directory, sha256) awaiting tree.msgpack (coordinator).
        self.pending: dict[str, tuple[TreePlan, Path, bool]] = {}
        #: component path -> {"files": this rank's shard file entries, "sharded": records} (sent to rank 0).
        self.report: dict[str, dict[str, Any]] = {}
        #: Coordinator: the fsyncs of its data files, running while it waits for the reports.
        self._syncing: list[Future[None]] = []
        self._fsyncs: ThreadPoolExecutor | None = None
        #: Coordinator: the tree.msgpack files :meth:`finish` wrote, fsynced by the commit with the manifest.
        self.unsynced: list[Path] = []
        #: Coordinator: each component path's planned tree (names the value a rank's differs in).
        self._roots: dict[str, Any] = {}

    def write_tree(self, plan: TreePlan, directory: Path, *, durable: bool, sha256: bool,
                   archive: ArchiveWriter | None, member_prefix: str) -> dict[str, dict[str, Any]]:
        if archive is not None:
            raise refuse("a collective save writes the directory form only (format='directory')")
        rel = directory.relative_to(self.root).as_posix()
        real = self.staging / rel
        if rel in self.report:
            raise refuse(f"{rel} was written twice in one save")
        if self.rank != 0 and plan.shards is not None and plan.shards.data.extents:
            _make_below(self.staging, real / "shards")
        if self.rank == 0:
            real.mkdir(parents=True, exist_ok=True)
            self.pending[rel] = (plan, real, sha256)
        entries = self._write_own(plan, real, durable=durable, sha256=sha256)
        self.report[rel] = {"files": {name: entry for name, entry in entries.items() if name != "data.bin"},
                            "skeleton": skeleton_digest(plan.root), "values": value_checksums(plan),
                            "sharded": [] if plan.shards is None else plan.shards.summary(),
                            "per_rank": [pack_node(node[2]["values"][0]) for node in plan.per_rank]}
        if self.rank == 0:
            self._roots[rel] = plan.root
        return entries

    def note_records(self, records: dict[str, dict[str, Any]]) -> None:
        """Add the components no tree sink saw (json, files: the coordinator's alone are stored) to the report,
        by the CRC-32C of each of their files, so that a value differing per rank is refused, not dropped."""
        for record in records.values():
            if record["path"] not in self.report:
                self.report[record["path"]] = {"files": {}, "skeleton": record["kind"], "sharded": [],
                                               "values": {rel: entry["crc32c"] for rel, entry in
                                                          sorted(record["files"].items())}}

    def _write_own(self, plan: TreePlan, real: Path, *, durable: bool, sha256: bool) -> dict[str, dict[str, Any]]:
        """This rank's shard file (and, on the coordinator, ``data.bin``); their file entries.

        Another rank fsyncs its file before it reports. The coordinator's files
        are fsynced in a helper thread while it waits for the others' reports
        (joined by :meth:`finish`): its own disk flush is no longer a step after
        the last report.
        """
        early = self.rank == 0 and durable
        entries = {} if plan.shards is None else plan.shards.write(real, durable=durable and not early,
                                                                  sha256=sha256)
        if self.rank == 0:
            entries = {"data.bin": plan.write_data(real / "data.bin", durable=False, sha256=sha256), **entries}
        if early:
            self._sync_soon([real / name for name in entries])
        return entries

    def _sync_soon(self, paths: list[Path]) -> None:
        """fsync ``paths`` in the helper thread; at interpreter exit, when no thread may start, here and now."""
        if self._fsyncs is None:
            self._fsyncs = ThreadPoolExecutor(1, "oc-fsync-early")
        try:
            self._syncing.append(self._fsyncs.submit(fsync_together, paths))
        except RuntimeError:  # concurrent.futures takes no work at exit (an async save finishing then)
            fsync_together(paths)

    def close(self) -> None:
        """Wait for the coordinator's early fsyncs (their errors are :meth:`finish`'s to raise)."""
        if self._fsyncs is not None:
            self._fsyncs.shutdown(wait=True)

    def finish(self, records: dict[str, dict[str, Any]], reports: list[dict[str, Any]]) -> None:
        """Coordinator: merge every rank's shard records, write each ``tree.msgpack``, complete ``records``.

        ``reports`` holds every rank's :attr:`report`, in rank order; each tree
        component's record gains the other ranks' shard files and, when it holds
        a sharded array, ``kind_version`` 2.
        """
        by_path = {record["path"]: record for record in records.values()}
        _check_same_trees(reports)
        _check_same_values(reports, self._roots)
        for syncing in self._syncing:
            syncing.result()
        for rel, (plan, real, sha256) in self.pending.items():
            theirs = [report[rel] for report in reports[1:]]
            if plan.shards is not None:
                merge_records(plan.shards.nodes, [t["sharded"] for t in theirs], range(1, len(reports)))
            elif any(t["sharded"] for t in theirs):
                raise refuse(f"other ranks saved sharded arrays in {rel}, the coordinator none: every "
                                       "rank must save the same tree")
            per_rank_shards = _merge_per_rank(plan.per_rank, [t["per_rank"] for t in theirs])
            tree = write_small_file(real / "tree.msgpack", plan.pack(), durable=False, sha256=sha256)
            self.unsynced.append(real / "tree.msgpack")
            record = by_path[rel]
            files = {"tree.msgpack": tree, **record["files"]}
            for their in theirs:
                files.update(their["files"])
            record["files"] = {key: files[key] for key in sorted(files, key=_file_order)}
            if (plan.shards is not None and plan.shards.nodes) or per_rank_shards:
                record["kind_version"] = 2


def _check_same_trees(reports: list[dict[str, Any]]) -> None:
    """Refuse unless every rank wrote the coordinator's trees (``reports[0]``), each with its structure.

    The coordinator writes the one ``tree.msgpack`` and the plain arrays of each
    tree: a tree, a key or an array shape only another rank has would be dropped
    in silence, one only the coordinator has stored as if every rank had it.
    """
    ours = reports[0]
    for rank, report in enumerate(reports[1:], start=1):
        if set(report) != set(ours):
            extra, missing = sorted(set(report) - set(ours)), sorted(set(ours) - set(report))
            raise refuse(f"rank {rank} wrote the trees of {sorted(report)}, the coordinator of "
                                   f"{sorted(ours)} (rank {rank} has {extra} more, {missing} fewer): every rank "
                                   "must save the same components")
        for rel, tree in report.items():
            if tree["skeleton"] != ours[rel]["skeleton"]:
                raise refuse(f"rank {rank} saved a tree in {rel} whose structure (keys, node kinds, "
                                       "array dtypes or shapes) differs from the coordinator's: every rank must "
                                       "save the same tree", file=rel)


def pack_node(node: Any) -> str:
    """A planned tree node (a rank's per-rank value, its shard checksums filled in) as JSON-safe text:
    base64 of its msgpack bytes (data, never code: spec R-SHD-17)."""
    return base64.b64encode(msgpack.packb(node, use_bin_type=True, strict_types=False)).decode("ascii")


def _merge_per_rank(nodes: list[list[Any]], theirs: list[list[str]]) -> bool:
    """Coordinator: each per-rank value node gets every rank's value, in rank order, and ``world_size``.
    Whether any of them holds a sharded array (the component is then ``kind_version`` 2)."""
    sharded = False
    for index, node in enumerate(nodes):
        values = [node[2]["values"][0]]
        values += [msgpack.unpackb(base64.b64decode(packed[index]), raw=False, strict_map_key=False)
                   for packed in theirs]
        node[2]["world_size"], node[2]["values"] = len(values), values
        sharded = sharded or any(_holds_sharded(value) for value in values)
    return sharded


def _holds_sharded(node: Any) -> bool:
    if isinstance(node, dict):
        return any(_holds_sharded(value) for value in node.values())
    if isinstance(node, list):
        if node and isinstance(node[0], msgpack.ExtType) and node[0].code == SHARDED_ARRAY_TAG:
            return True
        return any(_holds_sharded(item) for item in node)
    return False


def _check_same_values(reports: list[dict[str, Any]], roots: dict[str, Any]) -> None:
    """Refuse unless every rank's values outside its shards are the coordinator's (``reports[0]``).

    Only the coordinator's plain arrays, scalars and json or files components are stored: a value that
    differs per rank would be saved with rank 0's value, the others' lost in silence (R-SHD-21).
    """
    ours = reports[0]
    for rank, report in enumerate(reports[1:], start=1):
        for rel, tree in report.items():
            theirs, mine = tree.get("values"), ours[rel].get("values")
            if theirs == mine:
                continue
            if isinstance(mine, dict):  # a json or files component: its files' checksums
                where = next((name for name in sorted(set(mine) | set(theirs or {}))
                              if mine.get(name) != (theirs or {}).get(name)), None)
                what, field = f"the {rel.split('/', 1)[-1]!r} component ({where})", None
            else:
                field = first_difference(roots[rel], mine, theirs) if rel in roots else None
                what = f"the value at {field} of {rel}"
            raise refuse(f"rank {rank} saved {what} differing from the coordinator's: only rank 0's plain values "
                         "(scalars, plain arrays and tensors, json and files components) are stored, so every "
                         "rank must save the same ones; wrap a value that differs per rank in "
                         "opencheckpoint.PerRank(...) to store each rank's own, or save it as a sharded array "
                         "(a DTensor)", field=field, file=rel)


def _make_below(staging: Path, directory: Path) -> None:
    """Create ``directory`` below ``staging`` without ever creating ``staging`` itself.

    When the coordinator has given up and removed the staging directory, a late
    rank fails here instead of bringing it back (which would leave debris).
    """
    current = staging
    for name in directory.relative_to(staging).parts:
        current = current / name
        current.mkdir(exist_ok=True)  # FileNotFoundError once the staging directory is gone


def _file_order(key: str) -> tuple[int, str]:
    """tree.msgpack, data.bin, then the shard files by rank (the order of the reference writer's inventory)."""
    return ({"tree.msgpack": 0, "data.bin": 1}.get(key, 2), key)
