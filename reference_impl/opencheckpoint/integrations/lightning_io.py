"""What ``OpenCheckpointIO`` does, without importing Lightning: a Lightning checkpoint dict saved, loaded, removed.

A Lightning checkpoint (the dict ``Trainer`` builds: ``state_dict``,
``optimizer_states``, ``lr_schedulers``, ``loops``, ``callbacks``,
``hyper_parameters``, ``epoch``, ``global_step``, ...) is saved as two tree
components, each a :mod:`.lightning_state` document so it comes back exactly:
``state_dict`` (the module's weights) and ``trainer`` (every other key, in
order). The manifest metadata carries :data:`MARK_KEY`: what marks a
checkpoint this integration wrote, and where ``state_dict`` stood among the
keys. :func:`load_checkpoint_dict` reads both components (every array verified
before the dict is returned, so Lightning restores nothing unverified);
:func:`remove_checkpoint` deletes only a checkpoint with that mark.

>>> import os, tempfile, torch
>>> path = os.path.join(tempfile.mkdtemp(), "epoch=0.ckpt")
>>> checkpoint = {"epoch": 0, "state_dict": {"w": torch.ones(2)}, "optimizer_states": [{"state": {0: {}}}]}
>>> _ = save_checkpoint_dict(checkpoint, path)
>>> back = load_checkpoint_dict(path)
>>> list(back), back["state_dict"]["w"].tolist(), back["optimizer_states"]
(['epoch', 'state_dict', 'optimizer_states'], [1.0, 1.0], [{'state': {0: {}}}])
>>> remove_checkpoint(path); os.path.exists(path)
False
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Literal

from ..checkpoint import Checkpoint
from ..format.errors import CheckpointError, IncompatibleComponent, NotACheckpoint, TargetExists, UnsupportedValue
from ..location import PathArg, resolve_location
from ..read.reader import CheckpointReader
from ..remote.fspath import FsPath
from ..run.rotation_store import store_for
from ..sharding.collective import LocalCollective
from ..write.async_save import wait_for_target
from .lightning_state import from_document, to_document

logger = logging.getLogger("opencheckpoint.integrations.lightning")

#: Manifest metadata key of a checkpoint written by ``OpenCheckpointIO``: ``{"version": 1, "state_dict_at": i}``.
MARK_KEY = "opencheckpoint.lightning"
#: The component of the module's weights (``checkpoint["state_dict"]``), and the one of every other key.
WEIGHTS, TRAINER = "state_dict", "trainer"
_MARK_VERSION = 1


def save_checkpoint_dict(checkpoint: dict[str, Any], path: PathArg, *,
                         format: Literal["directory", "archive"] = "archive", sha256: bool = False,
                         durable: bool = True, background: bool = False) -> Any:
    """Save a Lightning checkpoint dict at ``path`` atomically (the old checkpoint there stays until then).

    Replaces only a checkpoint this integration wrote (the rule of
    :func:`remove_checkpoint`): a ``torch.save`` file, a folder of the user's, a
    checkpoint of another writer at ``path`` raises :class:`TargetExists` naming
    it and stays as it was. A value that would not
    come back exactly raises :class:`UnsupportedValue` naming its key, before
    anything on disk changes. One process writes (Lightning calls its
    ``CheckpointIO`` on global rank 0 only), so the save never waits for the
    other ranks of a job. ``background``: snapshot every tensor now and write in
    a thread (:meth:`Checkpoint.save_async`); returns its ``SaveHandle``.
    """
    components, metadata = _components(checkpoint, path)
    location = resolve_location(path)
    wait_for_target(location)  # a save to it still in flight publishes first: then what is there is looked at
    _require_ours(location, str(path), "replace", "nothing was written")
    saver = Checkpoint(format=format, sha256=sha256, durable=durable, **components)
    try:
        if background:
            return saver.save_async(path, metadata=metadata, overwrite=True)
        return saver.save(path, metadata=metadata, overwrite=True, process_group=_alone(format, path))
    except UnsupportedValue as exc:
        raise _naming_key(exc) from None


def _components(checkpoint: dict[str, Any], path: PathArg) -> tuple[dict[str, Any], dict[str, Any]]:
    """The components of ``checkpoint`` (documents of :mod:`.lightning_state`) and the manifest metadata."""
    if type(checkpoint) is not dict:
        raise UnsupportedValue(f"a Lightning checkpoint is a dict, not a {type(checkpoint).__name__}",
                               file=str(path))
    rest = {key: value for key, value in checkpoint.items() if key != WEIGHTS}
    components: dict[str, Any] = {TRAINER: _document(rest, path)}
    mark: dict[str, Any] = {"version": _MARK_VERSION}
    if WEIGHTS in checkpoint:
        components[WEIGHTS] = _document(checkpoint[WEIGHTS], path)
        mark["state_dict_at"] = list(checkpoint).index(WEIGHTS)
    return components, {MARK_KEY: mark}


def _alone(format: str, path: PathArg) -> LocalCollective | None:
    """The process group of a save by this process alone: None, or in a ``torch.distributed`` job of
    several processes (where a save would otherwise wait for every rank) the group of one process,
    whose saves write the directory form only."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
        return None
    if format != "directory":
        raise UnsupportedValue("in a torch.distributed job of several processes, rank 0 alone saves Lightning's "
                               "checkpoint, in the directory form only: use OpenCheckpointIO(format='directory')",
                               file=str(path), field="format")
    return LocalCollective()


def _document(value: Any, path: PathArg) -> dict[str, Any]:
    try:
        return to_document(value)
    except UnsupportedValue as exc:
        exc.at(file=str(path))
        raise _naming_key(exc) from None


