"""Realistic workloads (``make bench``): the same training state saved and restored by OpenCheckpoint and its peers.

* torch: a GPT-2-small-shaped model (12 layers, 768 wide, 50,257-token embedding tied to the output
  head: 124M parameters) with AdamW state (two moments per parameter) and the RNG states;
* JAX: a Flax NNX transformer-shaped MLP stack with an ``nnx.Optimizer`` (optax AdamW) and ``nnx.Rngs``.

Every peer saves the *same* live objects and restores into live objects of the same shape:

| peer | what it stores |
|---|---|
| OpenCheckpoint | model, optimizer, RNG (one checkpoint; directory and archive form) |
| torch.save / torch.load | ``{"model", "optim", "rng"}`` state dicts (``weights_only=True`` on load) |
| safetensors | **weights only** (``save_model``/``load_model``): no optimizer, no RNG |
| torch.distributed.checkpoint | model + optimizer via ``get_state_dict``, one process, no process group |
| torchrl Checkpoint | model, optimizer |
| orbax CheckpointManager | ``nnx.state`` of model and optimizer (StandardSave/StandardRestore) |

"durable" saves fsync every file written and the parent directory for every peer (OpenCheckpoint with
``durable=True``), so they pay the same disk flush. Peak memory: the high-water mark of this process's
RSS during the operation above its RSS before (``/proc/self/clear_refs`` resets the mark), beside each
row. Limits of the machine for the same bytes, measured in this section: memcpy, raw write, raw
write + fsync.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

import opencheckpoint
from common import GIB, MIB, Context, remove, write_all
from opencheckpoint.checkpoint import CheckpointFormat
from timing import measure, settle_writes

TORCH_GROUP = "gpt2-small torch"
JAX_GROUP = "nnx jax"


# -- peak memory ------------------------------------------------------------------------------------
def _rss_kib(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


@contextlib.contextmanager
def _peak() -> Iterator[list[int]]:
    """Yields a list that holds, afterwards, the bytes the process's RSS peaked above its start."""
    out: list[int] = []
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")  # reset VmHWM to the current RSS
    except OSError:
        yield out
        return
    start = _rss_kib("VmRSS")
    yield out
    out.append(max(0, _rss_kib("VmHWM") - start) * 1024)


def _timed(ctx: Context, group: str, name: str, operation: Callable[[], Any], nbytes: int, *,
           setup: Callable[[], Any] | None = None, repeat: int | None = None) -> None:
    """Measure ``operation``; one extra untimed run records its peak memory beside the result."""
    ctx.step(f"{group}: {name}")
    with ctx.guard(group, name):
        if setup is not None:
            setup()
        with _peak() as peak:
            operation()
        timing = measure(operation, repeat=repeat or ctx.repeat, setup=setup)
        note = f"peak +{peak[0] / MIB:.0f} MiB" if peak else ""
        ctx.record(group, name, timing, nbytes, note=note)


def in_turn(*steps: Callable[[], object]) -> Callable[[], None]:
    """One operation that runs ``steps`` one after the other (a save, then its fsync)."""

    def run() -> None:
        for step in steps:
            step()

    return run


