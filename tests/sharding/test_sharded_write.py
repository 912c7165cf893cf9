"""Writing sharded arrays: tag-10 nodes, per-rank shard files, format version 2, the collective save engine.

The files are read back with :func:`shard_helpers.read_raw` (manifest, msgpack and
CRCs read directly), so these tests check the writer against the format itself.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from shard_helpers import ThreadRank, ThreadWorld, read_raw

from opencheckpoint import Checkpoint
from opencheckpoint.format.errors import TargetExists, UnsupportedValue
from opencheckpoint.sharding import CollectiveError, LocalCollective, LocalShard, ShardedValue

FULL = np.arange(60, dtype=np.float32).reshape(6, 10)


def rows(start: int, stop: int) -> LocalShard:
    return LocalShard((start, 0), FULL[start:stop])


def manifest(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_bytes())


def test_a_sharded_value_is_written_as_tag_10_in_a_rank_file_and_makes_format_version_2(tmp_path: Path) -> None:
    value = ShardedValue((6, 10), "float32", [rows(0, 4), rows(4, 6)])
    path = Checkpoint(state={"w": value, "b": np.arange(3)}, config={"lr": 1}).save(tmp_path / "c")
    body = manifest(path)
    state = body["components"]["state"]
    assert body["format_version"] == 2 and state["kind_version"] == 2
    assert list(state["files"]) == ["tree.msgpack", "data.bin", "shards/rank-00000.bin"]
    assert body["components"]["config"]["kind_version"] == 1
    stored = read_raw(path, "state")
    np.testing.assert_array_equal(stored["w"], FULL)
    np.testing.assert_array_equal(stored["b"], np.arange(3))


def test_without_sharded_values_a_save_stays_format_version_1(tmp_path: Path) -> None:
    path = Checkpoint(state={"b": np.arange(3)}).save(tmp_path / "c")
    body = manifest(path)
    assert body["format_version"] == 1 and body["components"]["state"]["kind_version"] == 1
    assert list(body["components"]["state"]["files"]) == ["tree.msgpack", "data.bin"]


def test_an_empty_sharded_array_has_no_shard_records_and_no_rank_file(tmp_path: Path) -> None:
    value = ShardedValue((0, 10), "float32", [LocalShard((0, 0), np.zeros((0, 10), np.float32))])
    path = Checkpoint(state={"e": value}).save(tmp_path / "c")
    state = manifest(path)["components"]["state"]
    assert state["kind_version"] == 2 and list(state["files"]) == ["tree.msgpack", "data.bin"]
    assert read_raw(path, "state")["e"].shape == (0, 10)


@pytest.mark.parametrize(("shards", "message"), [
    ([rows(0, 4)], "some region was written by no rank"),
    ([rows(0, 4), rows(3, 6)], "overlap"),
    ([rows(0, 6), LocalShard((0, 0), FULL + 1)], "replicas"),
    ([LocalShard((4, 0), FULL[:4])], "outside the global shape"),
    ([LocalShard((0, 0), FULL.astype(np.float64))], "dtype"),
])
def test_shards_that_do_not_tile_the_array_are_refused_before_publication(
        tmp_path: Path, shards: list[LocalShard], message: str) -> None:
    previous = Checkpoint(state={"b": np.arange(3)}).save(tmp_path / "c")
    before = (previous / "manifest.json").read_bytes()
    with pytest.raises(UnsupportedValue, match=message) as caught:
        Checkpoint(state={"w": ShardedValue((6, 10), "float32", shards)}).save(tmp_path / "c")
    assert caught.value.field is not None and caught.value.field.startswith("$.w")
    assert (previous / "manifest.json").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["c"]


def test_replicas_with_equal_bytes_are_kept_and_tile(tmp_path: Path) -> None:
    value = ShardedValue((6, 10), "float32", [rows(0, 6), LocalShard((0, 0), FULL.copy())])
    path = Checkpoint(state={"w": value}).save(tmp_path / "c")
    np.testing.assert_array_equal(read_raw(path, "state")["w"], FULL)


def test_the_archive_form_refuses_sharded_values(tmp_path: Path) -> None:
    value = ShardedValue((6, 10), "float32", [rows(0, 6)])
    with pytest.raises(UnsupportedValue, match="directory form"):
        Checkpoint(state={"w": value}, format="archive").save(tmp_path / "c.ocp")
    assert not os.listdir(tmp_path)


def test_a_local_collective_save_writes_the_same_bytes_as_a_plain_save(tmp_path: Path) -> None:
    def save(path: Path, group: LocalCollective | None) -> Path:
        value = ShardedValue((6, 10), "float32", [rows(0, 2), rows(2, 6)])
        return Checkpoint(state={"w": value, "b": np.arange(3)}, config={"x": 1}).save(
            path, checkpoint_id="fixed", created_at="2026-01-01T00:00:00Z", process_group=group)

    plain, collective = save(tmp_path / "a", None), save(tmp_path / "b", LocalCollective())
    files = sorted(p.relative_to(plain).as_posix() for p in plain.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(collective).as_posix() for p in collective.rglob("*") if p.is_file())
    for name in files:
        assert (plain / name).read_bytes() == (collective / name).read_bytes(), name


def _rank_state(rank: int, size: int) -> dict:
    """Rank r holds a band of rows and a replica written by rank 0 only; every rank has the plain array."""
    bounds = np.linspace(0, 6, size + 1).astype(int)
    band = ShardedValue((6, 10), "float32", [rows(int(bounds[rank]), int(bounds[rank + 1]))])
    replica = ShardedValue((6, 10), "float32", [rows(0, 6)] if rank == 0 else [])
    return {"band": band, "replica": replica, "plain": np.arange(4)}


def test_three_ranks_write_their_own_shard_files_and_the_coordinator_publishes_once(tmp_path: Path) -> None:
    target = tmp_path / "c"

    def task(group: ThreadRank) -> Path:
        return Checkpoint(state=_rank_state(group.rank, 3), config={"r": 1}).save(target, process_group=group)

    assert ThreadWorld(3).run(task) == [target] * 3
    state = manifest(target)["components"]["state"]
    assert list(state["files"]) == ["tree.msgpack", "data.bin"] + [f"shards/rank-0000{r}.bin" for r in range(3)]
    stored = read_raw(target, "state")
    np.testing.assert_array_equal(stored["band"], FULL)
    np.testing.assert_array_equal(stored["replica"], FULL)
    np.testing.assert_array_equal(stored["plain"], np.arange(4))  # plain arrays: the coordinator's (all equal)
    assert json.loads((target / "components/config/value.json").read_bytes()) == {"r": 1}
    assert sorted(os.listdir(tmp_path)) == ["c"]  # no staging or scratch directory left


def test_an_error_on_one_rank_is_raised_on_every_rank_and_nothing_is_published(tmp_path: Path) -> None:
    previous = Checkpoint(state={"b": np.arange(3)}).save(tmp_path / "c")
    before = (previous / "manifest.json").read_bytes()

    def task(group: ThreadRank) -> Path:
        state = _rank_state(group.rank, 3)
        if group.rank == 2:
            state["bad"] = object()
        return Checkpoint(state=state).save(previous, process_group=group)

    results = ThreadWorld(3).run(task)
    assert all(isinstance(r, UnsupportedValue) for r in results), results
    assert "rank 2" in str(results[0]) and "rank 2" in str(results[1]) and "$.bad" in str(results[0])
    assert (previous / "manifest.json").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["c"]


def test_a_rank_that_leaves_the_group_is_reported_by_the_others_naming_their_rank_and_the_target(
        tmp_path: Path) -> None:
    """A rank that dies mid-save breaks the group (gloo's sockets; the threads' barrier here): every other rank
    raises CollectiveError saying which rank it is and which checkpoint it was saving, not the transport's
    message alone; nothing is published."""
    target = tmp_path / "c"

    def task(group: ThreadRank) -> Path:
        if group.rank == 1:
            raise SystemExit("rank 1 dies")  # leaves without reporting: the others' next exchange breaks
        return Checkpoint(state=_rank_state(group.rank, 3)).save(target, process_group=group)

    results = ThreadWorld(3).run(task)
    for rank in (0, 2):
        assert isinstance(results[rank], CollectiveError), results
        assert results[rank].file == str(target), results[rank]
        assert str(results[rank]).startswith(f"CollectiveError: {target}: rank {rank} of 3: "), results[rank]
    assert not target.exists()


def test_a_refused_target_is_reported_on_every_rank(tmp_path: Path) -> None:
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("not a checkpoint")
    results = ThreadWorld(2).run(lambda group: Checkpoint(state=_rank_state(group.rank, 2)).save(
        target, process_group=group))
    assert all(isinstance(r, TargetExists) for r in results), results
    assert sorted(os.listdir(target)) == ["notes.txt"]


def test_ranks_saving_to_different_paths_are_refused(tmp_path: Path) -> None:
    results = ThreadWorld(2).run(lambda group: Checkpoint(state=_rank_state(group.rank, 2)).save(
        tmp_path / f"c{group.rank}", process_group=group))
    assert all(isinstance(r, UnsupportedValue) for r in results), results
    assert "same path" in str(results[1]) and not os.listdir(tmp_path)


def test_ranks_saving_different_trees_are_refused(tmp_path: Path) -> None:
    def task(group: ThreadRank) -> Path:
        state = _rank_state(group.rank, 2)
        if group.rank == 1:
            del state["replica"]
        return Checkpoint(state=state).save(tmp_path / "c", process_group=group)

    results = ThreadWorld(2).run(task)
    assert all(isinstance(r, UnsupportedValue) for r in results), results
    assert "same tree" in str(results[0]) and not os.listdir(tmp_path)


def test_a_rank_that_leaves_the_group_makes_the_others_raise(tmp_path: Path) -> None:
    class Leaves(ThreadRank):
        def gather_bytes(self, data: bytes, root: int = 0) -> list[bytes] | None:
            raise SystemExit  # the thread ends here, as a killed process would

    world = ThreadWorld(2)
    results = world.run(lambda group: Checkpoint(state=_rank_state(group.rank, 2)).save(
        tmp_path / "c", process_group=Leaves(world, 1) if group.rank == 1 else group))
    assert isinstance(results[0], CollectiveError) and isinstance(results[1], SystemExit)
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("extra_on", [0, 1])
def test_a_component_only_one_rank_saves_is_refused_on_every_rank(tmp_path: Path, extra_on: int) -> None:
    def task(group: ThreadRank) -> Path:
        extra = {"extra": {"e": np.arange(2)}} if group.rank == extra_on else {}
        return Checkpoint(state=_rank_state(group.rank, 2), **extra).save(tmp_path / "c", process_group=group)

    results = ThreadWorld(2).run(task)
    assert all(isinstance(r, UnsupportedValue) for r in results), results
    assert all("components" in str(r) and "extra" in str(r) for r in results), results
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("extra_on", [0, 1])
def test_a_plain_array_only_one_rank_has_is_refused_on_every_rank(tmp_path: Path, extra_on: int) -> None:
    def task(group: ThreadRank) -> Path:
        state = _rank_state(group.rank, 2)
        if group.rank == extra_on:
            state["buffer"] = np.ones(2)
        return Checkpoint(state=state).save(tmp_path / "c", process_group=group)

    results = ThreadWorld(2).run(task)
    assert all(isinstance(r, UnsupportedValue) for r in results), results
    assert all("same tree" in str(r) and "components/state" in str(r) for r in results), results
    assert not os.listdir(tmp_path)


def test_a_plain_array_of_another_shape_on_one_rank_is_refused(tmp_path: Path) -> None:
    def task(group: ThreadRank) -> Path:
        state = _rank_state(group.rank, 2)
        state["plain"] = np.arange(4 + group.rank)
        return Checkpoint(state=state).save(tmp_path / "c", process_group=group)

    results = ThreadWorld(2).run(task)
    assert all(isinstance(r, UnsupportedValue) and "same tree" in str(r) for r in results), results


@pytest.mark.parametrize(("argument", "per_rank"), [
    ("overwrite", lambda rank: {"overwrite": rank == 0}),
    ("metadata", lambda rank: {"metadata": {"rank": rank}}),
    ("checkpoint_id", lambda rank: {"checkpoint_id": f"id-{rank}"}),
    ("components", lambda rank: {"components": ["state"] if rank else ["state", "config"]}),
])
def test_save_arguments_that_differ_per_rank_are_refused_and_nothing_changes(
        tmp_path: Path, argument: str, per_rank: object) -> None:
    previous = Checkpoint(state={"b": np.arange(3)}).save(tmp_path / "c")
    before = (previous / "manifest.json").read_bytes()

    def task(group: ThreadRank) -> Path:
        kwargs = per_rank(group.rank)  # type: ignore[operator]
        return Checkpoint(state=_rank_state(group.rank, 2), config={"x": 1}).save(
            previous, process_group=group, **kwargs)

    results = ThreadWorld(2).run(task)
    assert all(isinstance(r, UnsupportedValue) for r in results), results
    assert all(f"{argument}=" in str(r) and "same arguments" in str(r) for r in results), results
    assert (previous / "manifest.json").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["c"]


@pytest.mark.parametrize(("change", "named"), [
    (lambda state, rank: state.update(plain=np.arange(4) * (rank + 1)), "$.plain"),
    (lambda state, rank: state.update(position={"epoch": 3, "batch": 10 + rank}), "$.position.batch"),
    (lambda state, rank: state.update(seed=[np.float64(0.5), float("nan") if rank else 0.0]), "$.seed[1]"),
    (lambda state, rank: state.update(nested=(np.zeros(2, np.uint8), np.full(2, rank, np.uint8))), "$.nested[1]"),
])
def test_a_plain_value_that_differs_per_rank_is_refused_naming_it_instead_of_saving_rank_0s(
        tmp_path: Path, change: object, named: str) -> None:
    """Issue 25: only rank 0's plain values are stored; one that differs elsewhere was lost in silence."""
    previous = Checkpoint(state={"b": np.arange(3)}).save(tmp_path / "c")
    before = (previous / "manifest.json").read_bytes()

    def task(group: ThreadRank) -> Path:
        state = _rank_state(group.rank, 3)
        change(state, group.rank)  # type: ignore[operator]
        return Checkpoint(state=state).save(previous, process_group=group)

    results = ThreadWorld(3).run(task)
    assert all(isinstance(r, UnsupportedValue) for r in results), results
    for result in results:
        assert f"saved the value at {named} of components/state differing" in str(result), result
        assert "PerRank" in str(result)
    assert results[0].field == named
    assert (previous / "manifest.json").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["c"]


def test_a_json_component_that_differs_per_rank_is_refused_naming_it(tmp_path: Path) -> None:
    def task(group: ThreadRank) -> Path:
        return Checkpoint(state=_rank_state(group.rank, 2), config={"host": f"node-{group.rank}"}).save(
            tmp_path / "c", process_group=group)

    results = ThreadWorld(2).run(task)
    assert all(isinstance(r, UnsupportedValue) for r in results), results
    assert all("'config' component (value.json) differing" in str(r) for r in results), results
    assert not os.listdir(tmp_path)
