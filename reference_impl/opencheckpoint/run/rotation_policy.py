"""A rotation's retention policy and naming, whatever its storage (spec R-PUB-19).

One place for what :class:`~opencheckpoint.run.Rotation` accepts (in a local
directory or below a prefix of an object store) and how it names and marks
checkpoints.

>>> check_policy(3, ("loss", "min"), "checkpoint")
>>> name_pattern("ckpt").fullmatch("ckpt-000000000012.ocp") is not None
True
>>> metric(float("nan")) is None, metric(2)
(True, 2.0)
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any, Protocol, TypeVar

#: Manifest metadata member in which a rotation records that it wrote a checkpoint:
#: ``{"prefix": str, "step": int, "sequence": int, "rotation": str, "name": str, "writer": str}``: the
#: sequence numbers its saves in write order, ``rotation`` is the directory's rotation id
#: (:mod:`~opencheckpoint.run.rotation_state`), ``name`` the checkpoint's own name in it, and ``writer``
#: the process that wrote it (``PID-MACHINE-START``, see :func:`~.container.debris.process_token`).
ROTATION_KEY = "opencheckpoint.rotation"
#: Suffix of archive checkpoints in a rotation directory.
ARCHIVE_SUFFIX = ".ocp"
#: Digits of the step in a checkpoint's name.
STEP_DIGITS = 12


def check_policy(keep_last: Any, keep_best: Any, prefix: Any) -> None:
    """``ValueError`` unless ``keep_last`` is an int >= 1, ``keep_best`` None or ``(key, "min" | "max")``
    and ``prefix`` a plain, non-hidden file name prefix."""
    if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1:
        raise ValueError(f"keep_last must be an int >= 1, got {keep_last!r}")
    if keep_best is not None:
        if isinstance(keep_best, str) or len(keep_best) != 2:
            raise ValueError("keep_best must be a (metadata_key, 'min' | 'max') pair")
        key, mode = keep_best
        if not isinstance(key, str) or not key or mode not in ("min", "max"):
            raise ValueError(f"keep_best must be (non-empty str, 'min' | 'max'), got {keep_best!r}")
    if not isinstance(prefix, str) or not prefix or "/" in prefix or "\\" in prefix or prefix.startswith("."):
        raise ValueError(f"prefix must be a plain, non-hidden file name prefix, got {prefix!r}")


def name_pattern(prefix: str) -> re.Pattern[str]:
    """Names of a rotation's checkpoints: ``{prefix}-{step}``, ``.ocp`` for archives; group 1 is the step."""
    return re.compile(rf"{re.escape(prefix)}-(\d+)(?:{re.escape(ARCHIVE_SUFFIX)})?")


def metric(value: Any) -> float | None:
    """A finite number from manifest metadata as a float, else None (bools are not metrics)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def owned_sequence(metadata: Any, name: str, prefix: str, step: int, rotation_id: str | None) -> int | None:
    """The write sequence if ``metadata`` records this rotation writing checkpoint ``name`` as ``step``, else None.

    The mark must name this directory's rotation id, this prefix, and the
    checkpoint's own name and step: a copy under another name, or a
    checkpoint moved in from another run's directory, is not ours.
    """
    mark = metadata.get(ROTATION_KEY) if isinstance(metadata, dict) else None
    if (rotation_id is None or not isinstance(mark, dict) or mark.get("rotation") != rotation_id
            or mark.get("prefix") != prefix or mark.get("step") != step or mark.get("name") != name):
        return None
    sequence = mark.get("sequence")
    return sequence if isinstance(sequence, int) and not isinstance(sequence, bool) else 0


def save_metadata(step: Any, metadata: Any, keep_best: tuple[str, str] | None) -> dict[str, Any]:
    """The metadata of a rotation's save of ``step`` (a copy): ``ValueError`` for a bad step, or a
    ``keep_best`` metric missing from it."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a non-negative int, got {step!r}")
    meta = dict(metadata or {})
    if keep_best is not None:
        key = keep_best[0]
        if key not in meta or metric(meta[key]) is None:
            raise ValueError(f"metadata needs a finite number under {key!r} (keep_best)")
    return meta


class Ranked(Protocol):
    """What the choice of "latest" and "best" reads of a rotation's entry (local or remote)."""

    @property
    def step(self) -> int: ...
    @property
    def created_at(self) -> str: ...
    @property
    def metric(self) -> float | None: ...
    @property
    def owned(self) -> bool: ...
    @property
    def sequence(self) -> int: ...


_E = TypeVar("_E", bound=Ranked)


def newest_first(entries: Iterable[_E]) -> list[_E]:
    """Resume order: this rotation's own checkpoints, most recently written first; then the others by step."""
    return sorted(entries, key=lambda e: (e.owned, e.sequence if e.owned else 0, e.step, e.created_at), reverse=True)


def best_entry(entries: Iterable[_E], keep_best: tuple[str, str] | None) -> _E | None:
    """The entry with the best metric under ``keep_best`` (ties: the higher step), or None."""
    scored = [e for e in entries if e.metric is not None]
    if keep_best is None or not scored:
        return None
    sign = 1.0 if keep_best[1] == "max" else -1.0
    return max(scored, key=lambda e: (sign * (e.metric or 0.0), e.step))
