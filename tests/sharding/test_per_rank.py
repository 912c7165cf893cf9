"""Per-rank values (issue 25): ``PerRank(...)`` stored for every rank of a collective save, restored to the same
rank, refused on another number of ranks unless the live target's ``resize=`` says what to do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from shard_helpers import ThreadRank, ThreadWorld, read_raw

from opencheckpoint import Checkpoint, IncompatibleComponent, NamedTupleValue, PerRank, read_component, validate
from opencheckpoint.format.errors import UnsupportedValue


def rank_state(rank: int) -> dict[str, Any]:
    """What a data-parallel rank holds: a shared step, its own loader position and RNG state."""
    return {"step": 100, "loader": PerRank({"epoch": 2, "batch": 10 + rank, "rng": np.full(4, rank, np.uint32),
                                             "seen": [rank] * (rank + 1)})}


def saved(tmp_path: Path, world: int) -> Path:
    path = tmp_path / "c"
    results = ThreadWorld(world).run(lambda group: Checkpoint(state=rank_state(group.rank)).save(
        path, process_group=group))
    assert results == [path] * world, results
    return path


def live_state(**kwargs: Any) -> dict[str, Any]:
    return {"step": 0, "loader": PerRank({"epoch": 0, "batch": 0, "rng": np.zeros(4, np.uint32), "seen": []},
                                         **kwargs)}


def test_each_rank_stores_its_own_value_in_its_own_shard_file(tmp_path: Path) -> None:
    path = saved(tmp_path, 3)
    assert validate(path).ok
    record = json.loads((path / "manifest.json").read_bytes())["components"]["state"]
    assert record["kind_version"] == 2 and [f for f in record["files"] if f.startswith("shards/")] == [
        f"shards/rank-0000{r}.bin" for r in range(3)]
    raw = read_raw(path, "state")["loader"]  # the named tuple node, read from the files directly
    assert raw[0] == "opencheckpoint.PerRank" and raw[1]["world_size"] == 3
    assert [value["batch"] for value in raw[1]["values"]] == [10, 11, 12]
    stored = read_component(path, "state")["loader"]  # without a load: every rank's value
    assert isinstance(stored, NamedTupleValue) and stored.world_size == 3
    np.testing.assert_array_equal(stored.values[2]["rng"], np.full(4, 2, np.uint32))


def test_a_load_on_as_many_ranks_gives_each_rank_its_own_value(tmp_path: Path) -> None:
    path = saved(tmp_path, 3)

    def load(group: ThreadRank) -> Any:
        live = live_state()
        Checkpoint(state=live).load(path, process_group=group)
        return live

    for rank, live in enumerate(ThreadWorld(3).run(load)):
        assert live["step"] == 100 and isinstance(live["loader"], PerRank)
        value = live["loader"].value
        assert (value["batch"], value["seen"]) == (10 + rank, [rank] * (rank + 1))
        np.testing.assert_array_equal(value["rng"], np.full(4, rank, np.uint32))


def test_a_load_on_another_number_of_ranks_is_refused_naming_the_value_and_changes_nothing(tmp_path: Path) -> None:
    path = saved(tmp_path, 3)

    def load(group: ThreadRank) -> Any:
        live = live_state()
        try:
            Checkpoint(state=live).load(path, process_group=group)
        except IncompatibleComponent as exc:
            return exc, live
        return None, live

    for error, live in ThreadWorld(2).run(load):
        assert error is not None and "saved by 3 ranks cannot be restored on 2" in str(error)
        assert error.field == "$.loader" and "resize=" in str(error)
        assert live["step"] == 0 and live["loader"].value["batch"] == 0


@pytest.mark.parametrize(("resize", "expected"), [
    ("wrap", lambda rank: 10 + rank % 3),
    ("all", lambda rank: [10, 11, 12]),
    (lambda values, rank, world: values[0]["batch"] + rank * 100, lambda rank: 10 + rank * 100),
])
def test_a_resize_policy_says_what_each_rank_gets_on_another_number_of_ranks(
        tmp_path: Path, resize: Any, expected: Any) -> None:
    path = saved(tmp_path, 3)

    def load(group: ThreadRank) -> Any:
        live = live_state(resize=resize)
        Checkpoint(state=live).load(path, process_group=group)
        value = live["loader"].value
        if isinstance(value, list):
            return [v["batch"] for v in value]
        return value if isinstance(value, int) else value["batch"]

    assert ThreadWorld(4).run(load) == [expected(rank) for rank in range(4)]


def test_one_process_stores_world_size_one_and_restores_its_value(tmp_path: Path) -> None:
    path = Checkpoint(state=rank_state(0)).save(tmp_path / "c")
    body = json.loads((path / "manifest.json").read_bytes())
    assert body["format_version"] == 1  # plain arrays: no sharded array without a collective save
    live = live_state()
    Checkpoint(state=live).load(path)
    assert live["loader"].value["batch"] == 10


def test_a_plain_value_of_a_load_takes_this_ranks_value_too(tmp_path: Path) -> None:
    path = saved(tmp_path, 2)

    def load(group: ThreadRank) -> Any:
        live = {"step": 0, "loader": {"rng": np.zeros(4, np.uint32)}}
        Checkpoint(state=live).load(path, process_group=group)
        return live["loader"]["batch"], live["loader"]["rng"].tolist()

    assert ThreadWorld(2).run(load) == [(10, [0] * 4), (11, [1] * 4)]


def test_per_rank_values_inside_per_rank_values_and_prng_keys_are_refused(tmp_path: Path) -> None:
    results = ThreadWorld(2).run(lambda group: Checkpoint(state={"x": PerRank({"y": PerRank(1)})}).save(
        tmp_path / "c", process_group=group))
    assert all(isinstance(r, UnsupportedValue) and "inside another PerRank" in str(r) for r in results), results
