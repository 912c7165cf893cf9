"""Hugging Face Accelerate's ``save_state`` / ``load_state`` writing one OpenCheckpoint checkpoint.

Accelerate's own ``save_state`` writes the models with safetensors but the
optimizers, schedulers, samplers, RNG states and registered objects with
``torch.save`` (pickle), and its save/load pre-hooks see only the models, so
no hook can route the rest. This module gathers the same objects from the
accelerator and saves them as the components of one checkpoint:

==================  ==========================================================
component           what it holds
==================  ==========================================================
``model``           the first prepared model (``model_1``, ... for the others)
``optimizer``       its optimizer's ``state_dict`` (``optimizer_1``, ...)
``scheduler``       its learning rate scheduler's ``state_dict`` (``scheduler_1``, ...)
``dataloader``      the prepared data loader's epoch counter, its seedable
                    sampler's seed and epoch, a stateful loader's ``state_dict``
``scaler``          the ``GradScaler`` (mixed precision only)
``custom_0``        each object given to ``register_for_checkpointing``, by its
                    ``state_dict`` (``custom_1``, ...)
``accelerator``     ``accelerator.step`` (the gradient accumulation counter)
``rng``             Python's, NumPy's and torch's global random states
==================  ==========================================================

Nothing is pickled: a value the format cannot store exactly (a custom
object's ``state_dict`` holding an arbitrary Python object) is refused at
save with :class:`~opencheckpoint.UnsupportedValue` naming the component and
the path inside it, before anything is written. ``load_state`` checks every
component against the live objects before it changes any (verify-first).

The one line to change: ``Accelerator(...)`` becomes ``OpenCheckpointAccelerator(...)``
(or call :func:`save_state` / :func:`load_state` with the accelerator):

>>> import os, tempfile, torch
>>> from opencheckpoint.integrations.hf_accelerate import OpenCheckpointAccelerator
>>> accelerator = OpenCheckpointAccelerator(cpu=True)
>>> model = torch.nn.Linear(2, 2)
>>> model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
>>> path = accelerator.save_state(os.path.join(tempfile.mkdtemp(), "state"))
>>> with torch.no_grad():
...     _ = model.weight.zero_()
>>> accelerator.load_state(path)
>>> bool(model.weight.abs().sum() > 0)
True
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from accelerate import Accelerator
from accelerate.data_loader import SeedableRandomSampler
from accelerate.utils import DistributedType

from ..checkpoint import Checkpoint
from ..format.errors import UnsupportedValue
from ..loading import LoadResult
from ..run.rng import GlobalRNGState

#: Accelerate's own sharded or engine-managed saves, which this integration does not replace yet.
_UNSUPPORTED_TYPES = {DistributedType.FSDP: "FSDP", DistributedType.DEEPSPEED: "DeepSpeed",
                      DistributedType.MEGATRON_LM: "Megatron-LM", DistributedType.XLA: "XLA"}


def _indexed(name: str, index: int) -> str:
    """Accelerate's numbering: the first object has the plain name, then ``name_1``, ``name_2``, ..."""
    return name if index == 0 else f"{name}_{index}"


