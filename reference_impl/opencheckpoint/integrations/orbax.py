"""orbax ``CheckpointManager`` items written as OpenCheckpoint checkpoints.

orbax's extension point (orbax-checkpoint 0.11+): a ``CheckpointHandler`` and the
``CheckpointArgs`` registered with it (``ocp.args.register_with_handler``), which
``ocp.args.Composite`` finds by the arguments' type. The one changed line::

    manager.save(step, args=ocp.args.Composite(state=OpenCheckpointSave(state)))   # was: ocp.args.StandardSave(state)
    restored = manager.restore(step, args=ocp.args.Composite(state=OpenCheckpointRestore(abstract_state)))

orbax keeps everything it does: step directories, ``max_to_keep``,
``latest_step``, ``restore`` by step, saving into a temporary step directory
renamed when finalized (so a killed save leaves the previous steps alone), other
items of the same step. Inside the item directory orbax hands the handler,
the item is one OpenCheckpoint checkpoint in directory form, ``checkpoint/``
(:data:`CHECKPOINT_DIR`; beside it orbax writes its own ``commit_success.txt``,
which a checkpoint directory cannot hold), with one component, ``state``
(:data:`COMPONENT`). :func:`item_path` names it::

    opencheckpoint.read_component(item_path(root, step, "state"), "state", framework="torch")

What differs from orbax's ``StandardSave``: typed PRNG keys (``jax.random.key``)
are stored as keys (orbax refuses them); arrays are written whole by this
process (no OCDBT, no per-host shards: a single-process save); the handler is
synchronous (orbax runs it in a thread and waits), not an
``AsyncCheckpointHandler``. A restore reads and verifies every array
(checksums, shapes, dtypes against the target) before it returns anything and
never changes the target it is given: it returns a new pytree of the
target's structure (an ``nnx.State``, dicts, optax states, abstract
``jax.ShapeDtypeStruct`` leaves from ``nnx.eval_shape`` or live arrays).
What cannot be stored exactly (Python objects in the tree) is refused at save,
naming the key.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import jax
import orbax.checkpoint as ocp
from etils import epath

from ..checkpoint import Checkpoint
from ..format.errors import NotACheckpoint
from ..options import Strictness
from ..read.probe import manifest
from ..read.reader import read_component

#: The OpenCheckpoint checkpoint's directory inside an orbax item directory.
CHECKPOINT_DIR = "checkpoint"
#: The name of the one component of an item's checkpoint.
COMPONENT = "state"


def item_path(root: str | os.PathLike[str], step: int, item: str) -> epath.Path:
    """The OpenCheckpoint checkpoint of item ``item`` at ``step`` of the manager directory ``root``.

    >>> str(item_path("/runs/a", 12, "state"))
    '/runs/a/12/state/checkpoint'
    """
    return epath.Path(root) / str(step) / item / CHECKPOINT_DIR


class OpenCheckpointHandler(ocp.CheckpointHandler):  # type: ignore[misc]  # orbax is untyped
    """Saves a pytree as an OpenCheckpoint checkpoint in an orbax item directory; restores it verified."""

    def save(self, directory: epath.Path, args: OpenCheckpointSave) -> None:
        Checkpoint(**{COMPONENT: args.item}).save(os.fspath(directory / CHECKPOINT_DIR), metadata=args.metadata,
                                                  overwrite=False)

    def restore(self, directory: epath.Path, args: OpenCheckpointRestore | None = None) -> Any:
        """A new pytree with ``args.item``'s structure (without a target: the stored tree as JAX arrays)."""
        path = os.fspath(directory / CHECKPOINT_DIR)
        if args is None or args.item is None:
            return read_component(path, COMPONENT, framework="jax")
        # Fresh containers around the same leaves (arrays and ShapeDtypeStructs are immutable): the load fills
        # this copy, all or nothing, and the caller's target stays as it was.
        target = jax.tree_util.tree_map(lambda leaf: leaf, args.item)
        result = Checkpoint(**{COMPONENT: target}).load(path, strict=args.strict, cast=args.cast)
        return result.values.get(COMPONENT, target)

    def metadata(self, directory: epath.Path) -> dict[str, Any] | None:
        """The checkpoint's manifest (components, producer, the metadata given at save), or None if absent."""
        try:
            return manifest(os.fspath(directory / CHECKPOINT_DIR))
        except NotACheckpoint:
            return None


@ocp.args.register_with_handler(OpenCheckpointHandler, for_save=True)
@dataclasses.dataclass
class OpenCheckpointSave(ocp.args.CheckpointArgs):  # type: ignore[misc]  # orbax is untyped
    """Save ``item`` (a pytree: NNX state, dicts, optax states, arrays, PRNG keys) as an OpenCheckpoint item.

    ``metadata``: JSON values for the checkpoint's manifest (what ``opencheckpoint ls`` and ``inspect`` show).
    """

    item: Any
    metadata: dict[str, Any] | None = None


@ocp.args.register_with_handler(OpenCheckpointHandler, for_restore=True)
@dataclasses.dataclass
class OpenCheckpointRestore(ocp.args.CheckpointArgs):  # type: ignore[misc]  # orbax is untyped
    """Restore into a pytree shaped like ``item`` (abstract or live); ``None``: the stored tree as it is.

    ``strict`` and ``cast`` are those of :meth:`opencheckpoint.Checkpoint.load`.
    """

    item: Any = None
    strict: Strictness = "error"
    cast: Any = None


__all__ = ["CHECKPOINT_DIR", "COMPONENT", "OpenCheckpointHandler", "OpenCheckpointRestore",
           "OpenCheckpointSave", "item_path"]
