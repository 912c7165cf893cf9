"""``opencheckpoint conformance impl ...`` and ``opencheckpoint conformance run ...``.

:func:`add_commands` is called by :mod:`opencheckpoint.cli.main` to add the
``conformance`` command group.
"""

from __future__ import annotations

import argparse
from typing import Any

_RUN_EPILOG = ("exit codes: 0 every case passed or was skipped, 1 a case failed, 2 usage error (also: a report FILE "
               "that exists without --overwrite, or is not a report)")


def _cmd_impl(args: argparse.Namespace) -> int:
    from .impl import run

    return run(args.mode, args.args)


def _cmd_run(args: argparse.Namespace) -> int:
    from .runner import main_from_args

    return main_from_args(args)


def add_commands(commands: Any) -> None:
    """Add the ``conformance`` command group to the ``opencheckpoint`` command line."""
    group = commands.add_parser("conformance", help="conformance protocol command and test runner",
                                description="The reference implementation's protocol command (impl) and the "
                                "runner that tests any implementation against the suite (run).")
    sub = group.add_subparsers(dest="conformance_command", required=True, metavar="SUBCOMMAND")

    impl = sub.add_parser("impl", help="protocol command of the reference implementation (spec 17.2)",
                          description="read CHECKPOINT | write EXPECTED_JSON OUT_PATH | capabilities")
    impl.add_argument("mode", choices=["read", "write", "capabilities"])
    impl.add_argument("args", nargs="*", metavar="ARG")
    impl.set_defaults(run=_cmd_impl)

    run = sub.add_parser("run", help="run the conformance cases against an implementation", epilog=_RUN_EPILOG,
                         description="Run every case: reader cases against --reader, and the writer cross-check "
                         "against --writer. CMD is a command line (split like a shell does).")
    run.add_argument("--reader", metavar="CMD", help="reader protocol command (e.g. 'opencheckpoint conformance impl')")
    run.add_argument("--writer", metavar="CMD", help="writer protocol command")
    run.add_argument("--cases", metavar="DIR", help="cases directory (default: $OPENCHECKPOINT_CONFORMANCE_CASES, "
                     "else conformance/cases/v1 of the checkout or working directory)")
    run.add_argument("--junit", metavar="FILE", help="write a JUnit XML report")
    run.add_argument("--json", metavar="FILE", help="write a JSON report")
    run.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS", help="per-command timeout (60)")
    run.add_argument("--jobs", type=int, default=0, metavar="N", help="commands run in parallel (default: CPUs)")
    run.add_argument("--case", action="append", default=[], metavar="PATTERN",
                     help="only cases whose id matches this glob (repeatable)")
    run.add_argument("--known-failures", metavar="FILE",
                     help="JSON file: case id -> reason; such failures are reported as known, not counted")
    run.add_argument("--overwrite", action="store_true",
                     help="replace earlier reports at --junit/--json FILE (an existing FILE is refused otherwise, and "
                     "a file that is not such a report always)")
    run.add_argument("--quiet", action="store_true", help="print only the summary line")
    run.set_defaults(run=_cmd_run)
