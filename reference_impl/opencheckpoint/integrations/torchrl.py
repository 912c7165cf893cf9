"""torchrl's ``Trainer`` checkpoints (torchrl 0.14) written and read by OpenCheckpoint.

torchrl 0.14's ``Trainer`` saves through a ``checkpoint=`` object
(``register``, ``save``, ``load``, ``components``) and a ``checkpoint_rotation=``
(``save(checkpoint, step=, metadata=)``); :class:`opencheckpoint.Checkpoint` and
:class:`opencheckpoint.run.Rotation` have those calls. Only
``Trainer.load_from_file`` recognises torchrl's own format alone, so the one
changed line is the import::

    from opencheckpoint.integrations.torchrl import Trainer   # was: from torchrl.trainers import Trainer

:class:`Trainer` is torchrl's, with these differences:

* ``checkpoint`` defaults to a :class:`TrainerCheckpoint` (an OpenCheckpoint
  :class:`~opencheckpoint.Checkpoint`); a torchrl ``Checkpoint`` given is taken
  over by its components, a torchrl ``CheckpointRotation`` by its policy
  (``directory``, ``keep_last``, ``keep_best``, ``prefix``) as a
  :class:`~opencheckpoint.run.Rotation`;
* the process-global RNGs (Python, NumPy, torch) are stored too, as component
  ``rng``, restored after every other component, so a resumed run draws the
  same exploration noise and replay samples;
* ``load_from_file`` takes an OpenCheckpoint checkpoint or a rotation directory
  (its latest checkpoint), verifies every component before any is restored,
  and refuses ``weights_only=False``: nothing is ever unpickled.

Components keep torchrl's names (``policy``, ``loss_module``, ``optimizer``,
``collector``, ``replay_buffer``, ``trainer_state``, ``trainer_module.<hook>``,
``rng``): each is a ``tree`` component, readable with
:func:`opencheckpoint.read_component` without torchrl. A replay buffer is stored
by its ``state_dict`` (storage, sampler, writer, its generator), never by its
``dumps``, which pickles its prefetch queue; a loss module's state dict keeps its
target parameters.
"""

from __future__ import annotations

import pathlib
from collections import OrderedDict
from typing import Any

import torch
from torchrl import trainers as torchrl_trainers
from torchrl.checkpoint import Checkpoint as TorchRLCheckpoint
from torchrl.checkpoint import CheckpointRotation as TorchRLRotation
from torchrl.collectors import Collector
from torchrl.objectives import LossModule

from ..adapters.base import Adapter, ComponentReader, ComponentWriter, PreparedRestore
from ..adapters.torch import (
    VERSION_METADATA_KEY,
    ModuleAdapter,
    TorchStateDictAdapter,
    _class_hint,
    _version_metadata,
)
from ..checkpoint import Checkpoint
from ..format.errors import IncompatibleComponent, NotACheckpoint, UnsupportedValue
from ..loading import LoadResult
from ..location import PathArg
from ..options import CheckpointOptions
from ..read.probe import is_checkpoint
from ..run.checkpointer import resolve_checkpoint_path
from ..run.rng import GlobalRNGState
from ..run.rotation import Rotation

#: The name of the process-global RNG component :class:`Trainer` adds.
RNG_COMPONENT = "rng"
#: ``load_from_file`` keywords that torchrl hands to ``torch.load``: meaningless here (nothing is unpickled).
_TORCH_LOAD_KEYWORDS = frozenset({"weights_only", "mmap"})
#: Where a torchrl loss module's state dict holds its value estimator's buffers.
_ESTIMATOR_PREFIX = "_value_estimator."