def fsync_tree(path: Path) -> None:
    """fsync every file and directory under ``path`` (or the file), and its parent: a peer's durable save."""
    paths = [path] if path.is_file() else [Path(root) / name for root, dirs, files in os.walk(path)
                                             for name in [*files, *dirs]] + [path]
    for item in paths:
        fd = os.open(item, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _copy_all(destination: list[np.ndarray], sources: list[np.ndarray]) -> None:
    for target, source in zip(destination, sources, strict=True):
        np.copyto(target, source)


def _limits(ctx: Context, group: str, buffers: list[np.ndarray]) -> int:
    """memcpy, raw write and raw write + fsync of exactly these bytes; returns their total."""
    total = sum(b.nbytes for b in buffers)
    destination = [np.empty_like(b) for b in buffers]
    for d in destination:
        d.fill(0)
    _timed(ctx, group, "limit: memcpy", partial(_copy_all, destination, buffers), total)
    del destination
    raw = ctx.tmp / "realistic-raw.bin"

    def write(fsync: bool) -> None:
        with open(raw, "wb", buffering=0) as handle:
            for b in buffers:
                write_all(handle, b.reshape(-1).view(np.uint8).data)
            if fsync:
                os.fsync(handle.fileno())

    def before() -> None:
        remove(raw)
        settle_writes()

    _timed(ctx, group, "limit: raw write", lambda: write(False), total, setup=before)
    _timed(ctx, group, "limit: raw write+fsync", lambda: write(True), total, setup=before)
    remove(raw)
    return total


# -- torch: GPT-2 small ------------------------------------------------------------------------------
def gpt2_small(layers: int = 12, width: int = 768, vocab: int = 50_257, context: int = 1024) -> Any:
    """A module with GPT-2 small's parameter shapes (and its tied embedding / output head)."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln_1 = nn.LayerNorm(width)
            self.attn = nn.ModuleDict({"c_attn": nn.Linear(width, 3 * width), "c_proj": nn.Linear(width, width)})
            self.ln_2 = nn.LayerNorm(width)
            self.mlp = nn.ModuleDict({"c_fc": nn.Linear(width, 4 * width), "c_proj": nn.Linear(4 * width, width)})

    class GPT2(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte = nn.Embedding(vocab, width)
            self.wpe = nn.Embedding(context, width)
            self.h = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(width)
            self.lm_head = nn.Linear(width, vocab, bias=False)
            self.lm_head.weight = self.wte.weight  # tied, as in GPT-2

    torch.manual_seed(0)
    return GPT2()


def _torch_state(layers: int) -> tuple[Any, Any, Any]:
    """Model, AdamW with both moments populated (one step on zero gradients), a CPU generator."""
    import torch

    model = gpt2_small(layers=layers)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    for p in model.parameters():
        p.grad = None
    generator = torch.Generator().manual_seed(1)
    return model, optimizer, generator


def _tensor_buffers(model: Any, optimizer: Any) -> list[np.ndarray]:
    """Every distinct tensor of the state as a NumPy view (the tied head counted once)."""
    by_address = {t.data_ptr(): t for t in model.state_dict().values() if t.numel()}
    for state in optimizer.state.values():
        by_address.update({v.data_ptr(): v for v in state.values() if hasattr(v, "numel") and v.numel() > 1})
    return [t.detach().numpy() for t in by_address.values()]


def run_torch(ctx: Context, *, layers: int = 12) -> None:
    import torch

    group = TORCH_GROUP
    ctx.step(f"{group}: building the model and AdamW state")
    model, optimizer, generator = _torch_state(layers)
    total = _limits(ctx, group, _tensor_buffers(model, optimizer))
    params = sum(p.numel() for p in model.parameters())
    ctx.skip(group, "state", f"{params / 1e6:.0f}M parameters, {total / GIB:.2f} GiB with AdamW moments "
             "(tied head counted once)")
    target_model, target_optimizer, target_generator = _torch_state(layers)

    def fresh(path: Path) -> Callable[[], None]:
        def before() -> None:
            remove(path)
            settle_writes()
        return before

    # OpenCheckpoint
    ours = ctx.tmp / "gpt2-ours"
    forms: tuple[tuple[bool, CheckpointFormat, str], ...] = (
        (False, "directory", "save"), (True, "directory", "durable save"), (False, "archive", "save (archive)"))
    for durable, form, label in forms:
        checkpoint = opencheckpoint.Checkpoint(model=model, optim=optimizer, rng=generator, durable=durable)
        _timed(ctx, group, f"OpenCheckpoint {label}",
               partial(checkpoint.save, ours, format=form), total, setup=fresh(ours))
    opencheckpoint.Checkpoint(model=model, optim=optimizer, rng=generator, durable=False).save(ours)
    restore = opencheckpoint.Checkpoint(model=target_model, optim=target_optimizer, rng=target_generator)
    _timed(ctx, group, "OpenCheckpoint restore", lambda: restore.load(ours), total)
    if not torch.equal(target_model.wte.weight, model.wte.weight):
        raise AssertionError("OpenCheckpoint restored other weights")

    # torch.save / torch.load
    pt = ctx.tmp / "gpt2.pt"

    def torch_state() -> dict[str, Any]:
        return {"model": model.state_dict(), "optim": optimizer.state_dict(), "rng": generator.get_state()}

    _timed(ctx, group, "torch.save save", lambda: torch.save(torch_state(), pt), total, setup=fresh(pt))
    _timed(ctx, group, "torch.save durable save",
           in_turn(lambda: torch.save(torch_state(), pt), lambda: fsync_tree(pt)), total, setup=fresh(pt))

    def torch_restore() -> None:
        state = torch.load(pt, weights_only=True)
        target_model.load_state_dict(state["model"])
        target_optimizer.load_state_dict(state["optim"])
        target_generator.set_state(state["rng"])

    _timed(ctx, group, "torch.save restore", torch_restore, total)
    remove(pt)

    # safetensors: weights only
    with contextlib.suppress(ImportError):
        import safetensors.torch

        st = ctx.tmp / "gpt2.safetensors"
        weights = sum(t.numel() * t.element_size() for t in
                      {t.data_ptr(): t for t in model.state_dict().values()}.values())
        _timed(ctx, group, "safetensors (weights only) save", lambda: safetensors.torch.save_model(model, str(st)),
               weights, setup=fresh(st))
        _timed(ctx, group, "safetensors (weights only) durable save",
               in_turn(lambda: safetensors.torch.save_model(model, str(st)), lambda: fsync_tree(st)), weights,
               setup=fresh(st))
        _timed(ctx, group, "safetensors (weights only) restore",
               lambda: safetensors.torch.load_model(target_model, str(st)), weights)
        remove(st)

    # torch.distributed.checkpoint, one process
    with ctx.guard(group, "torch.distributed.checkpoint"):
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        dcp_path = ctx.tmp / "gpt2-dcp"
        warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")

        def dcp_save(durable: bool) -> None:
            model_state, optim_state = get_state_dict(model, optimizer)
            dcp.state_dict_saver.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(dcp_path))
            if durable:
                fsync_tree(dcp_path)

        def dcp_restore() -> None:
            model_state, optim_state = get_state_dict(target_model, target_optimizer)
            dcp.state_dict_loader.load({"model": model_state, "optim": optim_state}, checkpoint_id=str(dcp_path))
            set_state_dict(target_model, target_optimizer, model_state_dict=model_state,
                           optim_state_dict=optim_state)

        _timed(ctx, group, "DCP save", lambda: dcp_save(False), total, setup=fresh(dcp_path))
        _timed(ctx, group, "DCP durable save", lambda: dcp_save(True), total, setup=fresh(dcp_path))
        _timed(ctx, group, "DCP restore", dcp_restore, total)
        remove(dcp_path)

    # torchrl Checkpoint
    from peers import torchrl_checkpoint

    checkpoint_class = torchrl_checkpoint()
    if checkpoint_class is None:
        ctx.skip(group, "torchrl Checkpoint", "this torchrl has no torchrl.checkpoint module")
    else:
        rl = ctx.tmp / "gpt2-torchrl"
        _timed(ctx, group, "torchrl save", lambda: checkpoint_class(model=model, optim=optimizer).save(rl), total,
               setup=fresh(rl))
        _timed(ctx, group, "torchrl durable save",
               in_turn(lambda: checkpoint_class(model=model, optim=optimizer).save(rl), lambda: fsync_tree(rl)), total,
               setup=fresh(rl))
        _timed(ctx, group, "torchrl restore",
               lambda: checkpoint_class(model=target_model, optim=target_optimizer).load(rl), total)
        remove(rl)
    remove(ours)


# -- JAX: Flax NNX ---------------------------------------------------------------------------------------
def _nnx_state(layers: int, width: int) -> tuple[Any, Any, Any]:
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx

    class Block(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.norm = nnx.LayerNorm(width, rngs=rngs)
            self.up = nnx.Linear(width, 4 * width, rngs=rngs)
            self.down = nnx.Linear(4 * width, width, rngs=rngs)

        def __call__(self, x: Any) -> Any:
            return x + self.down(nnx.gelu(self.up(self.norm(x))))

    class Net(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.blocks = nnx.List([Block(rngs) for _ in range(layers)])
            self.head = nnx.Linear(width, width, rngs=rngs)

    rngs = nnx.Rngs(0)
    model = Net(rngs)
    optimizer = nnx.Optimizer(model, optax.adamw(1e-4), wrt=nnx.Param)
    grads = nnx.state(model, nnx.Param)
    optimizer.update(model, jax.tree_util.tree_map(jnp.zeros_like, grads))
    return model, optimizer, rngs


def run_jax(ctx: Context, *, layers: int = 8, width: int = 1024) -> None:
    import jax
    from flax import nnx

    group = JAX_GROUP
    ctx.step(f"{group}: building the model and optax state")
    model, optimizer, rngs = _nnx_state(layers, width)
    target_model, target_optimizer, target_rngs = _nnx_state(layers, width)
    leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves((nnx.state(model), nnx.state(optimizer)))]
    total = _limits(ctx, group, [leaf for leaf in leaves if leaf.nbytes > 64])
    params = sum(x.size for x in jax.tree_util.tree_leaves(nnx.state(model, nnx.Param)))
    ctx.skip(group, "state", f"{params / 1e6:.0f}M parameters, {total / GIB:.2f} GiB with optax AdamW moments")

    def fresh(path: Path) -> Callable[[], None]:
        def before() -> None:
            remove(path)
            settle_writes()
        return before

    ours = ctx.tmp / "nnx-ours"
    for durable, label in ((False, "save"), (True, "durable save")):
        checkpoint = opencheckpoint.Checkpoint(model=model, optim=optimizer, rngs=rngs, durable=durable)
        _timed(ctx, group, f"OpenCheckpoint {label}", partial(checkpoint.save, ours), total, setup=fresh(ours))
    opencheckpoint.Checkpoint(model=model, optim=optimizer, rngs=rngs, durable=False).save(ours)
    restore = opencheckpoint.Checkpoint(model=target_model, optim=target_optimizer, rngs=target_rngs)
    _timed(ctx, group, "OpenCheckpoint restore", lambda: restore.load(ours), total)
    remove(ours)

    try:
        import orbax.checkpoint as ocp
    except ImportError as exc:
        ctx.skip(group, "orbax", f"not importable: {exc}")
        return
    directory = ctx.tmp / "nnx-orbax"

    def orbax_save(durable: bool) -> None:
        options = ocp.CheckpointManagerOptions(enable_async_checkpointing=False)
        with ocp.CheckpointManager(directory.absolute(), options=options) as manager:
            manager.save(0, args=ocp.args.StandardSave({"model": nnx.state(model), "optim": nnx.state(optimizer)}))
            manager.wait_until_finished()
        if durable:
            fsync_tree(directory)

    def orbax_restore() -> None:
        live = {"model": nnx.state(target_model), "optim": nnx.state(target_optimizer)}
        abstract = jax.tree_util.tree_map(ocp.utils.to_shape_dtype_struct, live)
        with ocp.CheckpointManager(directory.absolute()) as manager:
            state = manager.restore(0, args=ocp.args.StandardRestore(abstract))
        nnx.update(target_model, state["model"])
        nnx.update(target_optimizer, state["optim"])

    _timed(ctx, group, "orbax save", lambda: orbax_save(False), total, setup=fresh(directory), repeat=1)
    _timed(ctx, group, "orbax durable save", lambda: orbax_save(True), total, setup=fresh(directory), repeat=1)
    _timed(ctx, group, "orbax restore", orbax_restore, total, repeat=1)
    remove(directory)
