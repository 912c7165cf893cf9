"""A load on every rank of a sharded model: every rank restores, or no rank changes anything.

Each rank reads and verifies only its own blocks, so a corrupt shard may be
seen by one rank alone. Between the two phases of a load (every component
read and checked, then applied) the ranks agree once: each sends the
coordinator whether its phase 1 passed (or the error that stopped it), and
the coordinator broadcasts the verdict. Only when every rank passed does any
rank apply; otherwise every rank raises (its own error, or the failing
rank's, as the same class with ``rank N:`` in the message) with its live
objects untouched. One round trip per load, never one per component; a rank
that dies or hangs makes the others raise
:class:`~opencheckpoint.sharding.CollectiveError` within the collective's timeout.

The same step checks that every rank loads the same thing: each passes a
description of its load (which checkpoint, by ``checkpoint_id`` and manifest
CRC-32C, never by path; the requested components; the options that change
what is restored), and when two ranks' descriptions differ every rank raises
:class:`~opencheckpoint.sharding.CollectiveError` naming the fields and ranks.

>>> load_digest({"checkpoint_id": "a"}) == load_digest({"checkpoint_id": "a"}) != load_digest({"checkpoint_id": "b"})
True
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

from .collective import Collective, CollectiveError, error_from_json, error_to_json, from_json, to_json

__all__ = ["agree", "agreement", "load_digest"]

_OK = {"ok": True}


#: What a rank sends the others in one all-reduce: its load's description, hashed to 62 bits (so that its
#: negation, reduced with MAX, gives the minimum: a differing description shows as max != min).
_DIGEST_BITS = 62


def load_digest(description: Mapping[str, Any] | None) -> int:
    """A 62-bit hash of a load's description (0 for none): equal descriptions, equal digests."""
    if description is None:
        return 0
    canonical = json.dumps(description, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")
    return int.from_bytes(hashlib.blake2b(canonical, digest_size=8).digest(), "big") >> (64 - _DIGEST_BITS)


def agree(collective: Collective, error: BaseException | None,
          description: Mapping[str, Any] | None = None) -> None:
    """Exchange this rank's phase-1 outcome and the description of its load; raise when any rank failed
    (this rank's own error first) or when two ranks load different things.

    A collective with ``all_max(values) -> list[int]`` (one all-reduce, as
    :class:`~opencheckpoint.adapters.torch_collective.TorchCollective` has) settles the
    usual case, every rank passed with the same description, in that one step; failures
    and differing descriptions are then reported through ``gather_bytes`` and
    ``broadcast_bytes``, as on any collective.
    """
    all_max = getattr(collective, "all_max", None)
    if all_max is not None:
        digest = load_digest(description)
        failed, highest, negated_lowest = all_max([int(error is not None), digest, -digest])
        if not failed and highest == -negated_lowest:
            return
    mine = _OK if error is None else error_to_json(error, collective.rank)
    reports = collective.gather_bytes(to_json({**mine, "load": None if description is None else dict(description)}))
    verdict = None if reports is None else to_json(_verdict(reports))  # only the coordinator has the reports
    outcome = from_json(collective.broadcast_bytes(verdict), "load verdict")
    if error is not None:
        raise error
    if outcome != _OK:
        if not isinstance(outcome, dict):
            raise CollectiveError(f"received a malformed load verdict from the coordinator: {outcome!r:.200}")
        raise error_from_json(outcome)


def _verdict(reports: list[bytes]) -> dict[str, Any]:
    """The coordinator's verdict: the ranks' loads differ, else the first failure in rank order, else ok."""
    parsed: list[dict[str, Any]] = []
    for rank, data in enumerate(reports):
        try:
            report = from_json(data, "load report")
            if not isinstance(report, dict):
                raise CollectiveError(f"received a malformed load report from another rank: {report!r:.200}")
        except CollectiveError as exc:
            report = error_to_json(exc, rank)
        parsed.append(report)
    differing = _differing(parsed)
    if differing is not None:
        return differing
    failures = [{k: v for k, v in report.items() if k != "load"} for report in parsed if report.get("ok") is not True]
    return failures[0] if failures else _OK


def _differing(reports: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A CollectiveError report naming each field on which the ranks' load descriptions differ, or None."""
    loads = {rank: report["load"] for rank, report in enumerate(reports) if isinstance(report.get("load"), dict)}
    keys = sorted({key for load in loads.values() for key in load})
    differing: list[str] = []
    problems: list[str] = []
    for key in keys:
        values: dict[str, list[int]] = {}
        for rank, load in loads.items():
            values.setdefault(to_json(load.get(key)).decode(), []).append(rank)
        if len(values) > 1:
            differing.append(key)
            problems.append(f"{key} (" + "; ".join(f"rank {', '.join(map(str, ranks))}: {value:.120}"
                                                   for value, ranks in values.items()) + ")")
    if not differing:
        return None
    base = min(loads)
    odd = min(rank for rank, load in loads.items() if load != loads[base])
    return {"rank": odd, "class": "CollectiveError", "file": None, "field": differing[0], "rule": None,
            "message": f"loads other things than rank {base}: every rank must load the same checkpoint "
                       "and components with the same options; they differ in " + "; ".join(problems)}


class Passed(Protocol):
    """What :func:`agreement` yields: called once phase 1 passed, with this rank's load description."""

    def __call__(self, description: Mapping[str, Any] | None = None) -> None: ...


@contextmanager
def agreement(collective: Collective | None) -> Iterator[Passed]:
    """Run phase 1 of a load inside; call the yielded function (with the description of this rank's load)
    before phase 2.

    An exception raised inside before that call is first reported to every
    other rank (they raise too), then re-raised here (an interrupt or exit is
    re-raised at once: the process is going away and its peers see it gone); the call itself raises
    when another rank failed. With no collective (one process) both are free.
    """
    agreed = False

    def passed(description: Mapping[str, Any] | None = None) -> None:
        nonlocal agreed
        agreed = True
        if collective is not None:
            agree(collective, None, description)

    try:
        yield passed
    except Exception as exc:  # not KeyboardInterrupt/SystemExit: the process is going away, its peers see it gone
        if collective is None or agreed:
            raise
        agreed = True
        agree(collective, exc)  # raises exc once the others know
        raise