class LossModuleAdapter(ModuleAdapter):
    """A torchrl ``LossModule``: its state dict (parameters and target parameters) as a tree.

    A loss module holds its networks as ``TensorDictParams``, whose state dict
    records each one's batch size and device in ``_metadata``; they are the live
    module's shape, not state (``TensorDictParams`` never reads them back), so
    they are left out and the module's own versions kept, as for any module.
    """

    def save(self, value: torch.nn.Module, writer: ComponentWriter) -> None:
        writer.hints.update(framework="torch", **{"class": _class_hint(value)})
        state = value.state_dict()
        metadata = getattr(state, "_metadata", None)
        if metadata is not None:
            state._metadata = OrderedDict(  # type: ignore[attr-defined]  # torch's convention
                (prefix, entry) for prefix, entry in metadata.items() if not _is_tensordict_shape(entry))
        versions = _version_metadata(state)
        if versions is not None:
            writer.metadata = {VERSION_METADATA_KEY: versions}
        writer.write_tree(dict(state))

    def prepare(self, value: Any, reader: ComponentReader, *, strict: str) -> PreparedRestore:
        # A loss builds its value estimator (whose buffers, e.g. gamma, are in its state dict) on first use: a
        # loss saved after training has one, a fresh loss not yet. Build it as that first use would (torchrl's
        # defaults), so the stored buffers have their place; they are then checked and restored like the rest.
        root = reader.reader.decoded_layout(reader.name)[0].root
        if (getattr(value, "_value_estimator", False) is None and isinstance(root, dict)
                and any(str(key).startswith(_ESTIMATOR_PREFIX) for key in root)):
            value._default_value_estimator()
        return super().prepare(value, reader, strict=strict)


def _is_tensordict_shape(entry: Any) -> bool:
    """A ``_metadata`` entry that tensordict writes for a ``TensorDictParams``: ``{batch_size, device}``."""
    return isinstance(entry, dict) and set(entry) == {"batch_size", "device"}


class _CollectorState:
    """A single-process collector's state: its ``state_dict`` and the rollout carrier it continues from.

    torchrl's collector ``state_dict`` holds the policy, the environment's transforms,
    the frame and iteration counts and the trajectory id pool, but not the carrier: the
    step data (observation, trajectory ids) of each environment the next batch starts
    from. Without it a resumed collector starts from a fresh reset with new trajectory
    ids; with it the next batch is the one an uninterrupted run collects (for an
    environment whose own state is in that step data or in its transforms).
    """

    def __init__(self, collector: Any) -> None:
        self.collector = collector

    def state_dict(self) -> dict[str, Any]:
        state = {"state_dict": self.collector.state_dict()}
        carrier = getattr(self.collector, "_carrier", None)
        if carrier is not None:
            state["carrier"] = carrier.to_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        carrier = None
        if "carrier" in state:  # checked before the collector changes
            carrier = _fitting_carrier(self.collector, state["carrier"])
        self.collector.load_state_dict(state["state_dict"])
        if carrier is not None:
            # torchrl's load starts a fresh trajectory (it cannot know the carrier) and draws its id from the
            # pool: with the carrier back, the stored trajectory goes on, and so does the pool's count.
            self.collector._carrier = carrier
            pool = state["state_dict"].get("traj_pool")
            if pool is not None and self.collector.track_traj_ids:
                self.collector._traj_pool.load_state_dict(pool)


def _fitting_carrier(collector: Any, stored: dict[str, Any]) -> Any:
    """The stored carrier as a TensorDict like the live one (keys, shapes, dtypes), or IncompatibleComponent."""
    from tensordict import TensorDict

    live = getattr(collector, "_carrier", None)
    if live is None:
        raise IncompatibleComponent("the stored collector has a rollout carrier; this collector has none (only "
                                    "single-process collectors are supported)")
    carrier = TensorDict(stored, batch_size=live.batch_size, device=live.device)
    # A fresh carrier holds what the environment's reset gives; a carrier saved between batches also holds
    # what the policy wrote into it: every entry of the live one must be stored, with its shape and dtype.
    missing = sorted(set(_leaf_keys(live)) - set(_leaf_keys(carrier)))
    if missing:
        raise IncompatibleComponent(f"the stored rollout carrier lacks entries {missing} this collector has")
    for key in live.keys(True, True):
        if (carrier[key].shape, carrier[key].dtype) != (live[key].shape, live[key].dtype):
            raise IncompatibleComponent(f"rollout carrier entry {key}: stored {carrier[key].dtype}"
                                        f"{list(carrier[key].shape)}, live {live[key].dtype}{list(live[key].shape)}")
    return carrier


