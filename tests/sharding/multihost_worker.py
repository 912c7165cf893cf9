"""One torch rank of a simulated multi-host job (``test_multihost.py``), run as a subprocess.

``python multihost_worker.py SCENARIO RANK WORLD PORT BUCKET``. Ranks share nothing local: each "host" has its
own ``TMPDIR`` (set by the launcher), the only shared store is the S3 server named by ``AWS_ENDPOINT_URL``, and
every location is an ``s3://`` URL. Scenarios:

* ``save`` (4 ranks): an FSDP2 model and its Adam state saved collectively; then a save in which the last rank's
  upload fails;
* ``resume`` (2 ranks, while the 2 JAX processes of ``jax_multihost_worker.py`` run): the 4-rank checkpoint
  restored on 2 ranks; one more training step, saved by the 2 ranks (the checkpoint the JAX processes restore);
  then the checkpoint the JAX processes saved restored into DTensors, each rank reading only its rows.

What each rank found is printed.
"""

from __future__ import annotations

import json
import sys
import tempfile
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from restore_worker import mlp
from store_handoff import get_expected, put_expected, read_summary, record_reads, wait_for_checkpoint
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import distribute_tensor

from opencheckpoint import Checkpoint
from opencheckpoint.remote import publish

#: The rows of the JAX processes' array ``w`` (``jax_multihost_worker.py``).
JAX_FULL = np.arange(64, dtype=np.float32).reshape(8, 8)


def model_and_optimizer(world: int, seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    net = mlp(world)
    torch.manual_seed(seed)
    with torch.no_grad():
        for param in net.parameters():
            param.copy_(distribute_tensor(torch.randn(param.shape), param.device_mesh, param.placements))
    optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
    torch.manual_seed(1)
    net(torch.randn(4, 8)).square().sum().backward()
    optimizer.step()
    return net, optimizer


def full_state(net: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, np.ndarray]:
    """Every parameter and Adam moment, whole (``full_tensor`` is collective: every rank calls it)."""
    state = {f"model.{k}": v.full_tensor().detach().numpy() for k, v in net.state_dict().items()}
    for index, moments in optimizer.state_dict()["state"].items():
        for name in ("exp_avg", "exp_avg_sq"):
            state[f"optim.{index}.{name}"] = moments[name].full_tensor().numpy()
    return state


def record_uploads(rank: int) -> None:
    """Print the objects this rank uploads itself (every rank but the coordinator, before the manifest)."""
    original = publish.RankUpload.upload

    def upload(self: publish.RankUpload) -> None:
        print(f"rank {rank}: uploads {json.dumps(self.objects)} to {self.target}", flush=True)
        original(self)

    publish.RankUpload.upload = upload  # type: ignore[method-assign]


def fail_upload_of(rank: int) -> None:
    """Make this rank's shard upload fail after the object was sent (the store breaking mid-save)."""
    put = publish._put_objects

    def failing(*args: Any) -> None:
        put(*args)
        raise OSError(5, f"the store went away under rank {rank}")

    publish._put_objects = failing


def save(rank: int, world: int, bucket: str) -> None:
    print(f"rank {rank}: scratch {tempfile.gettempdir()}", flush=True)
    record_uploads(rank)
    net, optimizer = model_and_optimizer(world, seed=5)
    Checkpoint(model=net, optim=optimizer).save(f"s3://{bucket}/torch", timeout=60)
    full = full_state(net, optimizer)
    if rank == 0:
        put_expected(f"{bucket}/expected/torch.npz", full)
    print(f"rank {rank}: saved", flush=True)
    if rank == world - 1:
        fail_upload_of(rank)
    try:
        Checkpoint(model=net, optim=optimizer).save(f"s3://{bucket}/failed", timeout=60)
    except Exception as exc:
        print(f"rank {rank}: failed save raised {type(exc).__name__}: {exc}", flush=True)


def same_arrays(restored: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> bool:
    return sorted(restored) == sorted(expected) and all(np.array_equal(restored[k], expected[k]) for k in restored)


def resume(rank: int, world: int, bucket: str) -> None:
    """The 4-rank checkpoint on this job's 2 ranks; its next step saved for the JAX processes; theirs restored."""
    print(f"rank {rank}: scratch {tempfile.gettempdir()}", flush=True)
    net, optimizer = model_and_optimizer(world, seed=77)  # other values, other layout (another world size)
    Checkpoint(model=net, optim=optimizer).load(f"s3://{bucket}/torch", timeout=60)
    restored = full_state(net, optimizer)
    same = same_arrays(restored, get_expected(f"{bucket}/expected/torch.npz"))
    print(f"rank {rank}: torch bit-exact {same} ({len(restored)} arrays) on {world} ranks", flush=True)
    torch.manual_seed(2)  # training goes on, on 2 ranks: the checkpoint of this step is the one JAX restores
    net(torch.randn(4, 8)).square().sum().backward()
    optimizer.step()
    stepped = full_state(net, optimizer)  # collective: every rank takes part
    if rank == 0:  # before the save: once its manifest is there, so is this
        put_expected(f"{bucket}/expected/torch2.npz", stepped)
    Checkpoint(model=net, optim=optimizer).save(f"s3://{bucket}/torch2", timeout=60)
    print(f"rank {rank}: saved torch2", flush=True)
    wait_for_checkpoint(f"{bucket}/jax", f"rank {rank}")
    jax_to_dtensor(rank, bucket)


def jax_to_dtensor(rank: int, bucket: str) -> None:
    """The checkpoint the 2 JAX processes saved, into an FSDP2 module over this job's ranks (rows sharded)."""
    reads = record_reads()
    # the lines of docs/scaling-out.md "Across frameworks and processes"
    params = fully_shard(Pair(), mesh=init_device_mesh("cpu", (dist.get_world_size(),)))
    Checkpoint(params=params).load(f"s3://{bucket}/jax")  # each rank reads only its rows
    local = params.w.to_local()
    print(f"rank {rank}: jax->dtensor local {list(local.shape)} of {params.w.device_mesh.size()} ranks", flush=True)
    print(f"rank {rank}: jax->dtensor read {read_summary(reads)}", flush=True)
    same = (np.array_equal(params.w.full_tensor().detach().numpy(), JAX_FULL)
            and np.array_equal(params.rows.full_tensor().detach().numpy(), JAX_FULL * 2))
    print(f"rank {rank}: jax->dtensor bit-exact {same}", flush=True)


class Pair(torch.nn.Module):
    """The two arrays the JAX processes saved (component ``params``), as parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(8, 8))
        self.rows = torch.nn.Parameter(torch.zeros(8, 8))


def main() -> None:
    scenario, rank, world, port, bucket = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    try:
        {"save": save, "resume": resume}[scenario](rank, world, bucket)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
