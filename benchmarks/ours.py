"""OpenCheckpoint itself: save (durable or not), read, restore into existing arrays, open/inspect, validate."""

from __future__ import annotations

import importlib.util
from functools import partial
from pathlib import Path

import numpy as np

import opencheckpoint
from common import Context, remove
from opencheckpoint.tools.inspect import describe
from prototype import verified_read_into, verified_restore_into
from state import ArrayModule, make_arrays, torch_module, touched_like
from timing import measure, settle_writes

COMPONENT = "model"


def has_torch_adapter() -> bool:
    return importlib.util.find_spec("opencheckpoint.adapters.torch") is not None


def _check(loaded: dict[str, np.ndarray], arrays: dict[str, np.ndarray]) -> None:
    """A cheap correctness check of a loaded state (first and last element of every array)."""
    for key, array in arrays.items():
        got = np.asarray(loaded[key])
        if got.shape != array.shape or got[0] != array[0] or got[-1] != array[-1]:
            raise AssertionError(f"benchmark read back wrong data for {key}")


def run(ctx: Context) -> Path:
    """Measure every OpenCheckpoint operation; returns the checkpoint path (kept for the peers' comparison)."""
    arrays = ctx.arrays
    total = ctx.nbytes
    model = ArrayModule(arrays)
    target = ctx.tmp / "ours"

    archive = ctx.tmp / "ours.ocp"
    for durable, form, name in ((False, "directory", "save"), (False, "archive", "save archive"),
                                (True, "directory", "save durable"), (True, "archive", "save archive durable")):
        ctx.step(f"OpenCheckpoint {name}")
        checkpoint = opencheckpoint.Checkpoint(model=model, durable=durable, format=form)  # type: ignore[arg-type]
        path = archive if form == "archive" else target

        def before(path: Path = path) -> None:
            remove(path)
            settle_writes()

        # partial binds this iteration's checkpoint now, not whatever the loop variable holds when called
        ctx.record("opencheckpoint", name, measure(partial(checkpoint.save, path), repeat=ctx.repeat,
                                                   setup=before), total)
    remove(archive)

    ctx.step("OpenCheckpoint read_component (fresh memory, verified)")
    loaded = opencheckpoint.read_component(target, COMPONENT)
    _check(loaded, arrays)
    del loaded
    ctx.record("opencheckpoint", "read_component verified", measure(
        lambda: opencheckpoint.read_component(target, COMPONENT), repeat=ctx.repeat), total)
    ctx.step("OpenCheckpoint read_component (fresh memory, verify=False)")
    ctx.record("opencheckpoint", "read_component unverified", measure(
        lambda: opencheckpoint.read_component(target, COMPONENT, verify=False), repeat=ctx.repeat), total)

    destination = touched_like(arrays)
    numpy_model = ArrayModule(destination)
    restore = opencheckpoint.Checkpoint(model=numpy_model)
    for verify in (True, False):
        label = "verified" if verify else "unverified"
        ctx.step(f"OpenCheckpoint restore into existing NumPy arrays ({label})")
        ctx.record("opencheckpoint", f"restore numpy {label}", measure(
            partial(restore.load, target, verify=verify), repeat=ctx.repeat), total,
            note="StateDictAdapter: load_state_dict copies into existing arrays")
    _check(destination, arrays)

    if has_torch_adapter():
        with ctx.guard("opencheckpoint", "restore torch"):
            module = torch_module(arrays, share=False)
            restore_torch = opencheckpoint.Checkpoint(model=module)
            for verify in (True, False):
                label = "verified" if verify else "unverified"
                ctx.step(f"OpenCheckpoint restore into torch parameters ({label})")
                ctx.record("opencheckpoint", f"restore torch {label}", measure(
                    partial(restore_torch.load, target, verify=verify), repeat=ctx.repeat), total,
                    note="Checkpoint.load into an nn.Module")
            _check({k: v.detach().numpy() for k, v in module.state_dict().items()}, arrays)
            del module, restore_torch
    else:
        ctx.skip("opencheckpoint", "restore torch", "opencheckpoint.adapters.torch is not installed yet")

    ctx.step("prototype: verified copy from the map straight into existing arrays")
    ctx.record("prototype", "verified restore into existing (prototype)", measure(
        partial(verified_restore_into, target, COMPONENT, destination), repeat=ctx.repeat), total,
        note="benchmarks/prototype.py: what restore could cost (not project code)")
    _check(destination, arrays)
    ctx.step("prototype: verified readinto existing arrays (no map)")
    ctx.record("prototype", "verified readinto existing (prototype)", measure(
        partial(verified_read_into, target, COMPONENT, destination), repeat=ctx.repeat), total,
        note="benchmarks/prototype.py: pread 1 MiB chunks into the target, CRC while hot")
    _check(destination, arrays)
    ctx.step("prototype: verified readinto fresh arrays (no map)")
    ctx.record("prototype", "verified readinto fresh (prototype)", measure(
        lambda: verified_read_into(target, COMPONENT, {k: np.empty_like(a) for k, a in arrays.items()}),
        repeat=ctx.repeat), total, note="what read_component could cost without the map")
    del destination, numpy_model, restore

    ctx.step("OpenCheckpoint validate")
    with ctx.guard("opencheckpoint", "validate"):
        ctx.record("opencheckpoint", "validate", measure(lambda: _validated(target), repeat=ctx.repeat), total)
    with ctx.guard("open/inspect", "lazy open and inspect"):
        _open_and_inspect(ctx, target)
    return target


def _validated(path: Path) -> None:
    report = opencheckpoint.validate(path)
    if not report.ok:
        raise AssertionError(f"validate failed: {report.errors}")


def _open_tree(path: Path) -> int:
    with opencheckpoint.open_checkpoint(path) as reader:
        tree = reader.tree(COMPONENT)
        return sum(leaf.nbytes for leaf in tree.values())


def _open_and_inspect(ctx: Context, big: Path) -> None:
    """Lazy open + tree, and ``inspect`` (describe), on the full state and on one 64x smaller."""
    count = len(ctx.arrays)
    small_arrays = make_arrays(max(ctx.nbytes // 64, count * 64), count)
    small = ctx.tmp / "ours-small"
    remove(small)
    opencheckpoint.Checkpoint(model=ArrayModule(small_arrays), durable=False).save(small)
    repeat = max(10, ctx.repeat * 5)  # milliseconds each: more samples are cheap
    for path, size_label, nbytes in ((big, "full", ctx.nbytes), (small, "1/64", ctx.nbytes // 64)):
        ctx.step(f"lazy open + tree ({size_label} size)")
        ctx.record("open/inspect", f"lazy open+tree ({size_label})", measure(partial(_open_tree, path),
                                                                             repeat=repeat), None,
                   note=f"{count} arrays, {nbytes / (1 << 20):.0f} MiB")
        ctx.step(f"inspect ({size_label} size)")
        ctx.record("open/inspect", f"inspect ({size_label})", measure(partial(describe, path), repeat=repeat), None,
                   note=f"{count} arrays, {nbytes / (1 << 20):.0f} MiB")
    remove(small)
