"""The conformance runner: run every case against an implementation's protocol command (spec §17).

Reader mode: each valid case's checkpoint must be read and rendered exactly as
its ``expected.json`` (Appendix B.8 reader equality); each must-reject case
must fail with exit status 1 and ``error: <expected class>: ...`` as the first
stderr line. A crash, a hang past the timeout, a garbled error line or a wrong
class is a failure. Cases needing a capability the implementation skips
(``CMD capabilities``) are reported as skipped with the reason.

Writer mode: the writer writes each valid, complete case's ``expected.json``
(directory or archive form as the case); the reference reader reads the
result, validates it and compares contents (Appendix B.8 writer equality).

>>> outcome = Outcome("tree-none", "reader", "pass")
>>> outcome.ok
True
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..container.output_file import check_output_file, refused_target, write_output_file
from ..format.errors import TargetExists
from .canonical import first_difference, is_complete, render_checkpoint, writer_view
from .models import OPT_IN, READER_ONLY, CapabilitiesModel, CaseModel
from .report import Outcome as Outcome
from .report import Report as Report
from .report import print_report, rule_advisory

#: Capabilities the checkout itself may lack (not declared by implementations).
_LOCAL_CAPABILITIES = ("symlinks",)


#: Environment variable naming the cases directory when ``--cases`` is not given.
CASES_ENV = "OPENCHECKPOINT_CONFORMANCE_CASES"
#: Where the cases come from when neither ``--cases``, the variable nor a checkout provides them.
CASES_HINT = ("the cases are conformance/cases/v1 of the source tree (git clone "
              "https://github.com/opencheckpoint/opencheckpoint, or the sdist of this version); pass that "
              f"directory with --cases DIR or set {CASES_ENV}")


def default_cases_dir() -> Path:
    """``$OPENCHECKPOINT_CONFORMANCE_CASES``, else ``conformance/cases/v1`` of the checkout this package is
    installed from (an editable install) or of the working directory.

    Raises :class:`FileNotFoundError` naming where to get the cases when there is none (a wheel
    installed from PyPI ships the package only).
    """
    if os.environ.get(CASES_ENV):
        return Path(os.environ[CASES_ENV])
    for base in (Path(__file__).resolve().parents[3], Path.cwd()):
        candidate = base / "conformance" / "cases" / "v1"
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"no conformance cases found: {CASES_HINT}")


@dataclass(frozen=True)
class Case:
    """One case directory with its parsed ``case.json``."""

    directory: Path
    meta: CaseModel

    @property
    def id(self) -> str:
        return self.meta.id

    @property
    def checkpoint(self) -> Path:
        if self.meta.read_path:
            return self.directory / self.meta.read_path
        return self.directory / ("checkpoint.zip" if self.meta.form == "archive" else "checkpoint")

    def expected(self) -> dict[str, Any]:
        expected: dict[str, Any] = json.loads((self.directory / "expected.json").read_text(encoding="utf-8"))
        return expected


def load_cases(directory: str | os.PathLike[str], patterns: Sequence[str] = ()) -> list[Case]:
    """Every case under ``directory`` (sorted by id), optionally filtered by id globs."""
    cases = []
    for case_json in sorted(Path(directory).glob("*/case.json")):
        meta = CaseModel.model_validate_json(case_json.read_text(encoding="utf-8"))
        if meta.id != case_json.parent.name:
            raise ValueError(f"{case_json}: id {meta.id!r} differs from its directory name")
        if patterns and not any(fnmatch.fnmatch(meta.id, p) for p in patterns):
            continue
        cases.append(Case(case_json.parent, meta))
    return cases


@dataclass
class Completed:
    """What a protocol command did."""

    returncode: int | None  # None: timed out
    stdout: str
    stderr: str


class Command:
    """A protocol command line (spec §17.2), run as a subprocess."""

    def __init__(self, command: str | Sequence[str], *, timeout: float = 60.0) -> None:
        self.argv = shlex.split(command) if isinstance(command, str) else list(command)
        self.timeout = timeout

    def __call__(self, *args: str) -> Completed:
        try:
            done = subprocess.run([*self.argv, *args], capture_output=True, timeout=self.timeout, check=False,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            return Completed(None, _text(exc.stdout), _text(exc.stderr))
        except OSError as exc:
            return Completed(127, "", f"cannot run {self.argv!r}: {exc}")
        return Completed(done.returncode, _text(done.stdout), _text(done.stderr))

    def __str__(self) -> str:
        return shlex.join(self.argv)


class InProcessCommand(Command):
    """A protocol command implemented by a Python function, run in this process (no startup cost).

    ``function(args, stdout, stderr) -> exit status`` receives the sub-command
    and its arguments (``["read", path]``). An exception escaping it counts as
    a crash (exit status 70). There is no timeout, and :func:`run` runs
    in-process commands one at a time, so a function may patch module state.
    """

    def __init__(self, function: Callable[[list[str], Any, Any], int], name: str = "in-process") -> None:
        self.function = function
        self.argv = [name]
        self.timeout = float("inf")

    def __call__(self, *args: str) -> Completed:
        import io
        import traceback

        out, err = io.StringIO(), io.StringIO()
        try:
            code = self.function(list(args), out, err)
        except Exception:  # a crash of the implementation under test is a result, not a runner error
            err.write(traceback.format_exc())
            code = 70
        return Completed(code, out.getvalue(), err.getvalue())


def reference_command() -> InProcessCommand:
    """The reference implementation's protocol command, in-process."""
    from .impl import run as impl_run

    return InProcessCommand(lambda args, out, err: impl_run(args[0], args[1:], stdout=out, stderr=err),
                            "opencheckpoint conformance impl (in-process)")


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode("utf-8", errors="replace")


