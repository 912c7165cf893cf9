"""The runner reports, as an advisory and never as a failure, a rule ID the case does not cite (issue 9 §1)."""

from __future__ import annotations

import io
from typing import Any

from opencheckpoint.conformance.report import Report, print_report
from opencheckpoint.conformance.runner import (
    InProcessCommand,
    default_cases_dir,
    load_cases,
    reference_command,
    run_reader_case,
)

CASE = "reject-zip-eocd-gap"  # cites R-ZIP-24; the reference reader reported R-ZIP-20 before issue 9


def _mislabelling_reader(args: list[str], out: Any, err: Any) -> int:
    err.write("error: ArchiveError: checkpoint.zip: central directory gap [R-ZIP-20]\n")
    return 1


def test_a_rule_id_the_case_does_not_cite_is_an_advisory_not_a_failure() -> None:
    (case,) = load_cases(default_cases_dir(), [CASE])
    outcome = run_reader_case(case, InProcessCommand(_mislabelling_reader, "mislabel"), {})
    assert outcome.status == "pass"
    assert outcome.advisory == "reported rule R-ZIP-20; the case cites R-ZIP-24"
    report = Report(reader="mislabel", writer=None, cases_dir=str(default_cases_dir()), outcomes=[outcome])
    printed = io.StringIO()
    print_report(report, quiet=True, file=printed)
    assert "advisory reader reject-zip-eocd-gap: reported rule R-ZIP-20" in printed.getvalue()
    assert "advisory: reported rule R-ZIP-20" in (report.junit().getroot().find(".//system-out").text or "")


def test_the_reference_reader_reports_the_rule_the_case_cites() -> None:
    (case,) = load_cases(default_cases_dir(), [CASE])
    outcome = run_reader_case(case, reference_command(), {})
    assert outcome.status == "pass" and "[R-ZIP-24]" in outcome.detail
    assert outcome.advisory == ""
