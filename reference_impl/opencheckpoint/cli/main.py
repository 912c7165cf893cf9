"""The ``opencheckpoint`` command line.

Exit codes (every command): 0 success; 1 the checkpoint is invalid or cannot
be read (a :class:`CheckpointError`), or a command that writes finds its
target taken (it exists and ``--overwrite`` was not given, or it is not what
the command writes); 2 usage error (bad arguments); 130 interrupted (Ctrl-C;
:mod:`.entry` answers one that lands before or after :func:`main`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from ..format.errors import CheckpointError
from .exit_codes import EXIT_INVALID, EXIT_OK, interrupted
from .output import Output, Table, output_console

# Start-up cost: this module and the parser import nothing heavy (no NumPy, pydantic, rich or framework:
# cli/output imports rich only for a terminal); each command imports what it uses when it runs
# (tests/cli/test_startup.py counts the modules).


_EPILOG = "exit codes: 0 success, 1 invalid or unreadable checkpoint, 2 usage error, 130 interrupted (Ctrl-C)"
#: What a PATH argument may be besides a local path (docs/object-stores.md).
_PATH_HELP = ("checkpoint directory or archive, or a URL: s3://bucket/run/ckpt, gs://..., memory://... (needs "
              "opencheckpoint[remote]; credentials and endpoint from the fsspec backend's configuration, e.g. "
              "AWS_* variables or FSSPEC_S3_ENDPOINT_URL)")


def _human(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


def _arrays(count: int, shared: int, *, short: bool = False) -> str:
    """An array count as ``inspect`` and ``validate`` both print it: every node, tied ones said.

    >>> _arrays(3, 0), _arrays(3, 1), _arrays(3, 1, short=True)
    ('3 arrays', '3 arrays (1 sharing storage with another)', '3 (1 shared)')
    """
    if short:
        return str(count) + (f" ({shared} shared)" if shared else "")
    return f"{count} arrays" + (f" ({shared} sharing storage with another)" if shared else "")


def cmd_validate(args: argparse.Namespace) -> int:
    from ..read.validate import validate

    report = validate(args.path, progress=not args.json)  # a bar on a terminal only (opencheckpoint.progress)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        out = output_console()
        if report.ok:
            out.print(("valid", "green"), f": {args.path} ({report.checked_files} files, "
                      f"{_arrays(report.checked_arrays, report.shared_arrays)}, "
                      f"{_human(report.checked_bytes)} verified)")
        else:
            out.print(("invalid", "red"), f": {clip(str(args.path))}: {len(report.errors)} error(s)")
            _print_issues(out, report.errors)
    return EXIT_OK if report.ok else EXIT_INVALID


#: Arrays per component ``inspect`` lists on a terminal by default; piped output lists every one.
TERMINAL_ARRAYS = 50

#: Characters of one value shown by the human-readable output; ``--json`` shows everything.
DISPLAY_CHARS = 200


def clip(text: str, limit: int = DISPLAY_CHARS) -> str:
    """``text``, or its first ``limit`` characters and how many more there are (display only).

    Long values (a metadata string of megabytes, a tree key of a hundred MiB) are cut before
    they reach the terminal renderer, whose line wrapping is not linear in the text's length.

    >>> clip("abcdef", 3)
    'abc... (3 more characters)'
    """
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def cmd_inspect(args: argparse.Namespace) -> int:
    from ..tools.inspect import describe

    summary = describe(args.path)
    status = EXIT_OK if summary["ok"] else EXIT_INVALID
    if args.json:
        # Written piece by piece: ``dumps`` would hold the whole text and its pieces at once.
        json.dump(summary, sys.stdout, indent=2, ensure_ascii=False)
        print()
        return status
    out = output_console()
    out.print(f"{clip(summary['path'])} ({summary['form']}, format v{summary['format_version']})", style="bold")
    producer = summary["producer"]
    out.print(f"id {clip(summary['checkpoint_id'])}, created {clip(summary['created_at'])}, by "
              f"{clip(producer['name'])} {clip(producer['version'])}")
    if summary["metadata"]:
        out.print("metadata: " + clip(json.dumps(summary["metadata"], ensure_ascii=False), 4 * DISPLAY_CHARS))
    for name, ext in summary["extensions"].items():
        out.print(f"extension {clip(name)} v{ext['version']} must_understand={ext['must_understand']}")
    table = Table("component", "kind", "size", "arrays", "class")
    for name, entry in summary["components"].items():
        arrays = entry.get("arrays")
        table.add_row(clip(name), clip(f"{entry['kind']} v{entry['kind_version']}"), _human(entry["bytes"]),
                      "-" if arrays is None else _arrays(len(arrays), entry.get("shared_arrays", 0), short=True),
                      clip(str(entry.get("hints", {}).get("class", ""))))
    out.print(table)
    # Piped or redirected, every array is listed (a script's `| grep` must see them all); a terminal
    # shows the first TERMINAL_ARRAYS per component unless --max-arrays says otherwise.
    limit = args.max_arrays if args.max_arrays is not None else (
        TERMINAL_ARRAYS if out.is_terminal else None)
    for name, entry in summary["components"].items():
        arrays = entry.get("arrays") or []
        if not arrays:
            continue
        detail = Table("array", "dtype", "shape", "bytes", title=clip(name))
        for row in arrays[:limit]:
            size = _human(row["nbytes"]) + (f" (storage of {clip(row['shares'])})" if "shares" in row else "")
            detail.add_row(clip(row["path"]), row["dtype"], clip(str(row["shape"])), size)
        if limit is not None and len(arrays) > limit:
            detail.add_row(f"... {len(arrays) - limit} more (--max-arrays N, or pipe the output)", "", "", "")
        out.print(detail)
    if not summary["ok"]:
        errors = summary["errors"]
        out.print(("invalid", "red"), f": {clip(summary['path'])}: {len(errors)} structural error(s)")
        _print_issues(out, errors)
    return status


#: Errors listed one by one by the human-readable output; ``--json`` lists every one.
DISPLAY_ERRORS = 100


def _print_issues(out: Output, errors: list[Any]) -> None:
    """One line per error (file, field, rule, message), each value clipped, at most DISPLAY_ERRORS."""
    for issue in errors[:DISPLAY_ERRORS]:
        get = issue.get if isinstance(issue, dict) else issue.__dict__.get
        out.print(f"  {get('error')}: file={clip(get('file') or '-')} field={clip(get('field') or '-')} "
                  f"rule={get('rule') or '-'}: {clip(get('message') or '', 2 * DISPLAY_CHARS)}")
    if len(errors) > DISPLAY_ERRORS:
        out.print(f"  ... {len(errors) - DISPLAY_ERRORS} more (--json lists every one)")


def cmd_schema_export(args: argparse.Namespace) -> int:
    from ..container.output_file import refused_target
    from ..format.errors import TargetExists
    from ..tools.schema_export import export_schemas

    try:
        paths = export_schemas(args.directory, args.format_version, overwrite=args.overwrite)
    except TargetExists as exc:
        return refused_target(exc, args.overwrite)
    for path in paths:
        print(path)
    return EXIT_OK


def cmd_migrations(args: argparse.Namespace) -> int:
    from ..format.migrations import DEFAULT_CHAIN

    print(DEFAULT_CHAIN.declaration().model_dump_json(indent=2))
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="opencheckpoint", description="Inspect, validate and test OpenCheckpoint checkpoints.",
        epilog=_EPILOG)
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    validate = commands.add_parser("validate", help="check every byte and rule of a checkpoint",
                                   description="Check every rule of the spec against every byte; list each "
                                   "error with file, field and spec requirement.", epilog=_EPILOG)
    validate.add_argument("path", help=_PATH_HELP)
    validate.add_argument("--json", action="store_true", help="print the report as JSON")
    validate.set_defaults(run=cmd_validate)

    inspect = commands.add_parser("inspect", help="show components, dtypes, shapes, sizes and metadata; "
                                  "check the structure",
                                  description="Describe a checkpoint and check its structure (every rule "
                                  "that needs no array byte); no array byte is read. Exits 1 if a check "
                                  "fails.", epilog=_EPILOG)
    inspect.add_argument("path", help=_PATH_HELP)
    inspect.add_argument("--json", action="store_true", help="print the summary as JSON")
    inspect.add_argument("--max-arrays", type=int, default=None, metavar="N",
                         help=f"arrays listed per component (default: {TERMINAL_ARRAYS} on a terminal, every "
                         "one when piped or redirected)")
    inspect.set_defaults(run=cmd_inspect)

    schema = commands.add_parser("schema", help="JSON Schemas of the format's documents", epilog=_EPILOG)
    schema_commands = schema.add_subparsers(dest="schema_command", required=True, metavar="SUBCOMMAND")
    export = schema_commands.add_parser("export", help="write every schema into DIR", epilog=_EPILOG)
    export.add_argument("directory", metavar="DIR")
    export.add_argument("--format-version", type=int, choices=(1, 2), default=1,
                        help="the format version whose documents to export (default 1: schemas/v1)")
    export.add_argument("--overwrite", action="store_true",
                        help="replace existing schema files in DIR (any other file there is never replaced)")
    export.set_defaults(run=cmd_schema_export)

    migrations = commands.add_parser("migrations", help="print the migration chain declaration (JSON)",
                                     epilog=_EPILOG)
    migrations.set_defaults(run=cmd_migrations)

    _add_optional_commands(commands)
    return parser


def _add_optional_commands(commands: Any) -> None:
    """Commands provided by other modules of the package (convert, export, diff, ls; conformance)."""
    from .tools import add_commands as add_tool_commands

    add_tool_commands(commands)
    try:
        from ..conformance.cli import add_commands
    except ImportError:
        return
    add_commands(commands)


def _version() -> str:
    from .. import __version__

    return f"opencheckpoint {__version__} (format version 1)"


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return int(args.run(args))
    except CheckpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except BrokenPipeError:
        return EXIT_OK
    except KeyboardInterrupt:
        # A save in progress is left to its own cleanup (staging directories are debris the next save removes).
        return interrupted()


if __name__ == "__main__":
    sys.exit(main())