def _leaf_keys(data: Any) -> list[tuple[str, ...]]:
    return sorted(key if isinstance(key, tuple) else (key,) for key in data.keys(True, True))


class CollectorAdapter(Adapter):
    """A torchrl single-process collector (``Collector``): its state dict and rollout carrier as a tree."""

    kind = "tree"

    def save(self, value: Any, writer: ComponentWriter) -> None:
        TorchStateDictAdapter().save(_CollectorState(value), writer)
        writer.hints["class"] = _class_hint(value)

    def prepare(self, value: Any, reader: ComponentReader, *, strict: str) -> PreparedRestore:
        return TorchStateDictAdapter().prepare(_CollectorState(value), reader, strict=strict)


def adapter_for(value: Any) -> Adapter | None:
    """The adapter a torchrl object needs beyond the library's own choice, else None.

    >>> adapter_for(torch.nn.Linear(1, 1)) is None
    True
    """
    if isinstance(value, LossModule):
        return LossModuleAdapter()
    if isinstance(value, Collector):
        return CollectorAdapter()
    return None


class TrainerCheckpoint(Checkpoint):
    """An OpenCheckpoint :class:`~opencheckpoint.Checkpoint` that takes torchrl ``Trainer``'s calls.

    ``register`` picks :class:`LossModuleAdapter` for loss modules;
    ``load`` accepts torchrl's ``tensor_load_kwargs`` (arguments for
    ``torch.load``) and refuses ``weights_only=False``, since nothing is unpickled.
    """

    def register(self, name: str, value: Any, adapter: Adapter | None = None, *,
                 options: CheckpointOptions | None = None) -> Checkpoint:
        if adapter is None and (options is None or options.adapter is None):
            adapter = adapter_for(value)
        return super().register(name, value, adapter, options=options)

    def load(self, path: PathArg, *, tensor_load_kwargs: dict[str, Any] | None = None,
             **kwargs: Any) -> LoadResult:
        check_torch_load_keywords(tensor_load_kwargs or {}, str(path))
        return super().load(path, **kwargs)


def check_torch_load_keywords(keywords: dict[str, Any], path: str) -> None:
    """Refuse what would need unpickling (``weights_only=False``) or another ``torch.load`` feature.

    >>> check_torch_load_keywords({"weights_only": True, "mmap": True}, "run")
    >>> check_torch_load_keywords({"weights_only": False}, "run")
    Traceback (most recent call last):
    ...
    opencheckpoint.format.errors.UnsupportedValue: UnsupportedValue: run: weights_only: ...
    """
    if keywords.get("weights_only", True) is False:
        raise UnsupportedValue("OpenCheckpoint checkpoints hold no pickles and are never unpickled: drop "
                               "weights_only=False", file=path, field="weights_only")
    unknown = sorted(set(keywords) - _TORCH_LOAD_KEYWORDS)
    if unknown:
        raise UnsupportedValue(f"torch.load arguments {unknown} do not apply: an OpenCheckpoint checkpoint is "
                               "read without torch.load (map_location= and strict= do)", file=path,
                               field=unknown[0])


def _as_checkpoint(checkpoint: Any) -> TrainerCheckpoint:
    """The trainer's checkpoint object: a new one, the one given, or a torchrl one taken over by its components."""
    if checkpoint is None:
        return TrainerCheckpoint()
    if isinstance(checkpoint, TrainerCheckpoint):
        return checkpoint
    if isinstance(checkpoint, TorchRLCheckpoint):
        taken = TrainerCheckpoint(format=checkpoint.format, strict=checkpoint.strict,
                                  save_components=checkpoint.save_components)
        for name, value in checkpoint.components.items():
            taken.register(name, value)
        return taken
    raise TypeError(f"checkpoint must be an opencheckpoint.integrations.torchrl.TrainerCheckpoint or a torchrl "
                    f"Checkpoint, not {type(checkpoint).__name__} (an opencheckpoint.Checkpoint lacks torchrl's "
                    "load arguments: use TrainerCheckpoint)")


