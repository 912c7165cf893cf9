"""Sharded save and load on gloo process groups, side by side with torch.distributed.checkpoint (DCP).

Usage (from the repository root; part of ``make bench``)::

    .venv/bin/python benchmarks/sharded.py --size-mib 256 --ranks 1 2 4

For each rank count, that many processes join a gloo group on 127.0.0.1 and
shard the same model (Linear layers, FSDP2 ``fully_shard``: every parameter a
DTensor with ``Shard(0)``). In the same run, on the same state, each rank calls
``Checkpoint(model=...).save`` / ``.load`` (every byte checksummed, fsynced,
published atomically) and DCP's ``save`` / ``load`` with its ``FileSystemWriter``
(fsync on, as by default). Throughput is the state's bytes over the slowest
rank's time, best of ``--repeat``. Each save goes to a fresh path (the previous
sample's checkpoint of either library is deleted before the clock starts, as a
run saving ``step-N`` directories does); with ``--overwrite`` each saves over
the previous one (DCP then truncates its files, OpenCheckpoint deletes the
replaced checkpoint after its atomic rename, both inside the timing). Prints a
Markdown table (the one in ``docs/scaling-out.md``) and writes the numbers as
JSON to bench-results/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
MIB = 1 << 20


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mib", type=int, default=256, help="bytes of the model state (default 256 MiB)")
    parser.add_argument("--ranks", type=int, nargs="*", default=[1, 2, 4], help="rank counts (default 1 2 4)")
    parser.add_argument("--repeat", type=int, default=3, help="samples per operation (best is reported)")
    parser.add_argument("--tmpdir", type=Path, default=REPO / "bench-results" / "tmp-sharded",
                        help="scratch directory (a real filesystem, not tmpfs)")
    parser.add_argument("--overwrite", action="store_true",
                        help="every sample saves over the previous one (DCP truncates its files, OpenCheckpoint "
                             "replaces its checkpoint and deletes the old one); default: each save to a fresh path")
    parser.add_argument("--worker", nargs=3, metavar=("RANK", "WORLD", "PORT"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _model(size: int) -> Any:
    import torch

    width = 1024
    layers = max(1, size // (width * width * 4))
    torch.manual_seed(0)
    return torch.nn.Sequential(*(torch.nn.Linear(width, width, bias=False) for _ in range(layers)))


def _timed(operation: Any, dist: Any) -> float:
    dist.barrier()
    start = time.perf_counter()
    operation()
    dist.barrier()
    return time.perf_counter() - start


def worker(args: argparse.Namespace) -> None:
    """One rank: time OpenCheckpoint and DCP save/load; rank 0 prints the JSON result."""
    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint.filesystem import FileSystemReader, FileSystemWriter
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load_into
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from opencheckpoint import Checkpoint

    rank, world, port = (int(value) for value in args.worker)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=600))
    mesh = init_device_mesh("cpu", (world,))
    net = _model(args.size_mib * MIB)
    for layer in net:
        fully_shard(layer, mesh=mesh)
    nbytes = sum(p.numel() * p.element_size() for p in net.parameters())
    ours, theirs = args.tmpdir / f"oc-{world}", args.tmpdir / f"dcp-{world}"
    samples: dict[str, list[float]] = {"oc_save": [], "dcp_save": [], "oc_load": [], "dcp_load": []}
    for _ in range(args.repeat):
        if rank == 0 and not args.overwrite:  # outside the timing, for both: each save starts from nothing
            shutil.rmtree(theirs, ignore_errors=True)
            shutil.rmtree(ours, ignore_errors=True)
        samples["oc_save"].append(_timed(lambda: Checkpoint(model=net).save(ours), dist))
        samples["dcp_save"].append(_timed(lambda: dcp_save({"model": net.state_dict()}, storage_writer=(
            FileSystemWriter(str(theirs)))), dist))
        samples["oc_load"].append(_timed(lambda: Checkpoint(model=net).load(ours), dist))

        def dcp_load() -> None:
            state = {"model": net.state_dict()}
            dcp_load_into(state, storage_reader=FileSystemReader(str(theirs)))
            net.load_state_dict(state["model"])

        samples["dcp_load"].append(_timed(dcp_load, dist))
    if rank == 0:
        print(json.dumps({"ranks": world, "bytes": nbytes, **{k: min(v) for k, v in samples.items()}}), flush=True)
    dist.destroy_process_group()


def run_world(args: argparse.Namespace, world: int) -> dict[str, Any]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, __file__, "--size-mib", str(args.size_mib), "--repeat", str(args.repeat),
               "--tmpdir", str(args.tmpdir), *(["--overwrite"] if args.overwrite else []), "--worker"]
    ranks = [subprocess.Popen([*command, str(rank), str(world), str(port)], stdout=subprocess.PIPE, text=True,
                              env=env) for rank in range(world)]
    outputs = [rank.communicate(timeout=3600)[0] for rank in ranks]
    if any(rank.returncode for rank in ranks):
        raise SystemExit(f"a rank of the {world}-rank run failed")
    result: dict[str, Any] = json.loads(outputs[0].strip().splitlines()[-1])
    return result


def table(results: list[dict[str, Any]]) -> str:
    rows = ["| ranks | save: OpenCheckpoint | save: DCP | save ratio | load: OpenCheckpoint | load: DCP | load ratio |",
            "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        mib = r["bytes"] / MIB
        speed = {key: mib / r[key] for key in ("oc_save", "dcp_save", "oc_load", "dcp_load")}
        rows.append(f"| {r['ranks']} | {speed['oc_save']:.0f} MiB/s | {speed['dcp_save']:.0f} MiB/s | "
                    f"{speed['oc_save'] / speed['dcp_save']:.2f} | {speed['oc_load']:.0f} MiB/s | "
                    f"{speed['dcp_load']:.0f} MiB/s | {speed['oc_load'] / speed['dcp_load']:.2f} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        worker(args)
        return
    args.tmpdir.mkdir(parents=True, exist_ok=True)
    before = os.getloadavg()  # the machine is shared: the table says how busy it was
    try:
        results = [run_world(args, world) for world in args.ranks]
    finally:
        shutil.rmtree(args.tmpdir, ignore_errors=True)
    print(f"Sharded save/load, {args.size_mib} MiB of FSDP2 parameters, gloo on {os.cpu_count()} CPUs, "
          f"{'each save over the previous one' if args.overwrite else 'each save to a fresh path'}, best of "
          f"{args.repeat}; ratio = OpenCheckpoint / DCP (higher is better for OpenCheckpoint); "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average before/after "
          f"{before[0]:.1f}/{os.getloadavg()[0]:.1f}\n")
    print(table(results))
    out = REPO / "bench-results" / "sharded.json"
    out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
