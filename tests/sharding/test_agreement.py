"""The agreement of a load on several ranks (thread ranks): every rank applies, or every rank raises first."""

from __future__ import annotations

from typing import Any

import pytest
from shard_helpers import ThreadRank, ThreadWorld

from opencheckpoint.errors import IntegrityError
from opencheckpoint.sharding import CollectiveError
from opencheckpoint.sharding.agreement import agreement


class FlagRank(ThreadRank):
    """A thread rank with the one-step ``any_failed`` of a torch collective."""

    steps = 0

    def any_failed(self, failed: bool) -> bool:
        FlagRank.steps += 1
        return any(self._world.exchange(self.rank, failed))


def load(failing: dict[int, BaseException], applied: list[int], kind: type[ThreadRank]) -> Any:
    def task(rank: ThreadRank) -> Any:
        collective = kind(rank._world, rank.rank)
        try:
            with agreement(collective) as passed:
                if rank.rank in failing:  # phase 1 of this rank fails (a corrupt shard only it reads)
                    raise failing[rank.rank]
                passed()
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
    assert FlagRank.steps == (3 if kind is FlagRank else 0)  # with any_failed: one step per rank, nothing else


def test_an_error_that_is_no_checkpoint_error_reaches_the_others_as_a_collective_error() -> None:
    applied: list[int] = []
    results = load({0: RuntimeError("adapter bug")}, applied, FlagRank)
    assert applied == [] and isinstance(results[0], RuntimeError)
    assert all(isinstance(r, CollectiveError) and "rank 0: RuntimeError: adapter bug" in str(r) for r in results[1:])
