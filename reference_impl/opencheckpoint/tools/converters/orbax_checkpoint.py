"""orbax checkpoints, restored through orbax itself, then stored as trees (typed PRNG keys stay keys).

Three directory shapes are recognised (orbax 0.11+):

* one PyTree item: ``_METADATA`` (the tree metadata) beside ``manifest.ocdbt`` /
  ``d/`` (OCDBT array storage) -> one ``tree`` component (``state`` unless named);
* one step of a ``CheckpointManager``: ``_CHECKPOINT_METADATA`` and one
  subdirectory per item -> one component per item (PyTree items as trees, JSON
  items, i.e. a ``metadata`` file, as JSON);
* a ``CheckpointManager`` root: numbered step directories -> the newest step,
  or the one asked for;
* nnx_ppo's layout (``make_checkpoint_fn``): ``step_NNNNNNNNNN/`` folders of items
  saved one by one (``networks/``, ``optimizer/``) beside ``metadata.pkl``, which is
  a pickle and never read (``not_converted`` says so); the run folder converts its
  newest step.

A Flax NNX state (each variable stored by orbax as ``{"value": array}``) is stored
without the ``value`` level, so it loads into the module (:func:`unwrap_variables`).

The item handler class names recorded in ``_CHECKPOINT_METADATA`` are never
imported: the handler is chosen from the files present.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, Final

from ._common import PICKLE_REASON, ConversionError, Foreign, converted_from, require

PYTREE_MARKER: Final = "_METADATA"
STEP_MARKER: Final = "_CHECKPOINT_METADATA"
JSON_ITEM_FILE: Final = "metadata"
#: Files orbax itself writes beside the items of a step (their content is not state).
_ORBAX_FILES: Final = frozenset({STEP_MARKER, "commit_success.txt"})


def _is_item(path: Path) -> bool:
    return (path / PYTREE_MARKER).is_file() or (path / "manifest.ocdbt").is_file()


def _is_step(path: Path) -> bool:
    """A ``CheckpointManager`` step, or a folder of items saved one by one (nnx_ppo's ``networks/`` and
    ``optimizer/``, each by ``StandardCheckpointer``, beside its ``metadata.pkl``)."""
    if _is_item(path):
        return False
    if (path / STEP_MARKER).is_file():
        return True
    folders = [p for p in path.iterdir() if p.is_dir()] if path.is_dir() else []
    return bool(folders) and all(_is_item(p) for p in folders)


def _step_number(name: str) -> int | None:
    """``12`` (a ``CheckpointManager`` step) or ``step_0000000012`` (nnx_ppo's ``make_checkpoint_fn``)."""
    digits = name.removeprefix("step_")
    return int(digits) if digits.isdigit() else None


def _steps(path: Path) -> dict[int, Path]:
    steps = {}
    for p in path.iterdir():
        number = _step_number(p.name)
        if number is not None and p.is_dir() and _is_step(p):
            steps[number] = p
    return steps


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
    elif _step_number(path.name) is not None:
        metadata["converted_from"]["step"] = _step_number(path.name)
    step_metadata = _step_metadata(path)
    for key in ("metrics", "custom_metadata"):
        if step_metadata.get(key):
            metadata["converted_from"][key] = step_metadata[key]
    foreign = Foreign(metadata=metadata)
    for item in sorted(path.iterdir()):
        if item.is_dir() and _is_item(item):
            foreign.components[item.name] = _restore_pytree(item)
        elif item.is_dir() and (item / JSON_ITEM_FILE).is_file():
            foreign.components[item.name] = _restore_json(item)
        elif item.is_dir():
            raise ConversionError("item is neither a PyTree (_METADATA) nor a JSON item (metadata)",
                                  file=str(item))
        elif item.name.endswith((".pkl", ".pickle")):
            foreign.not_converted[item.name] = PICKLE_REASON + _PICKLE_HINTS.get(item.name, "")
        elif item.name not in _ORBAX_FILES:
            foreign.not_converted[item.name] = "not an orbax item"
    if not foreign.components:
        raise ConversionError("the step directory holds no item", file=str(path))
    return foreign


#: What a known pickle beside orbax items held, and where it goes instead.
_PICKLE_HINTS: Final = {
    "metadata.pkl": (" (nnx_ppo keeps the networks' PRNG keys, env states, rng_key, steps_taken, step and config "
                     "there: save them as components of an OpenCheckpoint checkpoint from the running trainer, "
                     "see the migrating guide)"),
}


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
                return unwrap_variables(checkpointer.restore(path.absolute()))
    except (ValueError, OSError, KeyError, TypeError, RuntimeError) as exc:
        raise ConversionError(f"orbax could not restore the item: {exc}", file=str(path)) from None


def unwrap_variables(tree: Any) -> Any:
    """A Flax NNX state as orbax stores it (each variable a ``{"value": array}`` dict) with the ``value`` level
    removed and its integer keys (``"0"``: a tuple's items, a list of layers) integers again, so its paths are
    those of ``nnx.state(module)`` and it loads into the module; any other tree as is.

    A tree is an NNX state to this test when every leaf sits alone under a ``value`` key (empty containers,
    such as an optimizer's empty states, aside) and there is at least one.

    >>> unwrap_variables({"linear": {"kernel": {"value": 1}, "bias": {"value": 2}}, "opt": {"0": {"value": 3}}})
    {'linear': {'kernel': 1, 'bias': 2}, 'opt': {0: 3}}
    >>> unwrap_variables({"kernel": {"value": 1}, "step": 3})
    {'kernel': {'value': 1}, 'step': 3}
    """
    wrapped = _wrapped_leaves(tree)
    return _unwrap(tree) if wrapped else tree


def _is_wrapped(node: Any) -> bool:
    return (isinstance(node, dict) and len(node) == 1 and "value" in node
            and not isinstance(node["value"], (dict, list, tuple)))


def _wrapped_leaves(node: Any) -> int:
    """How many ``{"value": leaf}`` variables the tree holds; 0 when a leaf is not one."""
    if _is_wrapped(node):
        return 1
    children = node.values() if isinstance(node, dict) else node if isinstance(node, (list, tuple)) else None
    if children is None:
        return 0
    total = 0
    for child in children:
        if isinstance(child, (dict, list, tuple)) and not child:
            continue  # an empty container holds no leaf
        count = _wrapped_leaves(child)
        if not count:
            return 0
        total += count
    return total


def _unwrap(node: Any) -> Any:
    if _is_wrapped(node):
        return node["value"]
    if isinstance(node, dict):
        # orbax writes the integer keys of a state (a tuple's items, a list of layers) as "0", "1", ...
        numbered = all(isinstance(key, str) and key.isdigit() and key == str(int(key)) for key in node)
        return {int(key) if numbered else key: _unwrap(child) for key, child in node.items()}
    return type(node)(_unwrap(child) for child in node) if isinstance(node, (list, tuple)) else node


def _restore_json(path: Path) -> Any:
    ocp = require("orbax.checkpoint", "peers", "reading orbax checkpoints")
    try:
        with ocp.Checkpointer(ocp.JsonCheckpointHandler()) as checkpointer:
            return checkpointer.restore(path.absolute())
    except (ValueError, OSError, KeyError, TypeError, RuntimeError) as exc:
        raise ConversionError(f"orbax could not restore the JSON item: {exc}", file=str(path)) from None
