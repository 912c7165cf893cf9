"""The ``convert``, ``export``, ``diff`` and ``ls`` commands (added to :mod:`opencheckpoint.cli.main`)."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from typing import Any

from ..format.errors import TargetExists
from .output import Table, output_console

_EPILOG = ("exit codes: 0 success, 1 invalid or unreadable input, or a target that exists (without --overwrite) "
           "or is not what the command writes, 2 usage error")
_DIFF_EPILOG = ("exit codes: 0 the checkpoints are equal, 1 they differ, 2 usage error or a checkpoint cannot be "
                "read")


def _human(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def cmd_convert(args: argparse.Namespace) -> int:
    from ..container.output_file import refused_target
    from ..tools.converters import ConversionWarning, convert

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConversionWarning)
            path = convert(args.src, args.dst, source=args.source, format=args.format, component=args.component,
                           split=args.split, step=args.step, progress=True,  # a bar on a terminal only
                           overwrite=args.overwrite)
    except TargetExists as exc:
        return refused_target(exc, args.overwrite)
    for warning in caught:  # what was left out, one line each (also in the manifest: converted_from)
        print(f"not converted: {warning.message}", file=sys.stderr)
    output_console().print(f"converted {args.src} -> {path}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from ..container.output_file import refused_target
    from ..tools.converters import export

    try:
        result = export(args.src, args.dst, to=args.to, component=args.component,
                        progress=not args.json, overwrite=args.overwrite)  # a bar on a terminal only
    except TargetExists as exc:
        return refused_target(exc, args.overwrite)
    if args.json:
        print(json.dumps({"path": str(result.path), "tensors": result.tensors, "values": result.values,
                          "skipped": result.skipped}, indent=2))
        return 0
    out = output_console()
    out.print(f"exported {len(result.tensors)} arrays and {len(result.values)} values to {result.path}")
    for name, reason in result.skipped.items():
        out.print(f"not exported: {name}: {reason}")
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    from ..format.errors import CheckpointError
    from ..tools.diffing import diff

    try:
        report = diff(args.a, args.b)
    except CheckpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
        return 0 if report.equal else 1
    out = output_console()
    if report.equal:
        out.print("equal")
        return 0
    table = Table("path", "change", "detail", "max abs diff", "max rel diff")
    for change in report.changes:
        table.add_row(change.path, change.change, change.detail,
                      "" if change.max_abs_diff is None else f"{change.max_abs_diff:.6g}",
                      "" if change.max_rel_diff is None else f"{change.max_rel_diff:.6g}")
    out.print(table)
    return 1


def cmd_ls(args: argparse.Namespace) -> int:
    from ..tools.listing import list_run

    listing = list_run(args.run_dir, prefix=args.prefix, metric=args.metric, mode=args.mode, verify=args.verify)
    problem = _listing_problem(listing, args.prefix)
    if problem is not None:  # an empty table with exit 0 would read as "nothing saved yet"
        print(f"error: {problem}", file=sys.stderr)
        return 1
    if args.resolve:
        # One path and nothing else, for $(opencheckpoint ls RUN_DIR --resolve latest).
        chosen = listing.latest if args.resolve == "latest" else listing.best
        if chosen is None:
            print(f"error: no valid checkpoint to resolve {args.resolve!r} in {args.run_dir}"
                  + ("" if args.resolve == "latest" or args.metric else " (best needs --metric)"), file=sys.stderr)
            return 1
        print(chosen)
        return 0
    if args.json:
        print(json.dumps(listing.to_dict(), indent=2))
        return 0
    table = Table("name", "step", "created", "size", args.metric or listing.shown_metric or "metric", "valid", "")
    for entry in listing.entries:
        marks = [m for m, p in (("latest", listing.latest), ("best", listing.best)) if p == entry.path]
        table.add_row(entry.path.name, str(entry.step), entry.created_at or "-", _human(entry.size),
                      "-" if entry.metric is None else f"{entry.metric:g}",
                      "yes" if entry.valid else f"no: {entry.error}", ",".join(marks))
    out = output_console()
    out.print(table)
    out.print(f"latest: {listing.latest or '-'}")
    if args.metric:
        out.print(f"best ({args.metric}, {args.mode}): {listing.best or '-'}")
    elif listing.shown_metric:  # shown, not ranked: whether lower or higher is better is for --mode to say
        out.print(f"best: pass --metric {listing.shown_metric} (lowest) or add --mode max (highest)")
    return 0


def _listing_problem(listing: Any, prefix: str) -> str | None:
    """Why a listing answers nothing the user asked for: no ``{prefix}-{step}`` entry, or a ``--metric`` that
    no valid checkpoint records (with the keys they do record); None when it is a real answer."""
    from ..tools.listing import OTHER_NAMES_SHOWN
    if not listing.entries:
        held = ", ".join(listing.other_names) + (" and more" if len(listing.other_names) >= OTHER_NAMES_SHOWN else "")
        return (f"{listing.directory}: no {prefix}-<step> checkpoint here"
                + (f"; it holds {held}. Checkpoints named otherwise: --prefix NAME lists NAME-<step> and NAME_<step>; "
                   "`opencheckpoint inspect PATH` describes one checkpoint; `opencheckpoint convert` reads "
                   "other tools' step directories" if held else " (the directory is empty)"))
    if listing.metric is not None and not any(e.metric is not None for e in listing.entries if e.valid):
        # the library's own records (opencheckpoint.rotation) are no metric a user chose
        keys = ", ".join(sorted(k for k in listing.metadata_keys if not k.startswith("opencheckpoint."))) or "none"
        return (f"{listing.directory}: no valid checkpoint records a number under metadata key "
                f"{listing.metric!r} (their metadata keys: {keys})")
    return None


def add_commands(commands: Any) -> None:
    """Add ``convert``, ``export``, ``diff`` and ``ls`` to the ``opencheckpoint`` command line."""
    _add_writers(commands)
    _add_readers(commands)


def _add_writers(commands: Any) -> None:
    """``convert`` and ``export``: the commands that write a checkpoint or a file."""
    convert = commands.add_parser(
        "convert", help="convert a torch.save, safetensors, torchrl or orbax checkpoint; repack an "
        "OpenCheckpoint one", epilog=_EPILOG,
        description="Convert SRC (a torch.save file, a safetensors file, a torchrl Checkpoint directory or "
        "archive or rotation directory, or an orbax checkpoint directory, nnx_ppo's step_* layout included) "
        "into an OpenCheckpoint checkpoint at DST. torch files are read with weights_only=True: no code in them "
        "runs; pickles beside the arrays (prefetch.pkl, metadata.pkl) are left out and listed. An OpenCheckpoint "
        "SRC is validated and repacked in the other form (directory <-> .zip archive), files and manifest "
        "unchanged.")
    convert.add_argument("src", metavar="SRC")
    convert.add_argument("dst", metavar="DST")
    convert.add_argument("--from", dest="source",
                         choices=["torch", "safetensors", "torchrl", "orbax", "opencheckpoint"],
                         help="the source format (default: detected from the files)")
    convert.add_argument("--format", choices=["directory", "archive"], default=None,
                         help="output form (default: directory; an OpenCheckpoint SRC: the form it does not have)")
    convert.add_argument("--component", metavar="NAME",
                         help="component name for torch/safetensors files (model) and orbax items (state)")
    convert.add_argument("--split", action="store_true",
                         help="torch: one component per top-level key of the saved dict")
    convert.add_argument("--step", type=int, help="a run directory (orbax CheckpointManager, nnx_ppo step_* "
                         "folders, torchrl rotation): the step to convert (default: newest)")
    convert.add_argument("--overwrite", action="store_true",
                         help="replace a checkpoint at DST (without it an existing DST is refused; anything at DST "
                         "that is not a checkpoint is always refused)")
    convert.set_defaults(run=cmd_convert)

    export = commands.add_parser(
        "export", help="write a checkpoint's arrays as a safetensors or torch.save file", epilog=_EPILOG,
        description="Write the arrays of checkpoint SRC to DST, named by tree path (component.key.0...). "
        "Numbers, strings and bools go into safetensors metadata as JSON (or into the torch dict); what fits "
        "in neither is listed as not exported.")
    export.add_argument("src", metavar="SRC")
    export.add_argument("dst", metavar="DST")
    export.add_argument("--to", choices=["safetensors", "torch"], default="safetensors",
                        help="output format (default: safetensors)")
    export.add_argument("--component", metavar="NAME",
                        help="export this component only, names without the component prefix")
    export.add_argument("--json", action="store_true", help="print what was written as JSON")
    export.add_argument("--overwrite", action="store_true",
                        help="replace an earlier export at DST (a file of the --to format); anything else at DST "
                        "is always refused")
    export.set_defaults(run=cmd_export)


def _add_readers(commands: Any) -> None:
    """``diff`` and ``ls``."""
    diff = commands.add_parser(
        "diff", help="compare two checkpoints", epilog=_DIFF_EPILOG,
        description="Components and arrays added, removed or changed (dtype, shape, max abs/rel difference "
        "for floats, exact equality otherwise) and metadata changes.")
    diff.add_argument("a", metavar="A")
    diff.add_argument("b", metavar="B")
    diff.add_argument("--json", action="store_true", help="print the differences as JSON")
    diff.set_defaults(run=cmd_diff)

    ls = commands.add_parser(
        "ls", help="list the checkpoints of a run directory", epilog=_EPILOG,
        description="Every {prefix}-{step} checkpoint of RUN_DIR with step, time, size, metric and whether "
        "it is valid, and which one resuming would use (latest) and the best by --metric.")
    ls.add_argument("run_dir", metavar="RUN_DIR")
    ls.add_argument("--metric", metavar="KEY", help="manifest metadata key to show and rank by (best)")
    ls.add_argument("--mode", choices=["min", "max"], default="min", help="best is the min (default) or max")
    ls.add_argument("--prefix", default="checkpoint", help="checkpoint name prefix (default: checkpoint)")
    ls.add_argument("--verify", action="store_true", help="check every byte of each checkpoint (slower)")
    ls.add_argument("--resolve", choices=["latest", "best"],
                    help="print only the path of the latest (or best, with --metric) valid checkpoint")
    ls.add_argument("--json", action="store_true", help="print the listing as JSON")
    ls.set_defaults(run=cmd_ls)