def capabilities_of(command: Command) -> CapabilitiesModel:
    """Ask ``CMD capabilities``; a broken answer is an error (the run cannot be interpreted)."""
    done = command("capabilities")
    if done.returncode != 0:
        raise RuntimeError(f"{command} capabilities: exit status {done.returncode}: {done.stderr.strip()[:500]}")
    return CapabilitiesModel.model_validate_json(done.stdout)


def error_class_of(stderr: str) -> tuple[str | None, str]:
    """(class, problem) from the first stderr line ``error: <Class>: <message>`` (R-RDR-12)."""
    first = stderr.splitlines()[0] if stderr.strip() else ""
    parts = first.split(": ", 2)
    if len(parts) < 3 or parts[0] != "error" or not parts[1] or not parts[2].strip():
        return None, f"first stderr line is not 'error: <ErrorClass>: <message>': {first[:200]!r}"
    return parts[1], ""


def _symlinks_present(case: Case) -> bool:
    return any(p.is_symlink() for p in case.directory.rglob("*"))


def _skip_reason(case: Case, skip: dict[str, str], implements: Collection[str] = OPT_IN) -> str | None:
    """Why the case is skipped: a capability it requires is skipped, or opt-in and not implemented (§S.8)."""
    for capability in case.meta.requires:
        if capability in skip:
            return f"capability {capability!r} skipped: {skip[capability]}"
        if capability in OPT_IN and capability not in implements:
            return (f"capability {capability!r} not implemented (opt-in: not named in 'implements' of CMD "
                    "capabilities, spec §S.8)")
        if capability == "symlinks" and not _symlinks_present(case):
            return "this checkout has no symbolic links (core.symlinks=false?)"
    return None


def run_reader_case(case: Case, command: Command, skip: dict[str, str],
                    implements: Collection[str] = OPT_IN) -> Outcome:
    """Run ``CMD read`` on one case and judge it."""
    started = time.perf_counter()
    outcome = Outcome(case.id, "reader", "pass", spec_sections=list(case.meta.spec_sections))
    reason = _skip_reason(case, skip, implements)
    if reason:
        outcome.status, outcome.detail = "skip", reason
        return outcome
    done = command("read", str(case.checkpoint))
    outcome.seconds = time.perf_counter() - started
    if done.returncode is None:
        outcome.status, outcome.detail = "fail", f"timed out after {command.timeout:g} s"
    elif case.meta.valid:
        if done.returncode != 0:
            outcome.status = "fail"
            outcome.detail = f"rejected a valid checkpoint (exit {done.returncode}): {_first_line(done.stderr)}"
        else:
            try:
                printed = json.loads(done.stdout)
            except ValueError as exc:
                outcome.status, outcome.detail = "fail", f"stdout is not JSON: {exc}"
            else:
                diff = first_difference(printed, case.expected())
                if diff:
                    outcome.status, outcome.detail = "fail", f"rendering differs from expected.json at {diff}"
    else:
        expected = case.meta.error_class
        if done.returncode == 0:
            outcome.status, outcome.detail = "fail", f"accepted a checkpoint that must be rejected with {expected}"
        elif done.returncode != 1:
            outcome.status = "fail"
            outcome.detail = f"exit status {done.returncode} (crash?), expected 1: {_first_line(done.stderr)}"
        else:
            reported, problem = error_class_of(done.stderr)
            if reported is None:
                outcome.status, outcome.detail = "fail", problem
            elif reported != expected:
                outcome.status = "fail"
                outcome.detail = f"reported {reported}, expected {expected}: {_first_line(done.stderr)}"
            elif missing := [t for t in case.meta.message_contains if t not in _first_line(done.stderr)]:
                outcome.status = "fail"
                outcome.detail = f"the error message lacks {missing}: {_first_line(done.stderr)}"
            else:
                outcome.detail = _first_line(done.stderr)
                outcome.advisory = rule_advisory(outcome.detail, case.meta.spec_sections)
    return outcome


