"""20,000 arrays of 1 KiB: per-array overhead of OpenCheckpoint vs the peers (save and load times)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

import opencheckpoint
from common import Context, remove
from peers import torchrl_checkpoint
from state import make_tiny_arrays, torch_tensors
from timing import measure, settle_writes

GROUP = "tiny arrays"


def _pair(ctx: Context, name: str, path: Path, save: Any, load: Any, repeat: int) -> None:
    def before() -> None:
        remove(path)
        settle_writes()

    ctx.step(f"tiny: {name} save")
    ctx.record(GROUP, f"{name} save", measure(save, repeat=repeat, setup=before), None)
    ctx.step(f"tiny: {name} load")
    ctx.record(GROUP, f"{name} load", measure(load, repeat=repeat), None)
    remove(path)


def run(ctx: Context, count: int = 20_000) -> None:
    import safetensors.numpy
    import torch

    arrays = make_tiny_arrays(count)
    repeat = max(3, ctx.repeat)

    path = ctx.tmp / "tiny-ours"
    for durable, label in ((False, "OpenCheckpoint"), (True, "OpenCheckpoint durable")):
        checkpoint = opencheckpoint.Checkpoint(tiny=arrays, durable=durable)
        _pair(ctx, label, path, partial(checkpoint.save, path),
              lambda: opencheckpoint.read_component(path, "tiny"), repeat)

    st_path = ctx.tmp / "tiny.safetensors"
    _pair(ctx, "safetensors", st_path, lambda: safetensors.numpy.save_file(arrays, st_path),
          lambda: safetensors.numpy.load_file(st_path), repeat)

    tensors = torch_tensors(arrays)
    pt_path = ctx.tmp / "tiny.pt"
    _pair(ctx, "torch", pt_path, lambda: torch.save(tensors, pt_path),
          lambda: torch.load(pt_path, weights_only=True), repeat)

    if ctx.quick:
        ctx.skip(GROUP, "np.savez, torchrl, orbax", "--quick")
        return

    npz_path = ctx.tmp / "tiny.npz"

    def npz_load() -> dict[str, np.ndarray]:
        with np.load(npz_path) as archive:
            return {key: archive[key] for key in archive.files}

    _pair(ctx, "np.savez", npz_path, lambda: np.savez(npz_path, **arrays), npz_load, repeat)  # type: ignore[arg-type]  # numpy's stub: a key could be allow_pickle

    checkpoint_class = torchrl_checkpoint()
    if checkpoint_class is None:
        ctx.skip(GROUP, "torchrl", "this torchrl has no torchrl.checkpoint module")
    else:
        holder = _TensorHolder(tensors)
        rl_path = ctx.tmp / "tiny-torchrl"
        _pair(ctx, "torchrl", rl_path, lambda: checkpoint_class(tiny=holder).save(rl_path),
              lambda: checkpoint_class(tiny=_TensorHolder(dict(tensors))).load(rl_path), 1)

    try:
        import orbax.checkpoint as ocp
    except ImportError as exc:
        ctx.skip(GROUP, "orbax", f"orbax not importable: {exc}")
        return
    checkpointer = ocp.StandardCheckpointer()
    ob_path = ctx.tmp / "tiny-orbax"

    def ob_save() -> None:
        checkpointer.save(ob_path.absolute(), arrays)
        checkpointer.wait_until_finished()

    _pair(ctx, "orbax", ob_path, ob_save, lambda: checkpointer.restore(ob_path.absolute()), 1)
    checkpointer.close()


class _TensorHolder:
    """A state_dict/load_state_dict object over a dict of tensors (what torchrl's adapter expects)."""

    def __init__(self, tensors: dict[str, Any]) -> None:
        self.tensors = tensors

    def state_dict(self) -> dict[str, Any]:
        return dict(self.tensors)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.tensors.update(state)
