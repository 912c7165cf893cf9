"""Collective saves to an object store (``memory://`` with thread ranks: one process, so one memory): each rank
uploads its own shard objects, the coordinator writes ``manifest.json`` last, a failed rank means no manifest.

The multi-process, multi-"host" form over a moto S3 server is ``test_multihost.py``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from shard_helpers import ThreadRank, ThreadWorld

from opencheckpoint import Checkpoint, read_component, validate
from opencheckpoint.format.errors import CheckpointError
from opencheckpoint.remote import publish
from opencheckpoint.remote.fspath import FsPath
from opencheckpoint.sharding import LocalShard, ShardedValue
from opencheckpoint.write import object_store

pytest.importorskip("fsspec")

FULL = np.arange(60, dtype=np.float32).reshape(6, 10)


def _rank_state(rank: int, size: int) -> dict[str, Any]:
    """Rank r holds a band of rows; every rank has the same plain array."""
    bounds = np.linspace(0, 6, size + 1).astype(int)
    start, stop = int(bounds[rank]), int(bounds[rank + 1])
    return {"band": ShardedValue((6, 10), "float32", [LocalShard((start, 0), FULL[start:stop])]),
            "plain": np.arange(4)}


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process's temporary directory (every rank's local scratch), to show nothing is left in it."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


@pytest.fixture
def uploads(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The objects each :class:`RankUpload` uploaded (one list per rank's upload)."""
    seen: list[list[str]] = []
    original = publish.RankUpload.upload

    def upload(self: publish.RankUpload) -> None:
        seen.append(list(self.objects))
        original(self)

    monkeypatch.setattr(publish.RankUpload, "upload", upload)
    return seen


def _objects(memfs: Any, url: str) -> list[str]:
    root = url.removeprefix("memory://")
    return sorted(name.removeprefix(root.rstrip("/") + "/") for name in memfs.find(root))


def test_three_ranks_upload_their_own_shards_and_the_coordinator_publishes_the_manifest_last(
        memfs: Any, mem_url: str, scratch: Path, uploads: list[list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    cls = type(memfs)  # the class: the save resolves the URL to a filesystem instance of its own
    put, pipe = cls.put_file, cls.pipe_file
    monkeypatch.setattr(cls, "put_file", lambda fs, local, path, **kw: (order.append(path), put(fs, local, path, **kw)))
    monkeypatch.setattr(cls, "pipe_file", lambda fs, path, data, **kw: (order.append(path), pipe(fs, path, data, **kw)))
    target = f"{mem_url}/step-1"

    def task(group: ThreadRank) -> Any:
        return Checkpoint(state=_rank_state(group.rank, 3), config={"lr": 1}).save(target, process_group=group)

    results = ThreadWorld(3).run(task)
    assert all(isinstance(r, FsPath) and str(r) == target for r in results), results
    # ranks 1 and 2 each uploaded their own shard object, under their own writer marker
    assert sorted(uploads) == [[f"components/state/shards/rank-0000{r}.bin"] for r in (1, 2)]
    assert order[-1].endswith("/step-1/manifest.json")  # the commit point, after every rank's objects
    assert sum(path.endswith("manifest.json") for path in order) == 1
    assert _objects(memfs, mem_url) == [f"step-1/{rel}" for rel in (
        "components/config/value.json", "components/state/data.bin",
        *(f"components/state/shards/rank-0000{r}.bin" for r in range(3)),
        "components/state/tree.msgpack", "manifest.json")]  # no writer marker left
    manifest = json.loads(memfs.cat_file(target.removeprefix("memory://") + "/manifest.json"))
    assert manifest["format_version"] == 2
    stored = read_component(target, "state")
    np.testing.assert_array_equal(stored["band"], FULL)
    np.testing.assert_array_equal(stored["plain"], np.arange(4))
    assert validate(target).ok
    assert list(scratch.iterdir()) == []  # every rank's local scratch removed


def test_a_rank_whose_upload_fails_leaves_no_manifest_and_the_others_withdraw_their_objects(
        memfs: Any, mem_url: str, scratch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    previous = Checkpoint(state={"b": np.arange(3)}).save(f"{mem_url}/step-1")
    before = _objects(memfs, mem_url)
    put_objects = publish._put_objects

    def failing(staged: Path, objects: list[str], target: FsPath, uploaded: list[str], marker: FsPath) -> None:
        put_objects(staged, objects, target, uploaded, marker)  # rank 2's object is there, then the store fails
        if any("rank-00002" in rel for rel in objects):
            raise OSError(5, "the store went away")

    monkeypatch.setattr(publish, "_put_objects", failing)
    results = ThreadWorld(3).run(lambda group: Checkpoint(state=_rank_state(group.rank, 3)).save(
        f"{mem_url}/step-2", process_group=group))
    assert all(isinstance(r, CheckpointError) for r in results), results
    assert all("rank 2" in str(r) and "the store went away" in str(r) for r in results[:2]), results
    assert _objects(memfs, mem_url) == before  # no manifest, no shard object, no marker of step-2
    assert read_component(previous, "state")["b"].tolist() == [0, 1, 2]
    assert list(scratch.iterdir()) == []


def test_a_coordinator_that_cannot_publish_makes_every_rank_withdraw_its_objects(
        memfs: Any, mem_url: str, scratch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def taken(*_: object) -> None:
        raise OSError(28, "No space left on device")  # the coordinator's manifest upload fails

    monkeypatch.setattr(object_store, "upload_checkpoint", lambda staged, target: taken())
    results = ThreadWorld(2).run(lambda group: Checkpoint(state=_rank_state(group.rank, 2)).save(
        f"{mem_url}/step-1", process_group=group))
    assert all(isinstance(r, CheckpointError) and "No space left" in str(r) for r in results), results
    assert _objects(memfs, mem_url) == []  # rank 1's uploaded shard withdrawn, its marker too


def test_a_collective_save_to_the_archive_form_of_a_url_is_refused_on_every_rank(mem_url: str) -> None:
    results = ThreadWorld(2).run(lambda group: Checkpoint(state=_rank_state(group.rank, 2)).save(
        f"{mem_url}/c", process_group=group, format="archive"))
    assert all(isinstance(r, CheckpointError) and "directory form" in str(r) for r in results), results


def test_objects_of_a_rank_cut_off_from_the_outcome_stay_until_the_next_save_removes_them_by_its_marker(
        memfs: Any, mem_url: str, tmp_path: Path) -> None:
    """No outcome (the group broke): the rank cannot know whether the manifest was written, so its objects and
    marker stay; once its writer has ended, the next save to the prefix deletes exactly them (R-PUB-24)."""
    (tmp_path / "shards").mkdir()
    (tmp_path / "shards/rank-00001.bin").write_bytes(b"shard")
    target = FsPath.from_url(f"{mem_url}/step-3")
    part = publish.RankUpload(tmp_path, ["shards/rank-00001.bin"], target)
    part.upload()
    part.abandon()
    left = _objects(memfs, mem_url)
    assert "step-3/shards/rank-00001.bin" in left and any(".step-3.oc-staging-" in name for name in left), left
    Checkpoint(state={"b": np.arange(2)}).save(str(target))  # its check removes the ended writer's debris
    assert _objects(memfs, mem_url) == ["step-3/components/state/data.bin", "step-3/components/state/tree.msgpack",
                                        "step-3/manifest.json"]
