"""One rank of the tensor-kinds matrix on a gloo group (issue 20), run by ``test_kinds_distributed.py``.

``python kinds_worker.py RANK WORLD PORT ROOT``: joins the group at 127.0.0.1:PORT and
runs every case of :data:`CASES` in turn, each saving into ``ROOT/<case>``. For each
case it prints one JSON line ``{"case", "rank", "outcome": "saved" | "refused",
"error", "message"}``; rank 0 also writes the values every DTensor holds
(``full_tensor()``) to ``ROOT/<case>.expected.npz`` for the test to compare.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_module, distribute_tensor

from opencheckpoint import Checkpoint
from opencheckpoint.format.errors import CheckpointError
from opencheckpoint.sharding import LocalCollective


def issue_model() -> torch.nn.Module:
    """The issue's model, built from the same seed on every rank."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Linear(32, 8))


def _placements(tensor: torch.Tensor) -> list[Any]:
    return [Shard(0)] if tensor.dim() == 2 else [Replicate()]


def data_replaced(mesh: DeviceMesh) -> torch.nn.Module:
    """Exactly the issue's scenario: ``p.data = distribute_tensor(...)`` for every parameter."""
    model = issue_model()
    for p in model.parameters():
        p.data = distribute_tensor(p.data.clone(), mesh, _placements(p))
    return model


def dtensor_parameters(mesh: DeviceMesh) -> torch.nn.Module:
    """Every parameter replaced by an ``nn.Parameter`` of a DTensor (the way that keeps the DTensor)."""
    model = issue_model()
    for module in model:
        for name, p in list(module.named_parameters(recurse=False)):
            setattr(module, name, torch.nn.Parameter(distribute_tensor(p.detach().clone(), mesh, _placements(p))))
    return model


def distributed_module(mesh: DeviceMesh) -> torch.nn.Module:
    """``distribute_module`` with a partition function sharding each Linear's weight by rows."""
    def partition(name: str, module: torch.nn.Module, device_mesh: DeviceMesh) -> None:
        for key, p in list(module.named_parameters(recurse=False)):
            module.register_parameter(key, torch.nn.Parameter(distribute_tensor(p.detach().clone(), device_mesh,
                                                                                _placements(p))))

    return distribute_module(issue_model(), mesh, partition)


def fsdp(mesh: DeviceMesh) -> torch.nn.Module:
    model = issue_model()
    for layer in model:
        fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def _expected(model: torch.nn.Module) -> dict[str, np.ndarray]:
    out = {}
    for key, value in model.state_dict().items():
        full = value.full_tensor() if isinstance(value, DTensor) else value
        out[key] = full.detach().cpu().numpy().copy()
    return out


#: case -> (model builder, save keyword arguments, path form): "local" saves to ROOT/<case>, "memory" remotely.
CASES: dict[str, tuple[Callable[[DeviceMesh], torch.nn.Module], dict[str, Any], str]] = {
    "issue-scenario": (data_replaced, {}, "local"),
    "issue-scenario-each-rank-alone": (data_replaced, {"process_group": LocalCollective()}, "local"),
    "dtensor-parameters": (dtensor_parameters, {}, "local"),
    "dtensor-parameters-each-rank-alone": (dtensor_parameters, {"process_group": LocalCollective()}, "local"),
    "distribute-module": (distributed_module, {}, "local"),
    "fully-shard": (fsdp, {}, "local"),
    "dtensor-parameters-remote": (dtensor_parameters, {}, "memory"),
    "issue-scenario-remote": (data_replaced, {}, "memory"),
}


def run_case(case: str, rank: int, mesh: DeviceMesh, root: Path) -> None:
    build, options, form = CASES[case]
    model = build(mesh)
    target: Any = root / case if form == "local" else f"memory://kinds/{case}"
    if build is not data_replaced:
        expected = _expected(model)  # full_tensor() is a collective: every rank calls it
        if rank == 0:
            np.savez(root / f"{case}.expected.npz", **expected)
    report: dict[str, Any] = {"case": case, "rank": rank}
    try:
        Checkpoint(model=model).save(target, timeout=60, **options)
        report.update(outcome="saved")
    except CheckpointError as exc:
        report.update(outcome="refused", error=type(exc).__name__, message=str(exc))
    dist.barrier()  # every rank finished this case before the next one starts
    print(json.dumps(report), flush=True)


def main() -> None:
    rank, world, port, root = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    try:
        mesh = init_device_mesh("cpu", (world,))
        for case in CASES:
            run_case(case, rank, mesh, root)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
