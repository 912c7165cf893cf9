"""``ls``: the checkpoints of a rotation directory with step, time, size, metric and validity.

Unlike :meth:`Rotation.entries <opencheckpoint.run.Rotation.entries>`, which
skips what it cannot read, the listing shows every ``{prefix}-{step}`` entry
(``{prefix}_{step}`` and ``{prefix}{step}`` too, for runs named by other tools) and
says why a broken one is not valid; ``latest`` and ``best`` are resolved among
the valid ones, exactly as resuming would.

>>> import tempfile
>>> from opencheckpoint import Checkpoint
>>> from opencheckpoint.run import Rotation
>>> run_dir = tempfile.mkdtemp()
>>> for step, loss in [(1, 0.5), (2, 0.1), (3, 0.9)]:
...     _ = Rotation(run_dir, keep_last=5).save(Checkpoint(x={"a": 1}), step, metadata={"loss": loss})
>>> listing = list_run(run_dir, metric="loss", mode="min")
>>> [e.step for e in listing.entries], listing.latest.name, listing.best.name
([1, 2, 3], 'checkpoint-000000000003', 'checkpoint-000000000002')
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..format.errors import CheckpointError, NotACheckpoint
from ..location import local_path
from ..read.opened import OpenedCheckpoint
from ..run.rotation_policy import ARCHIVE_SUFFIX
from ..run.rotation_policy import metric as _metric


@dataclass
class ListedCheckpoint:
    """One entry of a run directory."""

    path: Path
    step: int
    valid: bool
    created_at: str | None = None
    size: int = 0
    metric: float | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.path.name, "path": str(self.path), "step": self.step, "valid": self.valid,
                "created_at": self.created_at, "size": self.size, "metric": self.metric, "error": self.error}


@dataclass
class RunListing:
    """Every entry, oldest step first, and the ``latest`` / ``best`` valid checkpoint (None if there is none)."""

    directory: Path
    entries: list[ListedCheckpoint] = field(default_factory=list)
    latest: Path | None = None
    best: Path | None = None
    metric: str | None = None
    #: without ``metric=``: the one metadata key every valid checkpoint records a number under (``loss``),
    #: whose values fill the entries' ``metric`` (no ``best``: which way is better is the caller's to say)
    shown_metric: str | None = None
    #: the metadata keys of the valid checkpoints (what ``metric=`` may name)
    metadata_keys: set[str] = field(default_factory=set)
    #: entries of the directory that are not ``{prefix}-{step}`` names, at most :data:`OTHER_NAMES_SHOWN`
    other_names: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"directory": str(self.directory), "metric": self.metric or self.shown_metric,
                "latest": None if self.latest is None else str(self.latest),
                "best": None if self.best is None else str(self.best),
                "checkpoints": [e.to_dict() for e in self.entries]}


#: Names of other entries a listing keeps, to say what a directory without checkpoints holds.
OTHER_NAMES_SHOWN = 5


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _show_the_one_metric(listing: RunListing, valid: list[tuple[ListedCheckpoint, dict[str, Any]]]) -> None:
    """Without ``--metric``, show the metric a run recorded when there is exactly one candidate: a user key
    (not ``step``, not the library's ``opencheckpoint.*`` records) with a finite number in every valid
    checkpoint. A run saved with ``metadata={"loss": ...}`` then lists its losses by default."""
    if not valid:
        return
    keys = [k for k in valid[0][1] if k != "step" and not k.startswith("opencheckpoint.")]
    numeric = [k for k in keys if all(_metric(meta.get(k)) is not None for _, meta in valid)]
    if len(numeric) == 1:
        listing.shown_metric = numeric[0]
        for entry, meta in valid:
            entry.metric = _metric(meta.get(numeric[0]))


def list_run(
    directory: str | os.PathLike[str],
    *,
    prefix: str = "checkpoint",
    metric: str | None = None,
    mode: Literal["min", "max"] = "min",
    verify: bool = False,
) -> RunListing:
    """List a run directory. ``verify`` checks every byte (:func:`~opencheckpoint.validate`), else the
    manifest, inventory and sizes. Raises :class:`NotACheckpoint` if ``directory`` is not a directory, or is
    itself a checkpoint (``inspect`` describes one checkpoint)."""
    root = local_path(directory)  # `ls` lists local run directories only (a URL: UnsupportedLocation)
    if not root.is_dir():
        raise NotACheckpoint("not a run directory" + (" (a file: `opencheckpoint inspect` describes a "
                                                      "checkpoint archive)" if root.is_file() else ""), file=str(root))
    if (root / "manifest.json").exists():
        raise NotACheckpoint("a checkpoint, not a run directory of checkpoints: `opencheckpoint inspect` "
                             "describes it; `ls` lists the checkpoints of a run directory (NAME-<step>)",
                             file=str(root))
    # ``-`` is the rotation's separator; ``_`` and none are accepted too (``--prefix step`` lists ``step_100``)
    pattern = re.compile(rf"{re.escape(prefix)}[-_]?(\d+)(?:{re.escape(ARCHIVE_SUFFIX)})?")
    listing = RunListing(root, metric=metric)
    metadata: dict[Path, dict[str, Any]] = {}
    for name in sorted(os.listdir(root)):
        match = pattern.fullmatch(name)
        if match is None:
            if len(listing.other_names) < OTHER_NAMES_SHOWN and not name.startswith("."):
                listing.other_names.append(name)
            continue
        entry = ListedCheckpoint(root / name, int(match.group(1)), valid=False, size=_size(root / name))
        try:
            with OpenedCheckpoint(entry.path) as opened:  # steps 1-11, as opencheckpoint.manifest() reads
                manifest = opened.manifest
            entry.created_at = str(manifest.get("created_at"))
            listing.metadata_keys.update(manifest.get("metadata") or {})
            metadata[entry.path] = manifest.get("metadata") or {}
            if metric is not None:
                entry.metric = _metric((manifest.get("metadata") or {}).get(metric))
            entry.valid = True
        except CheckpointError as exc:
            entry.error = str(exc)
        if entry.valid and verify:
            from ..read.validate import validate

            report = validate(entry.path)
            if not report.ok:
                entry.valid, entry.error = False, str(report.errors[0])
        listing.entries.append(entry)
    listing.entries.sort(key=lambda e: (e.step, e.created_at or "", e.path.name))
    valid = [e for e in listing.entries if e.valid]
    listing.latest = valid[-1].path if valid else None
    scored = [e for e in valid if e.metric is not None]
    if scored:
        sign = 1.0 if mode == "max" else -1.0
        listing.best = max(scored, key=lambda e: (sign * (e.metric or 0.0), e.step)).path
    if metric is None:  # after ``best``: a metric shown is not ranked
        _show_the_one_metric(listing, [(e, metadata[e.path]) for e in valid])
    return listing
