"""One rank of a gloo process group for the issue-25 tests (``test_issue25_ranks.py``), run as a subprocess.

``python restore_worker.py SCENARIO RANK WORLD PORT PATH``: ``values`` (per-rank values and their refusals, a
save to memory://), ``rename`` (rename= into FSDP2, shard files opened per rank), ``torch-save`` and
``torch-load-nnx`` (the FSDP2 half of the FSDP2 -> NNX -> FSDP2 round trip). What each rank found is printed.
Several scenarios run in one launch as ``A+B`` with one path each (``PATH_A:PATH_B``, ``os.pathsep``), each one's
output after a line ``== A``, as in ``dist_worker.py``: starting ranks importing torch is most of a launch's cost.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
from dist_worker import sharded_model, train_step, write_expected
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from opencheckpoint import Checkpoint, PerRank
from opencheckpoint.container.directory import DirectorySource
from opencheckpoint.tools.interchange import nnx_to_torch_rename

#: torch module prefix -> NNX attribute (the MLP below and its NNX twin in the test's JAX script).
MAPPING = {"0": "hidden", "2": "out"}


def mlp(world: int) -> torch.nn.Module:
    """An MLP whose dimensions a 4x2 JAX mesh divides, sharded by FSDP2 over ``world`` ranks."""
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
    mesh = init_device_mesh("cpu", (world,))
    for layer in net:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    return fully_shard(net, mesh=mesh)


def outcome(rank: int, case: str, call: object) -> None:
    try:
        call()  # type: ignore[operator]
    except Exception as exc:
        print(f"rank {rank}: {case}: raised {type(exc).__name__} field={getattr(exc, 'field', None)}: {exc}",
              flush=True)
    else:
        print(f"rank {rank}: {case}: ok", flush=True)


def values(rank: int, world: int, path: str) -> None:
    """Differing plain values refused naming the key; PerRank stored per rank and restored to each; a collective
    save to memory:// (each process has its own) refused."""
    net, _ = sharded_model(world)
    outcome(rank, "differing", lambda: Checkpoint(model=net, extra={"plain": torch.arange(4) * (rank + 1)}).save(
        f"{path}/a", timeout=30))
    extra = {"plain": torch.arange(4), "loader": PerRank({"batch": 10 + rank, "rng": torch.full((3,), rank)})}
    outcome(rank, "per-rank", lambda: Checkpoint(model=net, extra=extra).save(f"{path}/b", timeout=30))
    live = {"plain": torch.zeros(4, dtype=torch.int64),
            "loader": PerRank({"batch": 0, "rng": torch.zeros(3, dtype=torch.int64)})}
    outcome(rank, "load", lambda: Checkpoint(model=net, extra=live).load(f"{path}/b", timeout=30))
    print(f"rank {rank}: restored {live['loader'].value['batch']} {live['loader'].value['rng'].tolist()}", flush=True)
    outcome(rank, "url", lambda: Checkpoint(model=net).save("memory://issue25/ckpt", timeout=30))


class Wrapped(torch.nn.Module):
    """A module under a prefix (``inner.``), as ``torch.compile`` (``_orig_mod.``) or DDP (``module.``) give."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner


def count_opens() -> list[str]:
    opened: list[str] = []
    original = DirectorySource._open_path

    def counting(self: DirectorySource, rel: str, *, pinning: bool = False) -> int:
        opened.append(rel)
        return original(self, rel, pinning=pinning)

    DirectorySource._open_path = counting  # type: ignore[method-assign]
    return opened


def rename(rank: int, world: int, path: str) -> None:
    """Save an FSDP2 model under ``inner.``; load it into the bare model with rename= (each rank opening only the
    shard files of its rows); a rename key that matches nothing is refused on every rank."""
    net, optimizer = sharded_model(world)
    train_step(net, optimizer)
    Checkpoint(model=Wrapped(net)).save(path, timeout=30)
    write_expected(rank, net, optimizer, path)
    opened = count_opens()
    fresh, _ = sharded_model(world)
    outcome(rank, "rename", lambda: Checkpoint(model=fresh).load(path, rename={"inner.": ""}, timeout=30))
    print(f"rank {rank}: opened {json.dumps(sorted({r for r in opened if '/shards/' in r}))}", flush=True)
    expected = np.load(path + ".expected.npz")
    same = all(np.array_equal(v.full_tensor().detach().numpy(), expected[f"model.{k}"])
               for k, v in fresh.state_dict().items())
    print(f"rank {rank}: bit-exact {same}", flush=True)
    other, _ = sharded_model(world)
    outcome(rank, "unmatched", lambda: Checkpoint(model=other).load(path, rename={"inner.": "", "module.": ""},
                                                                    timeout=30))


def torch_save(rank: int, world: int, path: str) -> None:
    net = mlp(world)
    Checkpoint(model=net).save(path, timeout=30)
    full = {k: v.full_tensor().detach().numpy() for k, v in net.state_dict().items()}
    if rank == 0:
        np.savez(path + ".expected.npz", **full)
    print(f"rank {rank}: saved", flush=True)


def torch_load_nnx(rank: int, world: int, path: str) -> None:
    """Load the NNX checkpoint (kernels on a JAX mesh) into the FSDP2 MLP: names and transposes by the plan."""
    torch.manual_seed(99)
    net = mlp(world)
    for param in net.parameters():
        torch.nn.init.zeros_(param)
    outcome(rank, "nnx->fsdp2", lambda: Checkpoint(model=net).load(
        path, rename=nnx_to_torch_rename(MAPPING, transpose=True), timeout=30))
    expected = np.load(path.rsplit("/", 1)[0] + "/torch.expected.npz")
    same = all(np.array_equal(v.full_tensor().detach().numpy(), expected[k]) for k, v in net.state_dict().items())
    print(f"rank {rank}: bit-exact {same}", flush=True)


def main() -> None:
    scenario, rank, world, port, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    scenarios = {"values": values, "rename": rename, "torch-save": torch_save, "torch-load-nnx": torch_load_nnx}
    for name, one_path in zip(scenario.split("+"), path.split(os.pathsep), strict=True):
        print(f"== {name}", flush=True)
        scenarios[name](rank, world, one_path)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
