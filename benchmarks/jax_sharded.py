"""Sharded ``jax.Array`` save and restore: OpenCheckpoint against orbax, on one 8-device state, in one run.

Usage (from the repository root; ``make bench`` runs it after the main benchmark)::

    .venv/bin/python benchmarks/jax_sharded.py                  # 512 MiB over a 4x2 CPU mesh
    .venv/bin/python benchmarks/jax_sharded.py --size-mib 64 --repeat 1

JAX gets 8 host CPU devices (``XLA_FLAGS=--xla_force_host_platform_device_count=8``, set before JAX starts:
this script runs in its own process for that reason). The state is ``--count`` float32 arrays laid out
``NamedSharding(mesh_4x2, P('x', 'y'))`` plus one ``P('x', None)`` array (partially replicated: each region is
written once). Measured side by side (best of ``--repeat``):

* OpenCheckpoint ``Checkpoint(state=tree).save(path)`` (shard by shard, every byte CRC-32C checksummed) and
  orbax ``StandardCheckpointer().save`` (followed by ``wait_until_finished``);
* restore onto the same sharding, and onto another mesh (2x4, ``P('y', 'x')``): OpenCheckpoint
  ``Checkpoint(state=abstract).load(path)`` (each device reads and verifies only the shards overlapping its
  block) against orbax ``StandardCheckpointer().restore(path, abstract)``; the targets are
  ``jax.ShapeDtypeStruct`` trees with the shardings.

Every restored array is compared with the saved one after the timed runs. Results go to
``bench-results/jax-sharded-<UTC time>.json``; the table is what docs/scaling-out.md quotes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8".strip()

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MIB = 1 << 20


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=float, default=512.0, help="total bytes of the state (default 512)")
    parser.add_argument("--count", type=int, default=16, help="number of float32 arrays (default 16)")
    parser.add_argument("--repeat", type=int, default=3, help="samples per operation (default 3)")
    parser.add_argument("--tmpdir", type=Path, default=REPO / "bench-results" / "tmp",
                        help="scratch directory (same filesystem as the repository; not tmpfs)")
    parser.add_argument("--output", type=Path, default=None, help="JSON result file (default bench-results/…)")
    return parser.parse_args(argv)


def make_state(size: int, count: int) -> tuple[dict[str, Any], Any]:
    """The sharded state on a 4x2 mesh, and the 2x4 mesh a restore moves it to."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec

    P: Any = PartitionSpec  # jax leaves its constructor untyped
    mesh = jax.make_mesh((4, 2), ("x", "y"))
    other = jax.make_mesh((2, 4), ("x", "y"))
    rows = max(8, (size // count // 4 // 1024) // 8 * 8)  # a multiple of 8 rows of 1024 float32
    rng = np.random.default_rng(0)
    state: dict[str, Any] = {}
    for index in range(count):
        spec = P("x", None) if index == 0 else P("x", "y")  # the first one partially replicated
        host = rng.standard_normal((rows, 1024), dtype=np.float32)
        state[f"layer{index:03d}"] = jax.device_put(host, NamedSharding(mesh, spec))
    return state, other


def abstract(state: dict[str, Any], sharding_of: Callable[[Any], Any]) -> dict[str, Any]:
    import jax

    struct: Any = jax.ShapeDtypeStruct  # jax leaves its constructor untyped
    return {name: struct(array.shape, array.dtype, sharding=sharding_of(array))
            for name, array in state.items()}


def best_of(repeat: int, operation: Callable[[], Any], setup: Callable[[], None] | None = None) -> list[float]:
    samples = []
    for _ in range(repeat):
        if setup is not None:
            setup()
        start = time.perf_counter()
        result = operation()
        if hasattr(result, "block_until_ready") or isinstance(result, dict):
            import jax

            ready: Any = jax.block_until_ready  # untyped in jax
            ready(result)
        samples.append(time.perf_counter() - start)
        del result
    return samples


def _remove(path: Path) -> None:
    import shutil

    if path.exists():
        shutil.rmtree(path)
    for debris in path.parent.glob(f".{path.name}*"):  # a writer's hidden staging siblings
        shutil.rmtree(debris, ignore_errors=True)


def run(args: argparse.Namespace) -> dict[str, list[float]]:
    import numpy as np
    import orbax.checkpoint as ocp
    from jax.sharding import NamedSharding, PartitionSpec

    P: Any = PartitionSpec  # jax leaves its constructor untyped

    from opencheckpoint import Checkpoint

    state, other = make_state(int(args.size_mib * MIB), args.count)
    same = abstract(state, lambda array: array.sharding)
    moved = abstract(state, lambda array: NamedSharding(other, P("y", "x")))
    args.tmpdir.mkdir(parents=True, exist_ok=True)
    ours, theirs = args.tmpdir / "jax-sharded-ours", (args.tmpdir / "jax-sharded-orbax").absolute()
    timings: dict[str, list[float]] = {}
    checkpointer = ocp.StandardCheckpointer()

    def orbax_save() -> None:
        checkpointer.save(theirs, state)
        checkpointer.wait_until_finished()

    timings["OpenCheckpoint save"] = best_of(args.repeat, lambda: Checkpoint(state=state).save(ours),
                                             setup=lambda: _remove(ours))
    timings["orbax save"] = best_of(args.repeat, orbax_save, setup=lambda: _remove(theirs))
    restored: dict[str, Any] = {}
    for label, target in (("same mesh", same), ("2x4 mesh, P('y', 'x')", moved)):
        def load_ours(target: dict[str, Any] = target, label: str = label) -> Any:
            restored[f"OpenCheckpoint {label}"] = Checkpoint(state=dict(target)).load(ours).values["state"]
            return restored[f"OpenCheckpoint {label}"]

        def load_orbax(target: dict[str, Any] = target, label: str = label) -> Any:
            restored[f"orbax {label}"] = checkpointer.restore(theirs, target)
            return restored[f"orbax {label}"]

        timings[f"OpenCheckpoint restore, {label}"] = best_of(args.repeat, load_ours)
        timings[f"orbax restore, {label}"] = best_of(args.repeat, load_orbax)
    for name, tree in restored.items():  # untimed: every restore gave back the saved values, laid out as asked
        for key, array in state.items():
            if not np.array_equal(np.asarray(tree[key]), np.asarray(array)):
                raise SystemExit(f"{name}: {key} differs from the saved array")
    checkpointer.close()
    _remove(ours)
    _remove(theirs)
    return timings


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import orbax.checkpoint  # noqa: F401  (only checks that the peer is there)
    except ImportError as exc:
        print(f"orbax is not importable ({exc}): pip install -e '.[peers]'; nothing measured")
        return 0
    timings = run(args)
    total = int(args.size_mib * MIB)
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"sharded jax.Array, 8 CPU devices, {args.size_mib:g} MiB, best of {args.repeat}")
    for column in ("operation", "ms", "GiB/s", "x orbax"):
        table.add_column(column, justify="left" if column == "operation" else "right")
    for name, samples in timings.items():
        peer = timings.get(name.replace("OpenCheckpoint", "orbax"))
        ratio = f"{min(peer) / min(samples):.2f}" if peer is not None and name.startswith("Open") else ""
        table.add_row(name, f"{min(samples) * 1e3:.0f}", f"{total / (1 << 30) / min(samples):.2f}", ratio)
    Console(width=200 if not sys.stdout.isatty() else None).print(table)
    output = args.output or REPO / "bench-results" / f"jax-sharded-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({"size_bytes": total, "count": args.count, "repeat": args.repeat,
                                  "load_average": os.getloadavg(), "seconds": timings}, indent=1))
    print(f"results: {output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
