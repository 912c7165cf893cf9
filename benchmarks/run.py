"""OpenCheckpoint benchmark: baselines, OpenCheckpoint and peers measured side by side in one run.

Usage (from the repository root)::

    .venv/bin/python benchmarks/run.py --size-gib 1            # make bench
    .venv/bin/python benchmarks/run.py --size-gib 0.25 --quick # make bench-quick

Absolute speeds drift on a shared machine; only ratios measured in the same
run mean anything, so every run measures its own baselines (memcpy, raw
write, raw write + fsync, raw reads) next to OpenCheckpoint and the peers.
Writes a JSON file to bench-results/ and prints rich tables, including
PASS/MISS for every target of DESIGN.md.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from rich.console import Console  # noqa: E402  (after the path set-up above)
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: E402

import async_blocked  # noqa: E402
import async_remote  # noqa: E402
import baselines  # noqa: E402
import contention  # noqa: E402
import ours  # noqa: E402
import peers  # noqa: E402
import realistic  # noqa: E402
import tiny  # noqa: E402
from common import GIB, Context, filesystem_of, remove  # noqa: E402
from peak_memory import measure_peak  # noqa: E402
from plot import draw  # noqa: E402
from report import show, write_json  # noqa: E402
from state import make_arrays  # noqa: E402
from targets import evaluate  # noqa: E402

SECTIONS = ("baselines", "ours", "async", "async-remote", "peers", "tiny", "memory", "contention", "realistic")
#: --quick leaves out the realistic workloads (minutes on 2 cores); --only realistic runs them anyway.
QUICK_SECTIONS = tuple(s for s in SECTIONS if s != "realistic")


def _shown(executable: Path) -> str:
    """The interpreter as a user would type it (``.venv/bin/python`` inside the repository)."""
    try:
        return str(executable.absolute().relative_to(REPO))
    except ValueError:
        return str(executable)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="OpenCheckpoint benchmarks (ratios measured in one run)")
    parser.add_argument("--size-gib", type=float, default=1.0, help="total bytes of the state (default 1)")
    parser.add_argument("--count", type=int, default=256, help="number of float32 tensors (default 256)")
    parser.add_argument("--quick", action="store_true",
                        help="fewer repeats; skip orbax and the slow tiny-array peers")
    parser.add_argument("--repeat", type=int, default=None, help="samples per operation (default 3, quick 2)")
    parser.add_argument("--tiny-count", type=int, default=20_000, help="arrays in the tiny-array case")
    parser.add_argument("--only", nargs="*", choices=SECTIONS, default=None,
                        help="sections to run (default all; --quick: all but realistic)")
    parser.add_argument("--neighbours", type=int, nargs="*", default=None,
                        help="busy neighbour processes in the contention section (default 1 and one per core; "
                             "quick: 1)")
    parser.add_argument("--realistic-scale", type=float, default=1.0,
                        help="layer-count factor of the realistic models (default 1: GPT-2 small, 124M params)")
    parser.add_argument("--plot", type=Path, default=None,
                        help="throughput plot (PNG; default beside the JSON result; make bench: docs/img/)")
    parser.add_argument("--tmpdir", type=Path, default=REPO / "bench-results" / "tmp",
                        help="scratch directory (same filesystem as the repository; not tmpfs)")
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="torch intra-op threads (default 1: see docs/decisions/0002-benchmark-method.md)")
    parser.add_argument("--output", type=Path, default=None, help="JSON result file (default bench-results/…)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.only is None:
        args.only = list(QUICK_SECTIONS if args.quick else SECTIONS)
    if args.neighbours is None:
        args.neighbours = [1] if args.quick else sorted({1, os.cpu_count() or 1})
    # Wide tables when the output goes to a file (the docs quote it), the terminal's width otherwise.
    console = Console() if sys.stdout.isatty() else Console(width=200)
    size = int(args.size_gib * GIB)
    repeat = args.repeat or (2 if args.quick else 3)
    args.tmpdir.mkdir(parents=True, exist_ok=True)
    fstype = filesystem_of(args.tmpdir)
    if fstype in ("tmpfs", "ramfs"):
        console.print(f"[red]{args.tmpdir} is on {fstype}: writes would not reach a disk; pass --tmpdir[/red]")
        return 2
    if args.torch_threads > 0:
        # torch's parallel copy_ spins on a loaded 2-core machine (20-60x slower restores,
        # docs/decisions/0002): one thread keeps every torch number, ours and peers', stable.
        import torch

        torch.set_num_threads(args.torch_threads)
    started = datetime.now(UTC)
    meta = {
        "command": " ".join([_shown(Path(sys.executable)), *sys.argv]),
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "size_bytes": size, "count": args.count, "quick": args.quick, "repeat": repeat,
        "tmpdir": str(args.tmpdir), "filesystem": fstype, "torch_threads": args.torch_threads,
        "load_average": os.getloadavg(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                   f"{os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / GIB:.0f} GiB RAM, "
                   f"Python {platform.python_version()}",
    }
    console.print(f"[bold]OpenCheckpoint benchmark[/bold]: {args.count} float32 tensors, {size / GIB:.2f} GiB, "
                  f"repeat {repeat}, scratch {args.tmpdir} ({fstype}); {meta['machine']}")

    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), TextColumn("{task.completed}"),
                  TimeElapsedColumn(), console=console, transient=False) as progress:
        task = progress.add_task("building state", total=None)
        clock = time.perf_counter()

        def step(description: str) -> None:
            progress.update(task, description=description, advance=1)

        arrays = make_arrays(size, args.count)
        ctx = Context(arrays=arrays, tmp=args.tmpdir, repeat=repeat, quick=args.quick, step=step)
        peaks: dict[str, dict[str, Any]] = {}
        try:
            if "baselines" in args.only:
                with ctx.guard("baselines", "section"):
                    baselines.run(ctx)
            if "ours" in args.only:
                with ctx.guard("opencheckpoint", "section"):
                    ours.run(ctx)
                remove(args.tmpdir / "ours")
            if "async" in args.only:
                with ctx.guard(async_blocked.GROUP, "section"):
                    async_blocked.run(ctx)
                gc.collect()
            if "async-remote" in args.only:
                with ctx.guard(async_remote.GROUP, "section"):
                    async_remote.run(ctx)
                gc.collect()
            if "peers" in args.only:
                with ctx.guard("peers", "section"):
                    peers.run(ctx)
            gc.collect()
            if "tiny" in args.only:
                with ctx.guard("tiny arrays", "section"):
                    tiny.run(ctx, args.tiny_count)
            if "contention" in args.only:
                for neighbours in args.neighbours:
                    with ctx.guard(f"busy neighbour x{neighbours}", "section"):
                        contention.run(ctx, neighbours)
            if "realistic" in args.only:
                with ctx.guard(realistic.TORCH_GROUP, "section"):
                    realistic.run_torch(ctx, layers=max(1, round(12 * args.realistic_scale)))
                gc.collect()
                with ctx.guard(realistic.JAX_GROUP, "section"):
                    realistic.run_jax(ctx, layers=max(1, round(8 * args.realistic_scale)))
                gc.collect()
            if "memory" in args.only:
                path = args.tmpdir / "peak"
                remove(path)
                for operation in ("save", "load"):
                    step(f"peak memory: {operation} in a fresh process")
                    with ctx.guard("peak memory", operation):
                        peaks[operation] = measure_peak(operation, path, size, args.count)
                remove(path)
        finally:
            progress.update(task, description=f"done in {time.perf_counter() - clock:.0f} s")
    meta["load_average_after"] = os.getloadavg()
    rows = evaluate(ctx.results, peaks)
    show(console, ctx.results, ctx.skipped, peaks, rows)
    output = args.output or REPO / "bench-results" / (
        f"bench-{started.strftime('%Y%m%dT%H%M%SZ')}-{args.size_gib:g}gib{'-quick' if args.quick else ''}.json")
    write_json(output, meta, ctx.results, ctx.skipped, peaks, rows)
    console.print(f"results: {output}")
    plotted = draw(ctx.results, args.plot or output.with_suffix(".png"),
                   f"{meta['command']} — {meta['date']} — {meta['machine']}")
    if plotted is not None:
        console.print(f"plot: {plotted}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
