"""Peers measured in the same run: torch, safetensors, NumPy .npz, torchrl Checkpoint, orbax."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from common import Context, remove
from state import ArrayModule, torch_module, torch_tensors, touched_like
from timing import measure, settle_writes


def _saver(ctx: Context, name: str, path: Path, save: Callable[[], Any], nbytes: int, *, group: str = "peer",
           repeat: int | None = None) -> None:
    def before() -> None:
        remove(path)
        settle_writes()

    ctx.step(f"{name}")
    ctx.record(group, name, measure(save, repeat=repeat or ctx.repeat, setup=before), nbytes)


def run(ctx: Context) -> None:
    arrays = ctx.arrays
    total = ctx.nbytes
    _torch(ctx, arrays, total)
    _safetensors(ctx, arrays, total)
    _npz(ctx, arrays, total)
    _torchrl(ctx, arrays, total)
    if ctx.quick:
        ctx.skip("peer", "orbax StandardCheckpointer", "--quick (orbax takes seconds per GiB)")
    else:
        _orbax(ctx, arrays, total)


def _torch(ctx: Context, arrays: dict[str, np.ndarray], total: int) -> None:
    import torch

    tensors = torch_tensors(arrays)
    path = ctx.tmp / "torch.pt"
    _saver(ctx, "torch.save", path, lambda: torch.save(tensors, path), total)
    ctx.step("torch.load(weights_only=True)")
    ctx.record("peer", "torch.load", measure(lambda: torch.load(path, weights_only=True), repeat=ctx.repeat), total)
    ctx.step("torch.load(weights_only=True, mmap=True)")
    ctx.record("peer", "torch.load mmap", measure(lambda: torch.load(path, weights_only=True, mmap=True),
                                                  repeat=ctx.repeat), total)
    module = torch_module(arrays, share=False)
    ctx.step("torch.load + load_state_dict")
    ctx.record("peer", "torch.load + load_state_dict", measure(
        lambda: module.load_state_dict(torch.load(path, weights_only=True)), repeat=ctx.repeat), total)
    ctx.step("torch.load(mmap=True) + load_state_dict")
    ctx.record("peer", "torch.load mmap + load_state_dict", measure(
        lambda: module.load_state_dict(torch.load(path, weights_only=True, mmap=True)), repeat=ctx.repeat), total)
    remove(path)


def _safetensors(ctx: Context, arrays: dict[str, np.ndarray], total: int) -> None:
    import safetensors.numpy
    import safetensors.torch

    path = ctx.tmp / "model.safetensors"
    _saver(ctx, "safetensors save", path, lambda: safetensors.numpy.save_file(arrays, path), total)
    ctx.step("safetensors load (torch)")
    ctx.record("peer", "safetensors load", measure(lambda: safetensors.torch.load_file(path), repeat=ctx.repeat),
               total)
    ctx.step("safetensors load (numpy)")
    ctx.record("peer", "safetensors load numpy", measure(lambda: safetensors.numpy.load_file(path),
                                                         repeat=ctx.repeat), total)
    module = torch_module(arrays, share=False)
    ctx.step("safetensors load + load_state_dict")
    ctx.record("peer", "safetensors + load_state_dict", measure(
        partial(_load_state_dict, module, safetensors.torch.load_file, path), repeat=ctx.repeat), total)
    del module  # free its parameters before the NumPy copy below allocates its own
    numpy_model = ArrayModule(touched_like(arrays))
    ctx.step("safetensors load + copy into existing NumPy arrays")
    ctx.record("peer", "safetensors + copy into numpy", measure(
        lambda: numpy_model.load_state_dict(safetensors.numpy.load_file(path)), repeat=ctx.repeat), total)
    remove(path)


def _load_state_dict(module: Any, load: Callable[[Path], Any], path: Path) -> Any:
    """``module.load_state_dict(load(path))``: bound with ``partial``, so the ``del module`` after the
    measurement cannot leave a closure pointing at a deleted name."""
    return module.load_state_dict(load(path))


def _npz(ctx: Context, arrays: dict[str, np.ndarray], total: int) -> None:
    path = ctx.tmp / "state.npz"
    _saver(ctx, "np.savez", path, lambda: np.savez(path, **arrays), total)  # type: ignore[arg-type]  # numpy's stub: a key could be allow_pickle

    def load() -> dict[str, np.ndarray]:
        with np.load(path) as archive:
            return {key: archive[key] for key in archive.files}

    ctx.step("np.load")
    ctx.record("peer", "np.load", measure(load, repeat=ctx.repeat), total)
    remove(path)


def torchrl_checkpoint() -> Any:
    """torchrl's ``Checkpoint`` class, or None where this torchrl has no ``torchrl.checkpoint``."""
    if importlib.util.find_spec("torchrl") is None or importlib.util.find_spec("torchrl.checkpoint") is None:
        return None
    from torchrl.checkpoint import Checkpoint

    return Checkpoint


def _torchrl(ctx: Context, arrays: dict[str, np.ndarray], total: int) -> None:
    checkpoint_class = torchrl_checkpoint()
    if checkpoint_class is None:
        ctx.skip("peer", "torchrl Checkpoint", "this torchrl has no torchrl.checkpoint module")
        return
    source = torch_module(arrays, share=True)
    path = ctx.tmp / "torchrl"
    _saver(ctx, "torchrl Checkpoint save", path, lambda: checkpoint_class(model=source).save(path), total)
    target = torch_module(arrays, share=False)
    ctx.step("torchrl Checkpoint load")
    ctx.record("peer", "torchrl Checkpoint load", measure(lambda: checkpoint_class(model=target).load(path),
                                                          repeat=ctx.repeat), total)
    remove(path)


def _orbax(ctx: Context, arrays: dict[str, np.ndarray], total: int) -> None:
    try:
        import orbax.checkpoint as ocp
    except ImportError as exc:
        ctx.skip("peer", "orbax StandardCheckpointer", f"orbax not importable: {exc}")
        return
    path = ctx.tmp / "orbax"
    checkpointer = ocp.StandardCheckpointer()

    def save() -> None:
        checkpointer.save(path.absolute(), arrays)
        checkpointer.wait_until_finished()

    # Orbax is slow (seconds per GiB): one sample is enough to place it.
    _saver(ctx, "orbax save", path, save, total, repeat=1)
    ctx.step("orbax restore")
    ctx.record("peer", "orbax restore", measure(lambda: checkpointer.restore(path.absolute()), repeat=1), total)
    checkpointer.close()
    remove(path)
