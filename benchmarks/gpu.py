"""GPU benchmark and CUDA tests: GPU -> checkpoint and checkpoint -> GPU for a multi-GiB state, against peers.

Usage (from the repository root, on a machine with an NVIDIA GPU and a CUDA build of torch)::

    .venv/bin/python benchmarks/gpu.py                 # 4 GiB state, then the CUDA-only tests
    .venv/bin/python benchmarks/gpu.py --size-gib 8 --no-tests

Without CUDA it prints why and exits with status 0 (``--require-cuda``: status 2), measuring nothing.

Measured side by side in one run (best of ``--repeat``), on ``--count`` bfloat16/float32 tensors on ``cuda:0``:

* limits: device -> pageable host, device -> pinned host, pinned host -> device, raw write of the bytes;
* GPU -> checkpoint: OpenCheckpoint ``Checkpoint(model=module).save`` (the adapter copies each tensor to
  the host), OpenCheckpoint after a copy into pinned host buffers (what an async saver does first),
  ``torch.save``, safetensors ``save_file``, ``torch.distributed.checkpoint.save`` (one process);
* checkpoint -> GPU: OpenCheckpoint ``Checkpoint(model=module).load`` into the CUDA module,
  ``read_component`` into pinned host buffers + ``copy_(non_blocking=True)``, ``torch.load(map_location="cuda")``
  + ``load_state_dict``, safetensors ``load_file(device="cuda")`` + ``load_state_dict``, DCP ``load``.

Then it runs the CUDA-only tests (``tests/adapters/test_torch_cuda.py``, ``test_torch_map_location.py``,
``tests/run/test_run_global_rng.py``), which are skipped on machines without CUDA, and prints pytest's summary.
Results go to ``bench-results/gpu-<UTC time>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
GIB = 1 << 30
CUDA_TESTS = ["tests/adapters/test_torch_cuda.py", "tests/adapters/test_torch_map_location.py",
              "tests/run/test_run_global_rng.py"]


def cuda_missing() -> str | None:
    """Why this machine cannot run the GPU benchmark, or None when it can."""
    try:
        import torch
    except ImportError:
        return "torch is not installed (pip install -e '.[torch]')"
    if not torch.cuda.is_available():
        build = torch.version.cuda or "none (a CPU-only build)"
        return (f"torch.cuda.is_available() is False (torch {torch.__version__}, CUDA build: {build}); "
                "run benchmarks/gpu.py on a machine with an NVIDIA GPU and a CUDA build of torch")
    return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-gib", type=float, default=4.0, help="state size (default 4; 4-8 is the brief)")
    parser.add_argument("--count", type=int, default=256, help="tensors (default 256)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tmpdir", type=Path, default=REPO / "bench-results" / "tmp-gpu")
    parser.add_argument("--no-tests", action="store_true", help="skip the CUDA-only tests")
    parser.add_argument("--require-cuda", action="store_true", help="exit with status 2 when CUDA is missing")
    return parser.parse_args(argv)


def _best(operation: Callable[[], Any], repeat: int, setup: Callable[[], Any] | None = None) -> float:
    import torch

    samples = []
    for _ in range(repeat):
        if setup is not None:
            setup()
        torch.cuda.synchronize()
        start = time.perf_counter()
        operation()
        torch.cuda.synchronize()
        samples.append(time.perf_counter() - start)
    return min(samples)


def _remove(path: Path) -> None:
    import shutil

    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists():
        path.unlink()


def measure(args: argparse.Namespace) -> dict[str, float]:
    """Every operation's best time in seconds (GPU work synchronised before the clock stops)."""
    import safetensors.torch
    import torch
    import torch.distributed.checkpoint as dcp

    import opencheckpoint

    device = torch.device("cuda:0")
    per = int(args.size_gib * GIB) // args.count
    module = torch.nn.Module()
    for i in range(args.count):
        dtype = torch.bfloat16 if i % 2 else torch.float32
        tensor = torch.randn(per // dtype.itemsize, device=device).to(dtype)
        module.register_parameter(f"t{i:04d}", torch.nn.Parameter(tensor, requires_grad=False))
    target = torch.nn.Module()
    for name, p in module.named_parameters():
        target.register_parameter(name, torch.nn.Parameter(torch.zeros_like(p), requires_grad=False))
    state = dict(module.state_dict())
    total = sum(t.numel() * t.element_size() for t in state.values())
    tmp = args.tmpdir
    tmp.mkdir(parents=True, exist_ok=True)
    times: dict[str, float] = {"bytes": float(total)}
    pinned = {k: torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for k, t in state.items()}
    pageable = {k: torch.empty(t.shape, dtype=t.dtype) for k, t in state.items()}

    def copy(destination: dict[str, Any], source: dict[str, Any]) -> None:
        for key, tensor in source.items():
            destination[key].copy_(tensor, non_blocking=True)

    times["limit: device -> pageable host"] = _best(lambda: copy(pageable, state), args.repeat)
    times["limit: device -> pinned host"] = _best(lambda: copy(pinned, state), args.repeat)
    times["limit: pinned host -> device"] = _best(lambda: copy(dict(target.state_dict()), pinned), args.repeat)
    raw = tmp / "raw.bin"

    def raw_write() -> None:
        with open(raw, "wb", buffering=0) as handle:
            for tensor in pinned.values():
                handle.write(tensor.view(torch.uint8).numpy().data)

    times["limit: raw write (from pinned host)"] = _best(raw_write, args.repeat, lambda: _remove(raw))
    _remove(raw)

    ours = tmp / "ours"
    times["GPU->ckpt OpenCheckpoint save"] = _best(
        lambda: opencheckpoint.Checkpoint(model=module, durable=False).save(ours), args.repeat, lambda: _remove(ours))

    def pinned_then_save() -> None:
        copy(pinned, state)
        torch.cuda.synchronize()
        opencheckpoint.Checkpoint(model=pinned, durable=False).save(tmp / "ours-pinned")

    times["GPU->ckpt OpenCheckpoint save via pinned host buffers"] = _best(
        pinned_then_save, args.repeat, lambda: _remove(tmp / "ours-pinned"))
    pt, st, dc = tmp / "state.pt", tmp / "state.safetensors", tmp / "dcp"
    times["GPU->ckpt torch.save"] = _best(lambda: torch.save(state, pt), args.repeat, lambda: _remove(pt))
    times["GPU->ckpt safetensors save_file"] = _best(lambda: safetensors.torch.save_file(state, str(st)), args.repeat,
                                                     lambda: _remove(st))
    times["GPU->ckpt DCP save"] = _best(lambda: dcp.state_dict_saver.save(state, checkpoint_id=str(dc)), args.repeat,
                                        lambda: _remove(dc))

    restore = opencheckpoint.Checkpoint(model=target)
    times["ckpt->GPU OpenCheckpoint load into CUDA module"] = _best(lambda: restore.load(ours), args.repeat)
    if not all(torch.equal(a, b) for a, b in zip(module.parameters(), target.parameters(), strict=True)):
        raise AssertionError("OpenCheckpoint restored other bits on the GPU")

    def read_pinned() -> None:
        loaded = opencheckpoint.read_component(tmp / "ours-pinned", "model", framework="torch")
        for key, tensor in loaded.items():
            pinned[key].copy_(tensor)
        copy(dict(target.state_dict()), pinned)

    times["ckpt->GPU OpenCheckpoint read_component + pinned copy"] = _best(read_pinned, args.repeat)
    times["ckpt->GPU torch.load(map_location=cuda) + load_state_dict"] = _best(
        lambda: target.load_state_dict(torch.load(pt, map_location="cuda", weights_only=True)), args.repeat)
    times["ckpt->GPU safetensors load_file(device=cuda) + load_state_dict"] = _best(
        lambda: target.load_state_dict(safetensors.torch.load_file(str(st), device="cuda:0")), args.repeat)

    def dcp_load() -> None:
        into = dict(target.state_dict())
        dcp.state_dict_loader.load(into, checkpoint_id=str(dc))

    times["ckpt->GPU DCP load"] = _best(dcp_load, args.repeat)
    for path in (ours, tmp / "ours-pinned", pt, st, dc):
        _remove(path)
    return times


def run_tests() -> int:
    """The CUDA-only tests (skipped elsewhere); pytest's summary says what ran and what was skipped."""
    command = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *CUDA_TESTS]
    print("$", " ".join(command), flush=True)
    return subprocess.run(command, cwd=REPO, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    reason = cuda_missing()
    if reason is not None:
        print(f"benchmarks/gpu.py: no GPU to measure: {reason}")
        return 2 if args.require_cuda else 0
    import torch

    started = datetime.now(UTC)
    times = measure(args)
    total = times.pop("bytes")
    print(f"GPU benchmark: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, {total / GIB:.2f} GiB in "
          f"{args.count} tensors, best of {args.repeat}; {started:%Y-%m-%d %H:%M} UTC")
    for name, seconds in times.items():
        print(f"{name:65s} {seconds * 1e3:9.1f} ms {total / GIB / seconds:7.2f} GiB/s")
    output = REPO / "bench-results" / f"gpu-{started:%Y%m%dT%H%M%SZ}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                                  "machine": f"{platform.machine()}, {os.cpu_count()} cores", "bytes": total,
                                  "date": f"{started:%Y-%m-%d %H:%M} UTC", "seconds": times}, indent=2) + "\n")
    print(f"results: {output}")
    return 0 if args.no_tests else run_tests()


if __name__ == "__main__":
    raise SystemExit(main())
