"""``transformers.Trainer`` checkpoints as OpenCheckpoint checkpoints, resumed with ``resume_from_checkpoint``.

The one line to change: ``Trainer(...)`` becomes ``OpenCheckpointTrainer(...)``
(or, for a ``Trainer`` subclass of your own, put :class:`OpenCheckpointTrainerMixin`
first among its bases). Each ``checkpoint-N`` folder of ``output_dir`` is then
one checkpoint, written atomically, with the components

=================  ===========================================================
component          what it holds
=================  ===========================================================
``model``          the model's ``state_dict`` (tied weights stored once)
``optimizer``      the optimizer's ``state_dict``
``scheduler``      the learning rate scheduler's ``state_dict``
``scaler``         the ``GradScaler`` (mixed precision only)
``rng``            Python's, NumPy's and torch's global random states
``trainer_state``  what ``trainer_state.json`` holds (``TrainerState``, callbacks' state)
``training_args``  ``TrainingArguments.to_json_string()`` as data (never read back)
``model_config``   ``model.config`` as data (never read back)
=================  ===========================================================

(``save_only_model=True``: the model and the last three only). Nothing is
pickled; a value that cannot be stored exactly is refused with
:class:`~opencheckpoint.UnsupportedValue` naming the component and path.

``trainer.train(resume_from_checkpoint=PATH or True)`` verifies the whole
checkpoint (every byte) before anything is restored, then restores each part
at the moment ``Trainer`` restores its own files. ``save_total_limit`` keeps
working, but prunes only checkpoints this integration wrote in that folder
(an :class:`opencheckpoint.run.Rotation` with Trainer's ``checkpoint-N`` names):
a ``checkpoint-N`` folder of Trainer's own format, or anything else, is never deleted.

Which ``Trainer`` methods this overrides (private ones: the ``hf`` extra pins
the transformers releases it was tested with): ``_save_checkpoint``, ``train``
(to resolve and verify the checkpoint), ``_init_training_state``,
``_prepare_for_training``, ``_run_epoch``, ``_load_rng_state``, ``_load_best_model``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from transformers import Trainer, TrainerState
from transformers.trainer_callback import ExportableState
from transformers.trainer_utils import (
    PREFIX_CHECKPOINT_DIR,
    SaveStrategy,
    compare_trainer_and_checkpoint_args,
    get_last_checkpoint,
)

from ..adapters.base import TreeAdapter
from ..adapters.torch_optimizer_fit import check_group_keys
from ..checkpoint import Checkpoint
from ..format.errors import CheckpointError, IncompatibleComponent, UnsupportedValue
from ..read.probe import is_checkpoint, manifest
from ..read.reader import open_checkpoint, read_component
from ..read.validate import validate
from ..run.rng import GlobalRNGState
from ..run.rotation import Rotation
from ..run.rotation_policy import ARCHIVE_SUFFIX, STEP_DIGITS

#: keep_last of the rotation that saves (it never prunes: pruning follows Trainer's save_total_limit).
_KEEP_ALL = 10 ** STEP_DIGITS


class TrainerRotation(Rotation):
    """A :class:`~opencheckpoint.run.Rotation` naming checkpoints as ``Trainer`` does: ``checkpoint-N``.

    ``get_last_checkpoint`` and ``resume_from_checkpoint=True`` find them; the
    ownership mark and pruning rules are the rotation's.

    >>> import tempfile
    >>> TrainerRotation(tempfile.mkdtemp()).path_for(500).name
    'checkpoint-500'
    """

    def __init__(self, directory: Any, keep_last: int = _KEEP_ALL) -> None:
        super().__init__(directory, keep_last=keep_last, prefix=PREFIX_CHECKPOINT_DIR)

    def path_for(self, step: int, format: Any = "directory") -> Any:
        return self.directory / f"{self.prefix}-{step}{ARCHIVE_SUFFIX if format == 'archive' else ''}"


def _trainer_state_tree(state: TrainerState) -> dict[str, Any]:
    """``TrainerState`` as ``save_to_json`` writes it (a tree: a NaN loss in ``log_history`` is stored too)."""
    return dataclasses.asdict(state)


def _as_data(json_text: str) -> Any:
    """A library's own JSON rendering as plain data (what it would write beside the weights)."""
    return json.loads(json_text)


