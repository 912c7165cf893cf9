"""One rank of a gloo process group on this machine, run by the sharding tests as a subprocess.

``python dist_worker.py SCENARIO RANK WORLD PORT PATH``: joins the group at
127.0.0.1:PORT, runs SCENARIO (``save``, ``save-spied``, ``load``, ``load-corrupt``, ``load-misuse``, ``die``,
``hang``),
and exits 0 when it did what the scenario expects (what it found is printed for the test to read).
Several scenarios run in one launch as ``A+B`` with one path each (``PATH_A:PATH_B``, ``os.pathsep``), each
one's output after a line ``== A``: starting ranks importing torch is most of a launch's cost. ``die`` and
``hang`` break the group, so they run alone.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from torch.distributed.tensor.placement_types import _StridedShard

from opencheckpoint import Checkpoint
from opencheckpoint.container import publish


def model() -> torch.nn.Module:
    """The same tiny MLP on every rank (seeded); 7 rows do not split evenly over 2 or 4 ranks."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3))


def sharded_model(world: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    net = model()
    mesh = init_device_mesh("cpu", (world,))
    for layer in net:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(net, mesh=mesh)
    optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
    return net, optimizer


def train_step(net: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    torch.manual_seed(1)
    net(torch.randn(4, 5)).square().sum().backward()
    optimizer.step()


def extras(world: int) -> dict[str, object]:
    """DTensors on a 1-D mesh (Shard(0), Replicate()) and, with 4 ranks, on a 2x2 mesh and with scattered
    _StridedShard rows; a plain tensor."""
    full = torch.arange(48, dtype=torch.float32).reshape(6, 8)
    mesh = init_device_mesh("cpu", (world,))
    values: dict[str, object] = {"rows": distribute_tensor(full, mesh, [Shard(0)]),
                                 "copy": distribute_tensor(full * 2, mesh, [Replicate()]),
                                 "plain": torch.arange(5)}
    if world == 4:
        grid = init_device_mesh("cpu", (2, 2))
        values["grid"] = distribute_tensor(full * 3, grid, [Shard(0), Shard(1)])
        values["half"] = distribute_tensor(full * 4, grid, [Replicate(), Shard(1)])
        # _StridedShard placements that scatter a rank's rows (rank 0: rows 0 and 3; rows 0 and 2 on the grid)
        # (src_data_rank=None: each rank splits its own copy; torch scatters only evenly divisible strided dims)
        values["strided"] = distribute_tensor(full * 5, mesh, [_StridedShard(0, split_factor=2)], src_data_rank=None)
        values["strided_grid"] = distribute_tensor(full * 6, grid, [Shard(0), _StridedShard(0, split_factor=2)],
                                                   src_data_rank=None)
    return values


def save(rank: int, world: int, path: str) -> None:
    net, optimizer = sharded_model(world)
    train_step(net, optimizer)
    Checkpoint(model=net, optim=optimizer, extra=extras(world)).save(path, timeout=60)
    write_expected(rank, net, optimizer, path)
    print(f"rank {rank}: saved", flush=True)


def save_spied(rank: int, world: int, path: str) -> None:
    """A collective save of DTensors with the save pipeline's stages spied on: prints the stages this rank ran."""
    from stage_spy import StageSpy

    spy = StageSpy().install()
    Checkpoint(extra=extras(world)).save(path, timeout=60)
    print(f"rank {rank}: stages {json.dumps(spy.stages_for(path))}", flush=True)


def write_expected(rank: int, net: torch.nn.Module, optimizer: torch.optim.Optimizer, path: str) -> None:
    """The full values of the model and the Adam moments, for the test to compare with (rank 0 writes them)."""
    def whole(tensor: torch.Tensor) -> np.ndarray:
        return (tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor).detach().numpy()

    full = {f"model.{k}": whole(v) for k, v in net.state_dict().items()}
    for index, state in optimizer.state_dict()["state"].items():
        full[f"optim.{index}.exp_avg"] = whole(state["exp_avg"])
    if rank == 0:
        np.savez(path + ".expected.npz", **full)


def record_shard_reads() -> dict[str, set[str]]:
    """Record the shard files each component's restore reads from (component path -> file names)."""
    from opencheckpoint.read.sharded import ShardedReads

    touched: dict[str, set[str]] = {}
    original = ShardedReads.shard

    def shard(self: ShardedReads, record: object, *, verify: bool) -> np.ndarray:
        touched.setdefault(self.files.component_path, set()).add(record.file)  # type: ignore[attr-defined]
        return original(self, record, verify=verify)  # type: ignore[arg-type]

    ShardedReads.shard = shard  # type: ignore[method-assign]
    return touched


def load(rank: int, world: int, paths: str) -> None:
    """Restore each checkpoint of ``paths`` (comma-separated; written by any number of ranks) into FSDP2."""
    touched = record_shard_reads()
    for path in paths.split(","):
        net, optimizer = sharded_model(world)
        touched.clear()
        Checkpoint(model=net, optim=optimizer).load(path)
        print(f"rank {rank}: read {json.dumps({k: sorted(v) for k, v in touched.items()})}", flush=True)
        expected = np.load(path + ".expected.npz")
        for key, value in net.state_dict().items():
            np.testing.assert_array_equal(value.full_tensor().detach().numpy(), expected[f"model.{key}"],
                                          err_msg=key)
        for index, state in optimizer.state_dict()["state"].items():
            np.testing.assert_array_equal(state["exp_avg"].full_tensor().numpy(), expected[f"optim.{index}.exp_avg"])
        train_step(net, optimizer)  # the restored state trains on: optimizer state has the parameters' placements
        print(f"rank {rank}: loaded {path}", flush=True)


def load_corrupt(rank: int, world: int, path: str) -> None:
    """Restore a checkpoint in which only the other rank's blocks are corrupt: every rank must raise, unchanged."""
    net, optimizer = sharded_model(world)
    before = {key: value.to_local().clone() for key, value in net.state_dict().items()}
    try:
        Checkpoint(model=net, optim=optimizer).load(path, timeout=60)
    except Exception as exc:
        print(f"rank {rank}: raised {type(exc).__name__}: {exc}", flush=True)
    else:
        print(f"rank {rank}: loaded", flush=True)
    same = all(torch.equal(before[key], value.to_local()) for key, value in net.state_dict().items())
    print(f"rank {rank}: {'unchanged' if same and not optimizer.state else 'CHANGED'}", flush=True)


def _try_load(rank: int, world: int, case: str, path: str, hook: Callable[..., None] | None = None,
              **options: Any) -> None:
    """One load of ``case`` into a fresh FSDP2 model: what it raised (class, field, message), and whether this
    rank's parameters and optimizer state are unchanged."""
    net, optimizer = sharded_model(world)
    before = {key: value.to_local().clone() for key, value in net.state_dict().items()}
    if hook is not None:
        net.register_load_state_dict_pre_hook(hook)
    try:
        Checkpoint(model=net, optim=optimizer).load(path, timeout=30, **options)
    except Exception as exc:
        print(f"rank {rank}: {case}: raised {type(exc).__name__} field={getattr(exc, 'field', None)}: {exc}",
              flush=True)
    else:
        print(f"rank {rank}: {case}: loaded", flush=True)
    same = all(torch.equal(before[key], value.to_local()) for key, value in net.state_dict().items())
    print(f"rank {rank}: {case}: {'unchanged' if same and not optimizer.state else 'CHANGED'}", flush=True)


def load_misuse(rank: int, world: int, path: str) -> None:
    """Loads the ranks get wrong (issue 10): other checkpoints or components per rank, a shard file changed in
    place between the phases. Saves two checkpoints of one FSDP2 model on ``world`` ranks under ``path`` first."""
    net, optimizer = sharded_model(world)
    train_step(net, optimizer)
    Checkpoint(model=net, optim=optimizer).save(f"{path}/a", timeout=30)
    train_step(net, optimizer)
    Checkpoint(model=net, optim=optimizer).save(f"{path}/b", timeout=30)
    _try_load(rank, world, "same", f"{path}/a")
    _try_load(rank, world, "paths", f"{path}/{'ab'[rank % 2]}")
    _try_load(rank, world, "components", f"{path}/a", components=["model"] if rank == 0 else None)
    _try_load(rank, world, "nothing", f"{path}/a", components=[] if rank == 1 else None)
    _try_load(rank, world, "verify", f"{path}/a", verify=rank != 1)
    shard = f"{path}/a/components/model/shards/rank-{rank:05d}.bin"
    info = os.stat(shard)
    os.utime(shard, ns=(info.st_atime_ns, info.st_mtime_ns - 10**10))  # saved 10 s ago: a new write moves mtime

    def change(*_: object) -> None:  # rank 0's file only, after every rank passed its checks
        with open(shard, "r+b") as handle:
            head = handle.read(4)
            handle.seek(0)
            handle.write(bytes(byte ^ 0x40 for byte in head))

    _try_load(rank, world, "changed", f"{path}/a", hook=change if rank == 0 else None)


def die(rank: int, world: int, path: str) -> None:
    """Rank 1 is killed while writing its second component; the others must raise, not hang."""
    if rank == 1:
        def kill(operation: str) -> None:
            if operation == "write-component:extra":
                os.kill(os.getpid(), signal.SIGKILL)

        publish.FAULT_HOOK = kill
    net, _ = sharded_model(world)
    start = time.monotonic()
    try:
        Checkpoint(model=net, extra=extras(world)).save(path, timeout=30)
    except Exception as exc:  # the survivor's error, class and message, for the test to check
        print(f"rank {rank}: raised {type(exc).__name__} after {time.monotonic() - start:.1f}s: {exc}", flush=True)
        return
    print(f"rank {rank}: saved", flush=True)


def hang(rank: int, world: int, path: str) -> None:
    """Rank 1 stalls (alive, not dead) before writing; the coordinator gives up after the save's timeout."""
    if rank == 1:
        publish.FAULT_HOOK = lambda operation: time.sleep(5) if operation.startswith("write-component") else None
    try:
        Checkpoint(extra={"x": np.arange(3)}).save(path, timeout=2)
    except Exception as exc:
        print(f"rank {rank}: raised {type(exc).__name__}: {exc}", flush=True)
        return
    print(f"rank {rank}: saved", flush=True)


def main() -> None:
    scenario, rank, world, port, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    scenarios = {"save": save, "save-spied": save_spied, "load": load, "load-corrupt": load_corrupt,
                 "load-misuse": load_misuse, "die": die, "hang": hang}
    names, paths = scenario.split("+"), path.split(os.pathsep)
    assert len(names) == len(paths) and (len(names) == 1 or not {"die", "hang"} & set(names)), (names, paths)
    for name, one_path in zip(names, paths, strict=True):
        print(f"== {name}", flush=True)
        scenarios[name](rank, world, one_path)
    if not {"die", "hang"} & set(names):  # a broken group cannot be torn down cleanly
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