class _AcceleratorCounters:
    """The accelerator's own counter that ``save_state`` stores (``step``), as a state dict."""

    def __init__(self, accelerator: Accelerator) -> None:
        self.accelerator = accelerator

    def state_dict(self) -> dict[str, Any]:
        return {"step": int(self.accelerator.step)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.accelerator.step = int(state["step"])


class _DataLoaderState:
    """What a prepared data loader needs to replay its order: the epoch counter (``iteration``), the seed and
    epoch of a ``SeedableRandomSampler``, and a stateful loader's own ``state_dict`` (torchdata)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def _sampler(self) -> SeedableRandomSampler | None:
        get_sampler = getattr(self.loader, "get_sampler", None)
        sampler = get_sampler() if callable(get_sampler) else None
        return sampler if isinstance(sampler, SeedableRandomSampler) else None

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"iteration": int(getattr(self.loader, "iteration", 0))}
        sampler = self._sampler()
        if sampler is not None:
            state["sampler"] = {"epoch": int(sampler.epoch), "initial_seed": int(sampler.initial_seed)}
        if getattr(self.loader, "use_stateful_dataloader", False):
            state["stateful"] = self.loader.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if hasattr(self.loader, "iteration"):
            self.loader.iteration = int(state["iteration"])
        sampler = self._sampler()
        if sampler is not None and "sampler" in state:
            sampler.epoch = int(state["sampler"]["epoch"])
            sampler.initial_seed = int(state["sampler"]["initial_seed"])
        if "stateful" in state:
            self.loader.load_state_dict(state["stateful"])


def _check_supported(accelerator: Accelerator, hooks: dict[Any, Any], doing: str) -> None:
    """Refuse what this integration would not store as Accelerate does, naming it (nothing is written)."""
    kind = _UNSUPPORTED_TYPES.get(accelerator.distributed_type)
    if kind is not None:
        raise UnsupportedValue(f"{doing}: Accelerate's {kind} checkpoints are not stored by this integration yet; "
                               "use Accelerator.save_state/load_state for them", field="distributed_type")
    if accelerator.num_processes > 1:
        raise UnsupportedValue(f"{doing}: {accelerator.num_processes} processes; this integration saves from one "
                               "process (each rank's RNG state would need a per-rank component)",
                               field="num_processes")
    if accelerator.project_configuration.automatic_checkpoint_naming:
        raise UnsupportedValue(f"{doing}: automatic_checkpoint_naming deletes old folders with shutil.rmtree; "
                               "give the path (opencheckpoint.run.Rotation names and prunes checkpoints safely)",
                               field="project_configuration.automatic_checkpoint_naming")
    if hooks:
        raise UnsupportedValue(f"{doing}: {len(hooks)} registered state pre-hook(s) would write files of their own "
                               "beside the checkpoint's; remove them (handle.remove()) or save such state as a "
                               "registered object", field="register_save_state_pre_hook")


def accelerator_checkpoint(accelerator: Accelerator) -> Checkpoint:
    """A :class:`~opencheckpoint.Checkpoint` of everything ``accelerator.save_state`` would write.

    >>> from accelerate import Accelerator
    >>> import torch
    >>> accelerator = Accelerator(cpu=True)
    >>> _ = accelerator.prepare(torch.nn.Linear(2, 2))
    >>> sorted(accelerator_checkpoint(accelerator).components)
    ['accelerator', 'model', 'rng']
    """
    checkpoint = Checkpoint()
    for index, model in enumerate(accelerator._models):
        checkpoint.register(_indexed("model", index), accelerator.unwrap_model(model))
    for index, optimizer in enumerate(accelerator._optimizers):
        checkpoint.register(_indexed("optimizer", index), getattr(optimizer, "optimizer", optimizer))
    for index, scheduler in enumerate(accelerator._schedulers):
        checkpoint.register(_indexed("scheduler", index), getattr(scheduler, "scheduler", scheduler))
    for index, loader in enumerate(accelerator._dataloaders):
        checkpoint.register(_indexed("dataloader", index), _DataLoaderState(loader))
    if accelerator.scaler is not None:
        checkpoint.register("scaler", accelerator.scaler)
    for index, obj in enumerate(accelerator._custom_objects):
        checkpoint.register(f"custom_{index}", obj)
    checkpoint.register("accelerator", _AcceleratorCounters(accelerator))
    checkpoint.register("rng", GlobalRNGState())
    return checkpoint


def save_state(accelerator: Accelerator, output_dir: str | os.PathLike[str]) -> Path:
    """``accelerator.save_state(output_dir)`` as one OpenCheckpoint checkpoint at ``output_dir``; returns it.

    The save is atomic (the old checkpoint at ``output_dir``, if any, stays whole until the new one is
    published); ``output_dir`` may be missing, empty, or a checkpoint, never a folder of other files.
    """
    _check_supported(accelerator, accelerator._save_model_state_pre_hook, "save_state")
    checkpoint = accelerator_checkpoint(accelerator)
    path = checkpoint.save(Path(output_dir), metadata={"accelerate.step": int(accelerator.step)})
    accelerator.project_configuration.iteration += 1  # as Accelerator.save_state counts its saves
    return path


def load_state(accelerator: Accelerator, input_dir: str | os.PathLike[str]) -> LoadResult:
    """``accelerator.load_state(input_dir)`` from a checkpoint :func:`save_state` wrote.

    Every component is verified and fitted to its live object before any changes (models,
    optimizers, schedulers, loaders, custom objects, the step counter; the RNG streams last).
    """
    _check_supported(accelerator, accelerator._load_model_state_pre_hook, "load_state")
    return accelerator_checkpoint(accelerator).load(Path(input_dir))


class OpenCheckpointAccelerator(Accelerator):  # type: ignore[misc]  # accelerate ships no types: Accelerator is Any
    """An ``Accelerator`` whose ``save_state`` / ``load_state`` write and read OpenCheckpoint checkpoints.

    Everything else is Accelerate's. ``output_dir`` / ``input_dir`` are required (see
    :func:`save_state`); DeepSpeed-style ``save_model_func_kwargs`` are refused.
    """

    def save_state(self, output_dir: str | os.PathLike[str] | None = None, safe_serialization: bool = True,
                   **save_model_func_kwargs: Any) -> Path:
        return save_state(self, _checked_path(output_dir, save_model_func_kwargs, "save_state"))

    def load_state(self, input_dir: str | os.PathLike[str] | None = None, load_kwargs: dict[str, Any] | None = None,
                   **load_model_func_kwargs: Any) -> None:
        load_state(self, _checked_path(input_dir, {**(load_kwargs or {}), **load_model_func_kwargs}, "load_state"))


def _checked_path(path: str | os.PathLike[str] | None, kwargs: dict[str, Any], doing: str) -> str | os.PathLike[str]:
    """The checkpoint's path of an ``Accelerator``-style call; what only Accelerate's serializers use is refused."""
    if path is None:
        raise TypeError(f"{doing} needs the checkpoint's path (automatic_checkpoint_naming is not supported)")
    if kwargs:
        raise TypeError(f"{doing}: arguments for Accelerate's own serializers are not used here: {sorted(kwargs)}")
    return path


__all__ = ["OpenCheckpointAccelerator", "accelerator_checkpoint", "load_state", "save_state"]
