"""Deliberately broken implementations must FAIL the suite: the cases bite.

Each mutant is a protocol command wrapped around the reference implementation
that breaks one behaviour the spec requires: it accepts checkpoints the
reference rejects for one reason (skipped checksum checks, accepted ``..``
paths, ignored ``must_understand``, accepted newer versions, ignored
alignment, ...), reports the wrong class, or renders content slightly wrong
(quieted NaNs, lost ``-0.0``, tuples as lists, int keys as strings, ...).
The reference's own answers are computed once and shared, so the mutants
cost almost nothing; one mutant also runs as a real subprocess wrapper.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from oc_conformance_helpers import CASES

from opencheckpoint.conformance.runner import Completed, InProcessCommand, Report, reference_command, run

_REFERENCE = reference_command()


@cache
def _reference(*args: str) -> Completed:
    return _REFERENCE(*args)


def _mutant(transform: Callable[[list[str], Completed], Completed]) -> InProcessCommand:
    """A command that asks the reference (memoized for reads) and then misbehaves via ``transform``."""

    def command(args: list[str], out: Any, err: Any) -> int:
        done = _reference(*args) if args[0] in ("read", "capabilities") else _REFERENCE(*args)
        if args[0] != "capabilities":
            done = transform(args, done)
        out.write(done.stdout)
        err.write(done.stderr)
        return done.returncode if done.returncode is not None else 124

    return InProcessCommand(command, "mutant")


def accepts(predicate: Callable[[str], bool]) -> InProcessCommand:
    """A reader that accepts what the reference rejects when the error line matches ``predicate``."""

    def transform(args: list[str], done: Completed) -> Completed:
        if done.returncode == 1 and predicate(done.stderr.splitlines()[0]):
            return Completed(0, json.dumps({"rendering": 1, "components": {}}), "")
        return done

    return _mutant(transform)


def renders(edit: Callable[[Any], Any]) -> InProcessCommand:
    """A reader whose successful renderings are passed through ``edit`` (JSON value -> JSON value)."""

    def transform(args: list[str], done: Completed) -> Completed:
        if done.returncode == 0:
            return Completed(0, json.dumps(edit(json.loads(done.stdout))), done.stderr)
        return done

    return _mutant(transform)


def _walk(value: Any, node_edit: Callable[[dict[str, Any]], dict[str, Any]]) -> Any:
    if isinstance(value, dict):
        return node_edit({k: _walk(v, node_edit) for k, v in value.items()})
    if isinstance(value, list):
        return [_walk(v, node_edit) for v in value]
    return value


def _node(kind: str, change: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[Any], Any]:
    return lambda doc: _walk(doc, lambda n: change(n) if n.get("type") == kind else n)


def _quiet_nan(n: dict[str, Any]) -> dict[str, Any]:
    bits = int(n["bits"], 16)
    is_nan = (bits >> 52) & 0x7FF == 0x7FF and bits & ((1 << 52) - 1)
    return {**n, "bits": "7ff8000000000000"} if is_nan else n


def _int_keys_as_str(n: dict[str, Any]) -> dict[str, Any]:
    return {**n, "items": [[{"str": k["int"]} if "int" in k else k, v] for k, v in n["items"]]}


def _sorted_keys(n: dict[str, Any]) -> dict[str, Any]:
    return {**n, "items": sorted(n["items"], key=lambda kv: json.dumps(kv[0], sort_keys=True))}


def _wrap_int64(n: dict[str, Any]) -> dict[str, Any]:
    value = int(n["value"])
    return {**n, "value": str((value + 2**63) % 2**64 - 2**63) if not -(2**63) <= value < 2**64 else n["value"]}


def _drop_opaque(doc: dict[str, Any]) -> dict[str, Any]:
    comps = doc.get("components", {})
    return {**doc, "components": {k: v for k, v in comps.items() if v["content"]["type"] != "opaque"}}


def _drop_ignorable_extensions(doc: dict[str, Any]) -> dict[str, Any]:
    exts = doc.get("extensions", {})
    return {**doc, "extensions": {k: v for k, v in exts.items() if v["must_understand"]}}


def _line_has(*words: str) -> Callable[[str], bool]:
    return lambda line: any(w in line for w in words)


READER_MUTANTS: dict[str, tuple[InProcessCommand, set[str]]] = {
    # name: (command, cases that must fail among others)
    "skips checksum checks": (accepts(_line_has("IntegrityError")),
                              {"reject-data-corrupt", "reject-array-checksum", "reject-manifest-checksum",
                               "reject-sha256", "reject-zip-bad-crc32"}),
    "accepts '..' paths": (accepts(_line_has("'..'")), {"reject-path-dotdot", "reject-zip-unsafe-member"}),
    "accepts any unsafe path": (accepts(_line_has("UnsafePath")),
                                {"reject-path-absolute", "reject-path-backslash", "reject-path-case-collision",
                                 "reject-zip-symlink-member"}),
    "ignores must_understand": (accepts(_line_has("UnsupportedExtension")),
                                {"reject-extension-required", "reject-extension-reserved"}),
    "accepts newer versions": (accepts(_line_has("UnsupportedVersion")),
                               {"reject-format-version-2", "reject-kind-version", "reject-version-first"}),
    "ignores alignment": (accepts(_line_has("R-ARR-5", "R-ZIP-18")),
                          {"reject-array-misaligned", "reject-zip-misaligned"}),
    "ignores limits": (accepts(_line_has("LimitExceeded")),
                       {"reject-depth-129", "reject-ndim-65", "reject-shape-overflow", "reject-json-depth"}),
    "lenient ZIP parser": (accepts(_line_has("ArchiveError")),
                           {"reject-zip-compressed", "reject-zip-data-descriptor", "reject-zip-duplicate-name",
                            "reject-zip-name-mismatch"}),
    "lenient JSON parser": (accepts(_line_has("R-MAN-3", "R-MAN-4", "R-CMP-18")),
                            {"reject-manifest-nan", "reject-manifest-duplicate-key", "reject-json-value-nan"}),
    "accepts unknown tags and dtypes": (accepts(_line_has("R-TREE-18", "R-TREE-19", "UnknownDtype")),
                                        {"reject-tag-reserved", "reject-unknown-dtype"}),
    "ignores layout rules": (accepts(_line_has("ArrayLayoutError")),
                             {"reject-array-overlap", "reject-padding-nonzero", "reject-out-of-bounds",
                              "reject-nbytes-shape", "reject-bool-byte"}),
    "reports every error as CheckpointError": (
        _mutant(lambda a, d: Completed(1, "", "error: CheckpointError: " + d.stderr.split(": ", 2)[-1])
                if d.returncode == 1 else d), {"reject-data-corrupt", "reject-manifest-nan"}),
    "fails on unknown component kinds": (
        _mutant(lambda a, d: Completed(1, "", "error: UnknownComponentKind: not implemented\n")
                if d.returncode == 0 and '"opaque"' in d.stdout else d), {"third-party-kind"}),
    "quiets NaNs": (renders(_node("float", _quiet_nan)), {"tree-float-special", "tree-float32-encoding"}),
    "loses the sign of zero": (renders(_node("float", lambda n: {**n, "bits": "0000000000000000"}
                                             if n["bits"] == "8000000000000000" else n)), {"tree-float-special"}),
    "reads tuples as lists": (renders(_node("tuple", lambda n: {**n, "type": "list"})), {"tree-list-tuple"}),
    "stringifies int keys": (renders(_node("dict", _int_keys_as_str)), {"tree-dict-int-keys"}),
    "sorts dict keys": (renders(_node("dict", _sorted_keys)), {"tree-dict-order"}),
    "wraps big ints to 64 bits": (renders(_node("int", _wrap_int64)), {"tree-big-int"}),
    "drops opaque components": (renders(_drop_opaque), {"third-party-kind"}),
    "drops ignorable extensions": (renders(_drop_ignorable_extensions), {"extension-not-understood"}),
}


@pytest.mark.parametrize("name", list(READER_MUTANTS))
def test_broken_reader_fails_the_suite(name: str) -> None:
    command, must_fail = READER_MUTANTS[name]
    report = run(reader=command, cases_dir=CASES)
    failed = {o.case for o in report.failures}
    assert not report.ok, f"mutant {name!r} passed the whole suite"
    assert must_fail <= failed, f"mutant {name!r} passed {sorted(must_fail - failed)}"


def _writer_mutant(edit: Callable[[dict[str, Any], str], tuple[dict[str, Any], str]]) -> InProcessCommand:
    """A writer that edits expected.json (or the output path) before the reference writes it."""

    def command(args: list[str], out: Any, err: Any) -> int:
        if args[0] == "write":
            document = json.loads(Path(args[1]).read_text())
            document, target = edit(document, args[2])
            edited = Path(target).parent / "edited-expected.json"
            edited.write_text(json.dumps(document))
            args = ["write", str(edited), target]
        done = _REFERENCE(*args)
        out.write(done.stdout)
        err.write(done.stderr)
        return done.returncode or 0

    return InProcessCommand(command, "writer-mutant")


WRITER_MUTANTS: dict[str, tuple[InProcessCommand, set[str]]] = {
    "always writes the directory form": (
        _writer_mutant(lambda doc, out: (doc, out.removesuffix(".zip") + "-dir")), {"archive-tree", "archive-mixed"}),
    "writes tuples as lists": (
        _writer_mutant(lambda doc, out: (_walk(doc, lambda n: {**n, "type": "list"} if n.get("type") == "tuple"
                                               else n), out)), {"tree-list-tuple"}),
    "drops component hints and metadata": (
        _writer_mutant(lambda doc, out: ({**doc, "components": {
            k: {m: v for m, v in r.items() if m not in ("hints", "metadata")}
            for k, r in doc["components"].items()}}, out)), {"component-hints-metadata"}),
}


@pytest.mark.parametrize("name", list(WRITER_MUTANTS))
def test_broken_writer_fails_the_suite(name: str) -> None:
    command, must_fail = WRITER_MUTANTS[name]
    report = run(reader=None, writer=command, cases_dir=CASES)
    failed = {o.case for o in report.failures}
    assert not report.ok and must_fail <= failed, sorted(must_fail - failed)


def test_subprocess_wrapper_mutant_fails(tmp_path: Path) -> None:
    """The same idea as a real wrapper command, run by the runner as a subprocess."""
    script = tmp_path / "skip_checksums.py"
    script.write_text(textwrap.dedent("""
        import io, sys
        from opencheckpoint.conformance.impl import run
        out, err = io.StringIO(), io.StringIO()
        code = run(sys.argv[1], sys.argv[2:], stdout=out, stderr=err)
        if code == 1 and err.getvalue().startswith("error: IntegrityError"):
            print("{}")  # a reader that does not verify checksums reads the file happily
            sys.exit(0)
        sys.stdout.write(out.getvalue())
        sys.stderr.write(err.getvalue())
        sys.exit(code)
    """))
    report: Report = run(reader=f"{sys.executable} {script}", cases_dir=CASES,
                         patterns=["reject-data-corrupt", "reject-truncated", "tree-none"])
    status = {o.case: o.status for o in report.outcomes}
    assert status == {"reject-data-corrupt": "fail", "reject-truncated": "fail", "tree-none": "pass"}