def run_writer_case(case: Case, command: Command, skip: dict[str, str], workdir: Path) -> Outcome:
    """Have ``CMD write`` write a valid case's content; read it back with the reference reader."""
    started = time.perf_counter()
    outcome = Outcome(case.id, "writer", "pass", spec_sections=list(case.meta.spec_sections))
    reason = _skip_reason(case, skip)
    reader_only = sorted(READER_ONLY & set(case.meta.requires))
    if reason is None and reader_only:
        reason = f"a reader case (capability {reader_only[0]!r}): writers do not produce it from a rendering"
    expected = case.expected()
    if reason is None and not is_complete(expected):
        reason = "expected.json renders some bytes by digest only (Appendix B.6); not writable"
    if reason:
        outcome.status, outcome.detail = "skip", reason
        return outcome
    out = workdir / case.id / ("checkpoint.zip" if case.meta.form == "archive" else "checkpoint")
    out.parent.mkdir(parents=True, exist_ok=True)
    done = command("write", str(case.directory / "expected.json"), str(out))
    outcome.seconds = time.perf_counter() - started
    if done.returncode is None:
        outcome.status, outcome.detail = "fail", f"timed out after {command.timeout:g} s"
        return outcome
    if done.returncode != 0:
        outcome.status = "fail"
        outcome.detail = f"write failed (exit {done.returncode}): {_first_line(done.stderr)}"
        return outcome
    from ..format.errors import CheckpointError

    try:
        written = render_checkpoint(out)
    except CheckpointError as exc:
        outcome.status, outcome.detail = "fail", f"the written checkpoint is invalid: {exc}"
        return outcome
    if written["form"] != case.meta.form:
        outcome.status, outcome.detail = "fail", f"wrote the {written['form']} form, expected {case.meta.form}"
        return outcome
    diff = first_difference(writer_view(written), writer_view(expected))
    if diff:
        outcome.status, outcome.detail = "fail", f"written content differs at {diff}"
    return outcome


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0][:300] if lines else "(no stderr)"


