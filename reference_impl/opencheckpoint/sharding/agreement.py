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
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .collective import Collective, CollectiveError, error_from_json, error_to_json, from_json, to_json

__all__ = ["agree", "agreement"]

_OK = {"ok": True}


def agree(collective: Collective, error: BaseException | None) -> None:
    """Exchange this rank's phase-1 outcome; raise when any rank failed (this rank's own error first).

    A collective with ``any_failed(flag) -> bool`` (one all-reduce, as
    :class:`~opencheckpoint.adapters.torch_collective.TorchCollective` has) settles the
    usual case, every rank passed, in that one step; the failures' reports then
    follow through ``gather_bytes`` and ``broadcast_bytes``, as on any collective.
    """
    any_failed = getattr(collective, "any_failed", None)
    if any_failed is not None and not any_failed(error is not None):
        return
    mine = to_json(_OK if error is None else error_to_json(error, collective.rank))
    reports = collective.gather_bytes(mine)
    verdict = None
    if reports is not None:  # the coordinator: the first failure in rank order, else ok
        failures = [report for report in reports if report != to_json(_OK)]
        verdict = failures[0] if failures else to_json(_OK)
    outcome = from_json(collective.broadcast_bytes(verdict), "load verdict")
    if error is not None:
        raise error
    if outcome != _OK:
        if not isinstance(outcome, dict):
            raise CollectiveError(f"received a malformed load verdict from the coordinator: {outcome!r:.200}")
        raise error_from_json(outcome)


@contextmanager
def agreement(collective: Collective | None) -> Iterator[Callable[[], None]]:
    """Run phase 1 of a load inside; call the yielded function before phase 2.

    An exception raised inside before that call is first reported to every
    other rank (they raise too), then re-raised here (an interrupt or exit is
    re-raised at once: the process is going away and its peers see it gone); the call itself raises
    when another rank failed. With no collective (one process) both are free.
    """
    agreed = False

    def passed() -> None:
        nonlocal agreed
        agreed = True
        if collective is not None:
            agree(collective, None)

    try:
        yield passed
    except Exception as exc:  # not KeyboardInterrupt/SystemExit: the process is going away, its peers see it gone
        if collective is None or agreed:
            raise
        agreed = True
        agree(collective, exc)  # raises exc once the others know
        raise
