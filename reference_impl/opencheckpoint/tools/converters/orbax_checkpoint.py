"""orbax checkpoints, restored through orbax itself, then stored as trees (typed PRNG keys stay keys).

Three directory shapes are recognised (orbax 0.11+):

* one PyTree item: ``_METADATA`` (the tree metadata) beside ``manifest.ocdbt`` /
  ``d/`` (OCDBT array storage) -> one ``tree`` component (``state`` unless named);
* one step of a ``CheckpointManager``: ``_CHECKPOINT_METADATA`` and one
  subdirectory per item -> one component per item (PyTree items as trees, JSON
  items, i.e. a ``metadata`` file, as JSON);
* a ``CheckpointManager`` root: numbered step directories -> the newest step,
  or the one asked for.

The item handler class names recorded in ``_CHECKPOINT_METADATA`` are never
imported: the handler is chosen from the files present.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, Final

from ._common import ConversionError, Foreign, converted_from, require

PYTREE_MARKER: Final = "_METADATA"
STEP_MARKER: Final = "_CHECKPOINT_METADATA"
JSON_ITEM_FILE: Final = "metadata"


def _is_item(path: Path) -> bool:
    return (path / PYTREE_MARKER).is_file() or (path / "manifest.ocdbt").is_file()


def _is_step(path: Path) -> bool:
    return (path / STEP_MARKER).is_file() and not _is_item(path)


def _steps(path: Path) -> dict[int, Path]:
    return {int(p.name): p for p in path.iterdir() if p.is_dir() and p.name.isdigit() and _is_step(p)}


def is_orbax_checkpoint(path: Path) -> bool:
    """An orbax item, step or ``CheckpointManager`` directory (see the module docstring)."""
    return path.is_dir() and (_is_item(path) or _is_step(path) or bool(_steps(path)))


def read_orbax(path: Path, component: str = "state", *, step: int | None = None) -> Foreign:
    """Restore with orbax into host values; one component per item."""
    if not path.is_dir():
        raise ConversionError("an orbax checkpoint is a directory", file=str(path))
    metadata: dict[str, Any] = {"converted_from": converted_from("orbax", path)}
    if _is_item(path):
        return Foreign(components={component: _restore_pytree(path)}, metadata=metadata)
    if not _is_step(path):
        steps = _steps(path)
        if not steps:
            raise ConversionError("not an orbax checkpoint: no _METADATA, _CHECKPOINT_METADATA or step directory",
                                  file=str(path))
        chosen = max(steps) if step is None else step
        if chosen not in steps:
            raise ConversionError(f"no step {chosen} (has: {sorted(steps)})", file=str(path), field="step")
        path = steps[chosen]
        metadata["converted_from"]["step"] = chosen
    elif path.name.isdigit():
        metadata["converted_from"]["step"] = int(path.name)
    step_metadata = _step_metadata(path)
    for key in ("metrics", "custom_metadata"):
        if step_metadata.get(key):
            metadata["converted_from"][key] = step_metadata[key]
    foreign = Foreign(metadata=metadata)
    for item in sorted(p for p in path.iterdir() if p.is_dir()):
        if _is_item(item):
            foreign.components[item.name] = _restore_pytree(item)
        elif (item / JSON_ITEM_FILE).is_file():
            foreign.components[item.name] = _restore_json(item)
        else:
            raise ConversionError("item is neither a PyTree (_METADATA) nor a JSON item (metadata)",
                                  file=str(item))
    if not foreign.components:
        raise ConversionError("the step directory holds no item", file=str(path))
    return foreign


def _step_metadata(path: Path) -> dict[str, Any]:
    try:
        value = json.loads((path / STEP_MARKER).read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _restore_pytree(path: Path) -> Any:
    ocp = require("orbax.checkpoint", "peers", "reading orbax checkpoints")
    require("jax", "jax", "reading orbax checkpoints")
    try:
        with warnings.catch_warnings():
            # Restoring without a target makes orbax warn that it uses the saved sharding: on one host, intended.
            warnings.simplefilter("ignore")
            with ocp.StandardCheckpointer() as checkpointer:
                return checkpointer.restore(path.absolute())
    except (ValueError, OSError, KeyError, TypeError, RuntimeError) as exc:
        raise ConversionError(f"orbax could not restore the item: {exc}", file=str(path)) from None


def _restore_json(path: Path) -> Any:
    ocp = require("orbax.checkpoint", "peers", "reading orbax checkpoints")
    try:
        with ocp.Checkpointer(ocp.JsonCheckpointHandler()) as checkpointer:
            return checkpointer.restore(path.absolute())
    except (ValueError, OSError, KeyError, TypeError, RuntimeError) as exc:
        raise ConversionError(f"orbax could not restore the JSON item: {exc}", file=str(path)) from None
