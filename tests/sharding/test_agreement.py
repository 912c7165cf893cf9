"""The agreement of a load on several ranks (thread ranks): every rank applies, or every rank raises first."""

from __future__ import annotations

from typing import Any

import pytest
from shard_helpers import ThreadRank, ThreadWorld

from opencheckpoint.format.errors import IntegrityError
from opencheckpoint.sharding import CollectiveError
from opencheckpoint.sharding.agreement import agreement, load_digest


class FlagRank(ThreadRank):
    """A thread rank with the one-step ``all_max`` of a torch collective."""

    steps = 0

    def all_max(self, values: list[int]) -> list[int]:
        FlagRank.steps += 1
        return [max(column) for column in zip(*self._world.exchange(self.rank, values), strict=True)]


def load(failing: dict[int, BaseException], applied: list[int], kind: type[ThreadRank],
         descriptions: dict[int, dict[str, Any]] | None = None) -> Any:
    def task(rank: ThreadRank) -> Any:
        collective = kind(rank._world, rank.rank)
        try:
            with agreement(collective) as passed:
                if rank.rank in failing:  # phase 1 of this rank fails (a corrupt shard only it reads)
                    raise failing[rank.rank]
                passed(None if descriptions is None else descriptions[rank.rank])
                applied.append(rank.rank)  # phase 2
        except BaseException as exc:  # returned, not raised: the thread world would break the others' waits
            return exc
        return "applied"

    return ThreadWorld(3).run(task)


@pytest.mark.parametrize("kind", [ThreadRank, FlagRank])
def test_a_failure_on_one_rank_makes_every_rank_raise_before_any_applies(kind: type[ThreadRank]) -> None:
    applied: list[int] = []
    results = load({2: IntegrityError("array crc32c mismatch", file="components/model/shards/rank-00001.bin")},
                   applied, kind)
    assert applied == []
    assert all(isinstance(result, IntegrityError) for result in results), results
    assert "rank 2: array crc32c mismatch" in str(results[0]) and "rank-00001.bin" in str(results[1])
    assert str(results[2]).startswith("IntegrityError: components/model")  # the failing rank raises its own error


@pytest.mark.parametrize("kind", [ThreadRank, FlagRank])
def test_every_rank_applies_when_every_rank_passed(kind: type[ThreadRank]) -> None:
    FlagRank.steps = 0
    applied: list[int] = []
    assert load({}, applied, kind) == ["applied"] * 3
    assert sorted(applied) == [0, 1, 2]
    assert FlagRank.steps == (3 if kind is FlagRank else 0)  # with all_max: one step per rank, nothing else


def test_an_error_that_is_no_checkpoint_error_reaches_the_others_as_a_collective_error() -> None:
    applied: list[int] = []
    results = load({0: RuntimeError("adapter bug")}, applied, FlagRank)
    assert applied == [] and isinstance(results[0], RuntimeError)
    assert all(isinstance(r, CollectiveError) and "rank 0: RuntimeError: adapter bug" in str(r) for r in results[1:])


SAME = {"checkpoint": ["id-1", "0badf00d", 900], "components": ["model", "optimizer"],
        "options[model]": {"strict": "error", "verify": True, "cast": None, "subtree": None, "rename": False}}


@pytest.mark.parametrize("kind", [ThreadRank, FlagRank])
def test_ranks_that_load_the_same_thing_apply_in_one_step(kind: type[ThreadRank]) -> None:
    FlagRank.steps = 0
    applied: list[int] = []
    assert load({}, applied, kind, {rank: dict(SAME) for rank in range(3)}) == ["applied"] * 3
    assert sorted(applied) == [0, 1, 2] and FlagRank.steps == (3 if kind is FlagRank else 0)


@pytest.mark.parametrize("kind", [ThreadRank, FlagRank])
@pytest.mark.parametrize(("field", "value"), [
    ("checkpoint", ["id-2", "12345678", 900]),  # another checkpoint (another path on that rank)
    ("components", ["model"]),
    ("options[model]", {**SAME["options[model]"], "verify": False}),
])
def test_a_rank_that_loads_something_else_makes_every_rank_raise_before_any_applies(
        kind: type[ThreadRank], field: str, value: Any) -> None:
    applied: list[int] = []
    descriptions = {0: dict(SAME), 1: {**SAME, field: value}, 2: dict(SAME)}
    results = load({}, applied, kind, descriptions)
    assert applied == []
    for result in results:
        assert isinstance(result, CollectiveError) and result.field == field, result
        assert result.message.startswith("rank 1: loads other things than rank 0"), result
        assert f"{field} (rank 0, 2: " in str(result) and "; rank 1: " in str(result)


def test_a_differing_load_is_reported_before_a_rank_failure_and_the_failing_rank_raises_its_own() -> None:
    applied: list[int] = []
    failure = IntegrityError("array crc32c mismatch", file="components/model/shards/rank-00000.bin")
    results = load({2: failure}, applied, FlagRank,
                   {0: dict(SAME), 1: {**SAME, "components": []}, 2: dict(SAME)})
    assert applied == [] and results[2] is failure
    assert all(isinstance(r, CollectiveError) and r.field == "components" for r in results[:2])


def test_load_digest_tells_descriptions_apart_and_fits_a_signed_int64() -> None:
    digests = {load_digest({**SAME, "components": names}) for names in ([], ["model"], ["model", "optimizer"])}
    assert len(digests) == 3 and all(0 <= d < 2**62 for d in digests)
    assert load_digest(dict(reversed(list(SAME.items())))) == load_digest(SAME)  # key order does not matter
    assert load_digest(None) == 0