def run(
    *,
    reader: str | Sequence[str] | None,
    writer: str | Sequence[str] | None = None,
    cases_dir: str | os.PathLike[str] | None = None,
    patterns: Sequence[str] = (),
    timeout: float = 60.0,
    jobs: int = 0,
    known_failures: dict[str, str] | None = None,
    progress: Callable[[Outcome], None] | None = None,
) -> Report:
    """Run the suite; return the :class:`Report` (nothing is printed)."""
    directory = Path(cases_dir) if cases_dir else default_cases_dir()
    if not directory.is_dir():
        raise FileNotFoundError(f"cases directory {directory} does not exist: {CASES_HINT}")
    cases = load_cases(directory, patterns)
    if not cases:
        # Nothing to run must never read as a pass (a wrong --cases directory or --case pattern).
        raise FileNotFoundError(f"no conformance case in {directory} (patterns: {list(patterns) or 'all'}); "
                                f"{CASES_HINT}")
    report = Report(_describe(reader), _describe(writer), str(directory))
    known = known_failures or {}
    workers = jobs or min(8, os.cpu_count() or 1)
    if isinstance(reader, InProcessCommand) or isinstance(writer, InProcessCommand):
        workers = 1

    def finish(outcome: Outcome) -> Outcome:
        if outcome.status == "fail" and outcome.case in known:
            outcome.status = "known-failure"
            outcome.detail = f"{known[outcome.case]} | {outcome.detail}"
        if progress:
            progress(outcome)
        return outcome

    if reader is not None:
        command = Command(reader, timeout=timeout) if not isinstance(reader, Command) else reader
        caps = capabilities_of(command)
        report.capabilities["reader"] = caps.model_dump()
        skip: dict[str, str] = dict(caps.skip.items())
        implements = frozenset(caps.implements)
        if "read" not in caps.modes:
            raise RuntimeError(f"{command} does not declare mode 'read'")
        with ThreadPoolExecutor(workers) as pool:
            report.outcomes += [finish(o) for o in
                                pool.map(lambda c: run_reader_case(c, command, skip, implements), cases)]
    if writer is not None:
        command = Command(writer, timeout=timeout) if not isinstance(writer, Command) else writer
        caps = capabilities_of(command)
        report.capabilities["writer"] = caps.model_dump()
        if "write" not in caps.modes:
            raise RuntimeError(f"{command} does not declare mode 'write'")
        skip = dict(caps.skip.items())
        valid = [c for c in cases if c.meta.valid and not c.meta.read_path]
        with tempfile.TemporaryDirectory(prefix="oc-conformance-") as tmp, ThreadPoolExecutor(workers) as pool:
            report.outcomes += [finish(o) for o in
                                pool.map(lambda c: run_writer_case(c, command, skip, Path(tmp)), valid)]
    return report


def _describe(command: str | Sequence[str] | None) -> str | None:
    if command is None:
        return None
    if isinstance(command, str):
        return command
    return str(command) if isinstance(command, Command) else shlex.join(command)


# -- printing ---------------------------------------------------------------------------------
def main_from_args(args: argparse.Namespace) -> int:
    """``opencheckpoint conformance run``; exit 0 when nothing failed, 1 otherwise, 2 on usage errors."""
    if not args.reader and not args.writer:
        print("error: give --reader CMD and/or --writer CMD", file=sys.stderr)
        return 2
    if _refused_reports(args):
        return 2
    known: dict[str, str] = {}
    if args.known_failures:
        known = json.loads(Path(args.known_failures).read_text(encoding="utf-8"))
    try:
        report = run(reader=args.reader, writer=args.writer, cases_dir=args.cases, patterns=args.case,
                     timeout=args.timeout, jobs=args.jobs, known_failures=known)
    except (RuntimeError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not report.outcomes:
        # Nothing ran: a wrong --cases directory or --case pattern must never read as a pass.
        print(f"error: no conformance case ran from {report.cases_dir}; {CASES_HINT}", file=sys.stderr)
        return 2
    if args.json:
        text = json.dumps(report.to_dict(), indent=2) + "\n"
        write_output_file(Path(args.json), lambda out: out.write_text(text, encoding="utf-8"))
    if args.junit:
        write_output_file(Path(args.junit),
                          lambda out: report.junit().write(out, encoding="utf-8", xml_declaration=True))
    print_report(report, quiet=args.quiet)
    return 0 if report.ok else 1


def _refused_reports(args: argparse.Namespace) -> bool:
    """Whether a report file (``--json``, ``--junit``) may not be written (the reason printed): the command
    line's save rule, checked before any case runs. Only an earlier report is replaced, with ``--overwrite``."""
    for name, kind, recognised in (("json", "JSON report", _is_json_report), ("junit", "JUnit XML report", _is_junit)):
        path = getattr(args, name)
        if not path:
            continue
        try:
            check_output_file(Path(path), kind=kind, overwrite=args.overwrite, recognised=recognised)
        except TargetExists as exc:
            refused_target(exc, args.overwrite)
            return True
    return False


def _is_json_report(path: Path) -> bool:
    value = json.loads(path.read_text(encoding="utf-8")) if path.stat().st_size < 256 << 20 else None
    return isinstance(value, dict) and {"reader", "writer", "counts", "outcomes"} <= value.keys()


def _is_junit(path: Path) -> bool:
    with open(path, "rb") as handle:
        head = handle.read(4096)
    return head.startswith(b"<?xml") and b'<testsuites name="opencheckpoint-conformance"' in head
