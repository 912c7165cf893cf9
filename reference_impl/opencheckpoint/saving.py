"""What :meth:`Checkpoint.save <opencheckpoint.Checkpoint.save>` does around the adapters, step by step.

A local save fixes the manifest fields (:func:`manifest_fields`), then runs either
in this process alone, through a staging directory (:func:`save_staged`), or as one
rank of a collective save (:func:`save_as_rank`), whose arguments every rank must
pass alike (:func:`collective_arguments`). A rename that meets another writer's
checkpoint is that writer's win, reported as
:class:`~opencheckpoint.format.errors.ConcurrentModification` (:func:`lost_races`).
Which components and adapters a save writes stays with the
:class:`~opencheckpoint.Checkpoint` that holds them.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import os
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from .container.staged import StagedCheckpoint
from .format.errors import ConcurrentModification, UnsupportedValue
from .format.producer import default_producer, utc_timestamp
from .manifest_builder import manifest_body
from .sharding.collective import Collective
from .sharding.collective_save import save_collective

#: Writes every saved component below a root and returns their records (``None``: no staging archive).
WriteComponents = Callable[[Path, StagedCheckpoint | None], dict[str, dict[str, Any]]]

#: What rename(2) reports when another writer published at the target between our check and our rename.
_RACE_ERRNOS = frozenset({errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR})


def publication_race(exc: OSError, target: Path) -> ConcurrentModification | None:
    """The error to raise when a save lost a race with another writer of ``target``, else None.

    Two saves to a missing target both see it missing; the second rename then meets the first
    one's checkpoint (``Directory not empty``). Or, without an atomic exchange, another writer
    renamed the target aside just before this one could (``No such file or directory`` for the
    target). Nothing of the losing save was published; the other writer's work is left alone.
    """
    moved_away = exc.errno == errno.ENOENT and exc.filename is not None and Path(exc.filename) == target
    if not moved_away and (exc.errno not in _RACE_ERRNOS or not os.path.lexists(target)):
        return None
    return ConcurrentModification(
        "another process published or is publishing a checkpoint at this path while this save was writing "
        f"it; this save published nothing ({exc.strerror}); save again to replace it", file=str(target))


@contextlib.contextmanager
def lost_races(target: Path) -> Iterator[None]:
    """Raise a lost publication race inside the block as :class:`ConcurrentModification`; other errors as they are."""
    try:
        yield
    except OSError as exc:
        raced = publication_race(exc, target)
        if raced is None:
            raise
        raise raced from exc


def save_manifest(records: dict[str, dict[str, Any]], **fields: Any) -> dict[str, Any]:
    """The manifest body of a save: format version 2 only when a tree holds a sharded array (R-SHD-13)."""
    sharded = any(r["kind"] == "tree" and r["kind_version"] == 2 for r in records.values())
    return manifest_body(records, format_version=2 if sharded else 1, **fields)


def manifest_fields(*, metadata: Any, checkpoint_id: str | None, created_at: str | None,
                    producer: Mapping[str, Any] | None) -> dict[str, Any]:
    """The manifest fields a save fixes besides the components; the defaults are taken now."""
    return {"checkpoint_id": checkpoint_id or uuid.uuid4().hex, "created_at": created_at or utc_timestamp(),
            "producer": default_producer() if producer is None else producer, "metadata": metadata}


def save_staged(target: Path, write: WriteComponents, fields: Mapping[str, Any], *, form: str, durable: bool,
                overwrite: bool) -> None:
    """A save by this process alone: components written into a staging directory, then published at once."""
    with StagedCheckpoint(target, form=form, durable=durable, overwrite=overwrite) as staged:
        staged.commit(save_manifest(write(staged.directory, staged), **fields))


def save_as_rank(target: Path, collective: Collective, write: WriteComponents, fields: Mapping[str, Any],
                 arguments: dict[str, Any], *, form: str, durable: bool, overwrite: bool) -> None:
    """This rank's part of a collective save (directory form only); the coordinator publishes once."""
    if form != "directory":
        raise UnsupportedValue("a collective save writes the directory form only", field="format")
    save_collective(target, collective, lambda root: write(root, None),
                    functools.partial(save_manifest, **fields), durable=durable, overwrite=overwrite,
                    arguments=arguments)


def collective_arguments(names: list[str], kinds: list[str], sha256: list[bool | None],
                         **given: Any) -> dict[str, Any]:
    """The arguments of a save every rank of a collective save must pass alike, as JSON values.

    The metadata and producer mappings are sent as digests (they may be large);
    each rank compares them with the coordinator's, whose values are stored.
    """

    def digest(value: Any) -> str | None:
        if value is None:
            return None
        text = json.dumps(value, sort_keys=True, default=repr, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    return {**given, "components": names, "adapters": kinds, "sha256": sha256,
            "metadata": digest(given["metadata"]),
            "producer": None if given["producer"] is None else digest(dict(given["producer"]))}