def _naming_key(exc: UnsupportedValue) -> UnsupportedValue:
    """The codec's refusal, its field rewritten as the Lightning key: ``$.value.hyper_parameters.act``
    becomes ``checkpoint['hyper_parameters']['act']``-style ``hyper_parameters.act``."""
    field = exc.field or ""
    for prefix in ("$.value.", "$.value"):
        if field.startswith(prefix):
            key = field[len(prefix):]
            exc.message = f"Lightning checkpoint key {key or '(the whole dict)'!r}: {exc.message}"
            break
    return exc


def load_checkpoint_dict(path: PathArg, map_location: Any = None) -> dict[str, Any]:
    """The Lightning checkpoint dict saved at ``path``, every array verified before it is returned.

    ``map_location``: where tensors go (as ``torch.load``'s: a device, a string, a dict or a
    callable, see :func:`opencheckpoint.read_component`). A checkpoint not written by
    ``OpenCheckpointIO`` raises :class:`IncompatibleComponent` naming what it holds.
    """
    with CheckpointReader(path) as reader:
        where = str(path)
        mark = _mark(reader.manifest, where)
        rest = _trainer_keys(from_document(reader.read(TRAINER, framework="torch", map_location=map_location),
                                           file=where), where)
        has_weights = WEIGHTS in (reader.manifest.get("components") or {})
        if has_weights != ("state_dict_at" in mark):
            found = "a component but no position" if has_weights else "a position but no component"
            raise IncompatibleComponent(f"{WEIGHTS!r}: {found} (the plugin writes both or neither)", file=where,
                                        field=f"$.metadata['{MARK_KEY}'].state_dict_at")
        if not has_weights:
            return dict(rest)
        weights = from_document(reader.read(WEIGHTS, framework="torch", map_location=map_location), file=where)
    keys = list(rest)
    keys.insert(min(mark["state_dict_at"], len(keys)), WEIGHTS)
    return {key: weights if key == WEIGHTS else rest[key] for key in keys}


def _trainer_keys(rest: Any, where: str) -> dict[Any, Any]:
    """The ``trainer`` component's value, checked: a dict (what the plugin writes) without ``state_dict``
    (kept in its own component: a second one there would silently shadow it, or be shadowed)."""
    if type(rest) is not dict:
        raise IncompatibleComponent(f"the {TRAINER!r} component holds a {type(rest).__name__}, not the dict of "
                                    "a Lightning checkpoint's keys", file=where, field="$.value")
    if WEIGHTS in rest:
        raise IncompatibleComponent(f"duplicate key {WEIGHTS!r}: the {TRAINER!r} component holds one, but the "
                                    f"weights are the {WEIGHTS!r} component's", file=where, field=f"$.value.{WEIGHTS}")
    return rest


def _mark(manifest: dict[str, Any], where: str) -> dict[str, Any]:
    """The integration's mark in the manifest metadata, checked; what else the checkpoint holds when absent."""
    metadata = manifest.get("metadata")
    mark = metadata.get(MARK_KEY) if isinstance(metadata, dict) else None
    if not (isinstance(mark, dict) and mark.get("version") == _MARK_VERSION):
        components = sorted(manifest.get("components") or {})
        raise IncompatibleComponent(
            f"not a Lightning checkpoint written by OpenCheckpointIO (no {MARK_KEY!r} version {_MARK_VERSION} in "
            f"its metadata; its components: {components}): load it with opencheckpoint.Checkpoint.load or "
            "read_component", file=where)
    at = mark.get("state_dict_at", 0)
    if not (type(at) is int and at >= 0):
        raise IncompatibleComponent(f"{MARK_KEY}.state_dict_at is not a position: {at!r}", file=where)
    return mark


def remove_checkpoint(path: PathArg) -> None:
    """Delete the checkpoint at ``path`` if ``OpenCheckpointIO`` wrote it; refuse anything else.

    What Lightning asks to remove (``ModelCheckpoint``'s ``save_top_k`` and
    ``save_last`` rotations) is deleted only when it is an OpenCheckpoint
    checkpoint (nothing in it but its manifest and the files it lists) whose
    metadata carries :data:`MARK_KEY`: a ``torch.save`` file, a folder of the
    user's, a symbolic link, a checkpoint of another writer raises
    :class:`TargetExists` and stays. The checkpoint is renamed aside first, so a
    crash never leaves half of one under its name. Nothing at ``path``: nothing to do.
    """
    location = resolve_location(path)
    if not _require_ours(location, str(path), "delete", "nothing was deleted"):
        logger.info("nothing to remove at %s", path)
        return
    store_for(location).delete(location)


def _require_ours(location: Any, where: str, action: str, outcome: str) -> bool:
    """Whether something is at ``location``; raise :class:`TargetExists` (``refusing to <action>``) when it is
    not a checkpoint carrying :data:`MARK_KEY`: what a save replaces and a removal deletes, one rule."""
    if isinstance(location, FsPath):
        exists = location.fs.exists(location.key("manifest.json")) or location.fs.exists(location.path)
    else:
        exists = os.path.lexists(location)
    if not exists:
        return False
    try:
        with CheckpointReader(location) as reader:
            _mark(reader.manifest, where)
    except NotACheckpoint as exc:
        raise TargetExists(f"refusing to {action}: not an OpenCheckpoint checkpoint ({exc.message}); {outcome}",
                           file=where) from None
    except CheckpointError as exc:
        raise TargetExists(f"refusing to {action}: {exc.message}; {outcome}", file=where) from None
    return True