def _unwrapped(value: Any, attribute: str) -> Any:
    """The torch object inside Accelerate's wrapper (``AcceleratedOptimizer.optimizer``), or the value itself."""
    return getattr(value, attribute, value) if type(value).__module__.startswith("accelerate") else value


class OpenCheckpointTrainerMixin:
    """Makes a ``transformers.Trainer`` (subclass) save and resume OpenCheckpoint checkpoints.

    Put it first among the bases: ``class MyTrainer(OpenCheckpointTrainerMixin, Trainer)``.
    """

    _oc_resume: Path | None = None

    # -- saving -----------------------------------------------------------------------------------
    def _oc_checkpoint(self, *, model_only: bool) -> Checkpoint:
        """The components of a checkpoint of this trainer, as they are now."""
        trainer: Any = self
        checkpoint = Checkpoint()
        checkpoint.register("model", trainer.model)
        if not model_only:
            checkpoint.register("optimizer", _unwrapped(trainer.optimizer, "optimizer"))
            checkpoint.register("scheduler", _unwrapped(trainer.lr_scheduler, "scheduler"))
            if trainer.accelerator.scaler is not None:
                checkpoint.register("scaler", trainer.accelerator.scaler)
            checkpoint.register("rng", GlobalRNGState())
        checkpoint.register("trainer_state", _trainer_state_tree(trainer.state), TreeAdapter())
        checkpoint.register("training_args", _as_data(trainer.args.to_json_string()), TreeAdapter())
        config = getattr(trainer.model, "config", None)
        checkpoint.register("model_config", _as_data(config.to_json_string()) if config is not None else None,
                            TreeAdapter())
        return checkpoint

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        """``Trainer._save_checkpoint``: the same bookkeeping, one atomic checkpoint, pruning that deletes only ours."""
        trainer: Any = self
        _check_one_process(trainer, "saving a checkpoint")
        if trainer.hp_search_backend is None and trial is None:
            trainer.store_flos()
        run_dir = Path(trainer._get_output_dir(trial=trial))
        step = trainer.state.global_step
        rotation = TrainerRotation(run_dir)
        if trainer.args.save_strategy in (SaveStrategy.STEPS, SaveStrategy.EPOCH, SaveStrategy.BEST) \
                and trainer.state.best_global_step:
            best = rotation.path_for(trainer.state.best_global_step)
            if best.exists() or best == rotation.path_for(step):  # the best may be the one saved now
                trainer.state.best_model_checkpoint = str(best)
        if not trainer.args.should_save:
            return
        for callback in [*trainer.callback_handler.callbacks, trainer.control]:
            if isinstance(callback, ExportableState):  # as Trainer records its stateful callbacks
                stored = trainer.state.stateful_callbacks.get(type(callback).__name__)
                if isinstance(stored, list):
                    stored.append(callback.state())
                else:
                    trainer.state.stateful_callbacks[type(callback).__name__] = callback.state()
        checkpoint = self._oc_checkpoint(model_only=trainer.args.save_only_model)
        path = rotation.save(checkpoint, step, metadata={"transformers.global_step": step})
        limit = trainer.args.save_total_limit
        if limit is not None and limit > 0:
            best_path = trainer.state.best_model_checkpoint
            protect = [path, *([Path(best_path)] if best_path else [])]
            TrainerRotation(run_dir, keep_last=limit).prune(protect=protect)

    # -- resuming ---------------------------------------------------------------------------------
    def train(self, resume_from_checkpoint: str | bool | None = None, trial: Any = None,
              ignore_keys_for_eval: list[str] | None = None, **kwargs: Any) -> Any:
        """``Trainer.train``; ``resume_from_checkpoint`` (a path, or True: the last ``checkpoint-N`` of
        ``output_dir``) names a checkpoint this integration wrote, verified whole before anything is restored."""
        self._oc_resume = self._oc_resolve(resume_from_checkpoint)
        try:  # Trainer runs as for a fresh start; the overrides below restore where it loads its own files
            return super().train(resume_from_checkpoint=None, trial=trial,  # type: ignore[misc]
                                 ignore_keys_for_eval=ignore_keys_for_eval, **kwargs)
        finally:
            self._oc_resume = None

    def _oc_resolve(self, resume_from_checkpoint: str | bool | None) -> Path | None:
        trainer: Any = self
        if resume_from_checkpoint is None or resume_from_checkpoint is False:
            return None
        if resume_from_checkpoint is True:
            found = get_last_checkpoint(trainer.args.output_dir)  # type: ignore[no-untyped-call]  # untyped upstream
            if found is None:
                raise ValueError(f"No valid checkpoint found in output directory ({trainer.args.output_dir})")
            resume_from_checkpoint = found
        path = Path(str(resume_from_checkpoint))
        _check_one_process(trainer, "resuming")
        if not is_checkpoint(path):
            native = (path / "trainer_state.json").is_file()
            raise CheckpointError(
                "not an OpenCheckpoint checkpoint" + (": a checkpoint of Trainer's own format (resume from it with "
                                                      "the plain Trainer once; its next saves are OpenCheckpoint's)"
                                                      if native else ""), file=str(path))
        report = validate(path)
        if not report.ok:
            raise CheckpointError(f"fails verification, nothing was restored: {report.errors[0]}", file=str(path))
        return path

    def _oc_load(self, components: tuple[str, ...]) -> None:
        """Restore the live objects of ``components`` (those present in the live trainer) from the checkpoint."""
        assert self._oc_resume is not None
        live = self._oc_checkpoint(model_only=False)
        wanted = [name for name in components if name in live]
        missing = [name for name in wanted if name not in _stored(self._oc_resume)]
        if missing:
            raise IncompatibleComponent(f"the checkpoint holds no {', '.join(missing)} to resume training from "
                                        "(saved with save_only_model=True?)", file=str(self._oc_resume))
        live.load(self._oc_resume, components=wanted)

    def _init_training_state(self, max_steps: int, num_update_steps_per_epoch: int, num_train_epochs: int,
                             resume_from_checkpoint: str | None, trial: Any) -> tuple[int, int]:
        """Trainer's fresh state, then (resuming) the model's weights, the stored ``TrainerState`` and the
        epochs and steps to skip, as ``Trainer`` computes them from its ``trainer_state.json``."""
        trainer: Any = self
        result = super()._init_training_state(  # type: ignore[misc]
            max_steps, num_update_steps_per_epoch, num_train_epochs, resume_from_checkpoint, trial)
        if self._oc_resume is None:
            return result  # type: ignore[no-any-return]
        self._oc_check_optimizer_fit()  # Trainer builds its optimizer later: its class is checked now
        self._oc_load(("model",))  # before accelerator.prepare, where Trainer loads its weights
        trainer.state = TrainerState(**read_component(self._oc_resume, "trainer_state"))
        best = trainer.state.best_model_checkpoint
        if best is not None and not os.path.isdir(best):
            trainer.state.best_model_checkpoint = None
        compare_trainer_and_checkpoint_args(trainer.args, trainer.state)  # type: ignore[no-untyped-call]  # untyped upstream
        trainer._load_callback_state()
        epochs_trained = int(trainer.state.global_step // num_update_steps_per_epoch)
        steps_trained = 0
        if not trainer.args.ignore_data_skip:
            steps_trained = trainer.state.global_step % num_update_steps_per_epoch
            steps_trained *= trainer.args.gradient_accumulation_steps
        trainer.state.init_training_references(trainer, max_steps, num_train_epochs, trial)
        return epochs_trained, steps_trained

    def _oc_check_optimizer_fit(self) -> None:
        """The stored optimizer groups carry the keys of the optimizer Trainer will build (or was given),
        checked before the model is restored: a checkpoint of ``optim="adamw_torch"`` resumed with
        ``optim="sgd"`` is refused with nothing changed (the load of the optimizer checks it again)."""
        assert self._oc_resume is not None
        trainer: Any = self
        if "optimizer" not in _stored(self._oc_resume):
            return
        live_groups = _optimizer_groups(trainer)
        if live_groups is None:
            return
        with open_checkpoint(self._oc_resume) as stored:
            groups = stored.tree("optimizer").get("param_groups")
        if not isinstance(groups, list):
            return  # not an optimizer state dict: the optimizer's own load refuses it
        which = type(trainer.optimizer).__name__ if trainer.optimizer else _optim_name(trainer.args)
        prefix = f"components.optimizer: {which} (checked before restoring anything): "
        for index, group in enumerate(groups):
            if isinstance(group, dict):
                try:
                    check_group_keys(group, live_groups[min(index, len(live_groups) - 1)],
                                     prefix + f"parameter group {index}: ")
                except IncompatibleComponent as exc:
                    raise IncompatibleComponent(str(exc), file=str(self._oc_resume)) from None

    def _prepare_for_training(self, max_steps: int, train_dataloader: Any, resume_from_checkpoint: Any) -> Any:
        """Trainer's preparation, then (resuming) the optimizer, scheduler and scaler, where Trainer loads them."""
        prepared = super()._prepare_for_training(max_steps, train_dataloader, None)  # type: ignore[misc]
        if self._oc_resume is not None:
            self._oc_load(("optimizer", "scheduler", "scaler"))
        return prepared

    def _run_epoch(self, *args: Any, **kwargs: Any) -> Any:
        """Trainer's epoch, told it resumes (it skips the trained batches and restores the RNG streams)."""
        if self._oc_resume is not None:
            kwargs["resume_from_checkpoint"] = str(self._oc_resume)
        return super()._run_epoch(*args, **kwargs)  # type: ignore[misc]

    def _load_rng_state(self, checkpoint: str | None) -> None:
        if checkpoint is not None and self._oc_resume is not None:
            self._oc_load(("rng",))

    def _load_best_model(self) -> None:
        """The best checkpoint's weights into the model (``load_best_model_at_end``), verified first."""
        trainer: Any = self
        best = trainer.state.best_model_checkpoint
        if best is None or not is_checkpoint(best):
            super()._load_best_model()  # type: ignore[misc]
            return
        Checkpoint(model=trainer.model).load(best, components=["model"])


def _optimizer_groups(trainer: Any) -> list[dict[str, Any]] | None:
    """The param groups of the trainer's optimizer, or of a scratch one of the class ``args.optim`` names
    (on a one-element parameter); None where that class cannot be built here (it is checked at its load)."""
    if trainer.optimizer is not None:
        return list(_unwrapped(trainer.optimizer, "optimizer").param_groups)
    import torch

    try:
        cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(trainer.args, trainer.model)
        return list(cls([torch.nn.Parameter(torch.zeros(1))], **kwargs).param_groups)
    except Exception:  # optimizers needing the model or a GPU (GaLore, bitsandbytes...)
        return None


def _optim_name(args: Any) -> str:
    return f"optim={getattr(args.optim, 'value', args.optim)!r}"


def _stored(path: Path) -> set[str]:
    return set(manifest(path)["components"])


def _check_one_process(trainer: Any, doing: str) -> None:
    if trainer.args.world_size > 1:
        raise UnsupportedValue(f"{doing}: {trainer.args.world_size} processes; this integration saves and resumes "
                               "from one process (each rank's RNG state would need a per-rank component)",
                               field="world_size")


class OpenCheckpointTrainer(OpenCheckpointTrainerMixin, Trainer):
    """``transformers.Trainer`` whose ``checkpoint-N`` folders are OpenCheckpoint checkpoints (module docstring)."""


__all__ = ["OpenCheckpointTrainer", "OpenCheckpointTrainerMixin", "TrainerRotation"]
