"""What a conformance run found: one :class:`Outcome` per case and mode, the :class:`Report`, its printing.

The runner (:mod:`.runner`) decides each outcome; this module only holds and
shows them: a pass/fail matrix by case and by spec section, JUnit XML for CI,
and advisories (never failures), such as a rule ID reported that the case
does not cite.
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Status = Literal["pass", "fail", "skip", "known-failure"]


@dataclass
class Outcome:
    """The result of one case in one mode."""

    case: str
    mode: Literal["reader", "writer"]
    status: Status
    detail: str = ""
    spec_sections: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: Advisory, never a failure: e.g. the rule ID reported is not among those the case cites.
    advisory: str = ""

    @property
    def ok(self) -> bool:
        return self.status != "fail"


#: A rule ID at the end of a protocol error line (``... [R-ZIP-24]``), optional in the protocol.
_REPORTED_RULE = re.compile(r"\[(R-[A-Z]+-[0-9]+)\]\s*$")


def rule_advisory(line: str, cited: Sequence[str]) -> str:
    """Why the rule ID an implementation reported is not among the requirement IDs the case cites ("" if it is).

    Advisory only: the protocol judges the error class; a mismatch usually means a mislabelled check
    (or a case that should cite one more rule).

    >>> rule_advisory("error: ArchiveError: x.zip: gap [R-ZIP-20]", ["R-ZIP-24"])
    'reported rule R-ZIP-20; the case cites R-ZIP-24'
    >>> rule_advisory("error: ArchiveError: x.zip: gap [R-ZIP-24]", ["R-ZIP-24", "3.3"])
    ''
    """
    match = _REPORTED_RULE.search(line)
    rules = [section for section in cited if section.startswith("R-")]
    if match is None or not rules or match.group(1) in rules:
        return ""
    return f"reported rule {match.group(1)}; the case cites {', '.join(rules)}"


@dataclass
class Report:
    """Every outcome of a run, plus what was run."""

    reader: str | None
    writer: str | None
    cases_dir: str
    outcomes: list[Outcome] = field(default_factory=list)
    capabilities: dict[str, Any] = field(default_factory=dict)

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "fail"]

    @property
    def ok(self) -> bool:
        return not self.failures

    def counts(self) -> dict[str, int]:
        out = {"pass": 0, "fail": 0, "skip": 0, "known-failure": 0}
        for o in self.outcomes:
            out[o.status] += 1
        return out

    def by_section(self) -> dict[str, dict[str, int]]:
        table: dict[str, dict[str, int]] = {}
        for o in self.outcomes:
            for section in o.spec_sections:
                row = table.setdefault(section, {"pass": 0, "fail": 0, "skip": 0, "known-failure": 0})
                row[o.status] += 1
        return dict(sorted(table.items(), key=lambda kv: _section_key(kv[0])))

    def to_dict(self) -> dict[str, Any]:
        return {"reader": self.reader, "writer": self.writer, "cases_dir": self.cases_dir, "ok": self.ok,
                "counts": self.counts(), "capabilities": self.capabilities,
                "outcomes": [asdict(o) for o in self.outcomes], "by_section": self.by_section()}

    def junit(self) -> ET.ElementTree:
        suites = ET.Element("testsuites", name="opencheckpoint-conformance")
        for mode in ("reader", "writer"):
            items = [o for o in self.outcomes if o.mode == mode]
            if not items:
                continue
            counts = {s: sum(o.status == s for o in items) for s in ("fail", "skip", "known-failure")}
            suite = ET.SubElement(suites, "testsuite", name=f"conformance-{mode}", tests=str(len(items)),
                                  failures=str(counts["fail"]), skipped=str(counts["skip"] + counts["known-failure"]),
                                  errors="0", time=f"{sum(o.seconds for o in items):.3f}")
            for o in items:
                test = ET.SubElement(suite, "testcase", classname=f"conformance.{mode}", name=o.case,
                                     time=f"{o.seconds:.3f}")
                if o.status == "fail":
                    ET.SubElement(test, "failure", message=o.detail[:500]).text = o.detail
                elif o.status == "skip":
                    ET.SubElement(test, "skipped", message=o.detail[:500])
                elif o.status == "known-failure":
                    ET.SubElement(test, "skipped", message=f"known failure: {o.detail}"[:500])
                if o.advisory:
                    ET.SubElement(test, "system-out").text = f"advisory: {o.advisory}"
        return ET.ElementTree(suites)


def _section_key(section: str) -> tuple[Any, ...]:
    if section.startswith("R-"):
        area, _, number = section[2:].rpartition("-")
        return (1, area, int(number) if number.isdigit() else 0)
    return (0, tuple(int(p) if p.isdigit() else 0 for p in section.lstrip("B").split(".") if p), section)


def print_report(report: Report, *, quiet: bool = False, file: Any = None) -> None:
    """A pass/fail matrix by case and by spec section (rich tables), then a summary line."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=file or sys.stdout, highlight=False, width=160)
    style = {"pass": "green", "fail": "bold red", "skip": "yellow", "known-failure": "magenta", "-": "dim"}
    if not quiet:
        by_case: dict[str, dict[str, Outcome]] = {}
        for o in report.outcomes:
            by_case.setdefault(o.case, {})[o.mode] = o
        table = Table("case", "reader", "writer", "detail", title="conformance cases", title_justify="left")
        for case_id, modes in sorted(by_case.items()):
            cells = []
            for mode in ("reader", "writer"):
                status = modes[mode].status if mode in modes else "-"
                cells.append(f"[{style[status]}]{status}[/]")
            detail = "; ".join(o.detail for o in modes.values() if o.status != "pass" and o.detail)
            table.add_row(case_id, *cells, detail[:200], )
        console.print(table)
        sections = Table("section", "pass", "fail", "skip", "known", title="by spec section", title_justify="left")
        for section, row in report.by_section().items():
            sections.add_row(section, str(row["pass"]), f"[{style['fail']}]{row['fail']}[/]" if row["fail"] else "0",
                             str(row["skip"]), str(row["known-failure"]))
        console.print(sections)
    counts = report.counts()
    for o in report.outcomes:
        if o.status == "known-failure":
            console.print(f"[magenta]known failure[/] {o.mode} {o.case}: {o.detail}", markup=True)
        if o.advisory:
            console.print(f"[cyan]advisory[/] {o.mode} {o.case}: {o.advisory}", markup=True)
    verdict = "[green]PASS[/]" if report.ok else "[bold red]FAIL[/]"
    console.print(f"{verdict}: {counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped, "
                  f"{counts['known-failure']} known failures ({len({o.case for o in report.outcomes})} cases)")