def _as_rotation(rotation: Any) -> Rotation | None:
    """OpenCheckpoint's :class:`Rotation` for the one given (a torchrl ``CheckpointRotation`` by its policy)."""
    if rotation is None or isinstance(rotation, Rotation):
        return rotation
    if isinstance(rotation, TorchRLRotation):
        return Rotation(rotation.directory, keep_last=rotation.keep_last, keep_best=rotation.keep_best,
                        prefix=rotation.prefix)
    raise TypeError(f"checkpoint_rotation must be an opencheckpoint.run.Rotation or a torchrl CheckpointRotation, "
                    f"not {type(rotation).__name__}")


class Trainer(torchrl_trainers.Trainer):  # type: ignore[misc]  # torchrl ships no types: its Trainer is Any
    """torchrl's ``Trainer`` saving and resuming through OpenCheckpoint (see the module docstring).

    Takes torchrl's arguments. ``checkpoint`` (default: a new
    :class:`TrainerCheckpoint`) and ``checkpoint_rotation`` may be torchrl's
    objects: they are taken over. ``learner_backend="ray"`` is refused (its
    services are restored in an order of their own).
    """

    def __init__(self, *args: Any, checkpoint: Any = None, checkpoint_rotation: Any = None,
                 **kwargs: Any) -> None:
        if kwargs.get("learner_backend", "local") != "local":
            raise UnsupportedValue("the OpenCheckpoint Trainer supports learner_backend='local' only",
                                   field="learner_backend")
        ours = _as_checkpoint(checkpoint)
        if RNG_COMPONENT not in ours:
            ours.register(RNG_COMPONENT, GlobalRNGState())
        super().__init__(*args, checkpoint=ours, checkpoint_rotation=_as_rotation(checkpoint_rotation), **kwargs)

    def load_from_file(self, file: str | pathlib.Path, **kwargs: Any) -> Trainer:
        """Restore the trainer from an OpenCheckpoint checkpoint, or a rotation directory's latest one.

        Every component is read and verified before any is restored. ``map_location``
        (default ``"cpu"``) and ``strict`` as torchrl's; ``weights_only=False`` is refused.
        A torchrl checkpoint or a legacy ``CKPT_BACKEND`` file goes to torchrl's own loader.
        """
        path = _opencheckpoint_path(file)
        if path is None:
            return super().load_from_file(file, **kwargs)  # type: ignore[no-any-return]
        map_location = kwargs.pop("map_location", "cpu")
        strict = kwargs.pop("strict", None)
        check_torch_load_keywords(kwargs, str(path))
        checkpoint = self._sync_checkpoint_components(self.checkpoint)
        result = checkpoint.load(path, map_location=map_location, strict=strict)
        if "policy" in result.loaded:  # as torchrl does: the collector's copies see the restored weights
            policy = checkpoint.components["policy"]
            if policy is self._checkpoint_policy():
                self.collector.update_policy_weights_()
            else:
                self.collector.update_policy_weights_(policy)
        return self


def _opencheckpoint_path(file: str | pathlib.Path) -> Any:
    """The OpenCheckpoint checkpoint ``file`` names (itself, or a rotation directory's latest), else None."""
    if TorchRLCheckpoint.is_checkpoint(file):
        return None
    if is_checkpoint(file):
        return file
    try:
        return resolve_checkpoint_path(file)
    except NotACheckpoint:
        return None


__all__ = ["RNG_COMPONENT", "CollectorAdapter", "LossModuleAdapter", "Trainer", "TrainerCheckpoint", "adapter_for",
           "check_torch_load_keywords"]
