"""The few collective operations a sharded save needs, and the world of one process.

A save of sharded arrays runs on every rank of a group; the ranks exchange
only small JSON documents (the staging directory, file entries, shard records,
the outcome) as bytes. :class:`Collective` is what the save engine needs of a
communication backend; frameworks implement it over their own process groups
(``torch.distributed`` in ``opencheckpoint.adapters.torch_collective``), never
with pickled objects. :class:`LocalCollective` is a world of one: a single
process saving a tree of sharded arrays goes through the same engine.

>>> world = LocalCollective()
>>> world.broadcast_bytes(b"x"), world.gather_bytes(b"y"), world.rank, world.world_size
(b'x', [b'y'], 0, 1)
"""

from __future__ import annotations

import json
from typing import Any, Protocol, runtime_checkable

from ..format.errors import ERROR_CLASSES, CheckpointError

__all__ = ["Collective", "CollectiveError", "LocalCollective", "error_from_json", "error_to_json", "from_json",
           "to_json"]


class CollectiveError(CheckpointError):
    """A collective operation of a save failed or timed out: a rank died, hung, or the group broke.

    Usually nothing was published and the previous checkpoint at the target is
    untouched; but when the coordinator died after its rename, the new checkpoint
    is published though the other ranks raise this: compare the target's
    ``checkpoint_id`` with the one the save was given (docs page "Scaling out").
    """

    error_class = "CollectiveError"


@runtime_checkable
class Collective(Protocol):
    """The group of processes saving one checkpoint together; rank 0 of the group is the coordinator.

    Each operation is called by every rank, in the same order, and raises
    :class:`CollectiveError` when the group fails or the operation times out.
    """

    @property
    def rank(self) -> int:
        """This process's rank in the group (0 .. world_size - 1)."""
        ...

    @property
    def world_size(self) -> int:
        """The number of processes in the group."""
        ...

    def broadcast_bytes(self, data: bytes | None, root: int = 0) -> bytes:
        """``data`` of rank ``root`` (the others pass None), on every rank."""
        ...

    def gather_bytes(self, data: bytes, root: int = 0) -> list[bytes] | None:
        """Every rank's ``data`` in rank order on rank ``root``; None on the others."""
        ...

    def barrier(self) -> None:
        """Return once every rank has called it."""
        ...


class LocalCollective:
    """The group of one process: every operation returns at once."""

    rank = 0
    world_size = 1

    def broadcast_bytes(self, data: bytes | None, root: int = 0) -> bytes:
        if data is None:
            raise CollectiveError("the root of a broadcast must pass bytes")
        return data

    def gather_bytes(self, data: bytes, root: int = 0) -> list[bytes] | None:
        return [data]

    def barrier(self) -> None:
        return None


def to_json(value: Any) -> bytes:
    """The bytes a rank sends: compact JSON."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode("utf-8")


def from_json(data: bytes, what: str) -> Any:
    """A document a rank received; :class:`CollectiveError` when it is not JSON (a broken or foreign peer)."""
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CollectiveError(f"received a malformed {what} from another rank: {exc}") from None


def error_to_json(exc: BaseException, rank: int) -> dict[str, Any]:
    """How a rank reports the error that stopped it, so every other rank can raise the same class."""
    if isinstance(exc, CheckpointError):
        return {"rank": rank, "class": type(exc).error_class, "message": exc.message, "file": exc.file,
                "field": exc.field, "rule": exc.rule}
    return {"rank": rank, "class": "CollectiveError", "message": f"{type(exc).__name__}: {exc}", "file": None,
            "field": None, "rule": None}


def error_from_json(report: dict[str, Any]) -> CheckpointError:
    """The error another rank reported, as the same class (one of the format's, never a name imported from data)."""
    cls: type[CheckpointError] = ERROR_CLASSES.get(str(report.get("class")), CollectiveError)
    if report.get("class") == "CollectiveError":
        cls = CollectiveError
    message = f"rank {report.get('rank')}: {report.get('message')}"
    return cls(message, file=report.get("file"), field=report.get("field"), rule=report.get("rule"))
