"""Every MUST requirement of the spec has a case or a reasoned exemption, and README.md's table is current."""

from __future__ import annotations

import json
from pathlib import Path

from oc_conformance_helpers import CASES, CONFORMANCE, load_script

trace = load_script("traceability")


def test_every_requirement_has_a_case_or_a_reasoned_exemption() -> None:
    assert trace.problems() == []


def test_requirements_are_found_in_the_spec() -> None:
    ids = {r.id for r in trace.requirements()}
    # spot checks across areas, so a parser regression that finds nothing cannot pass silently
    assert {"R-CON-1", "R-ZIP-22", "R-MAN-4", "R-TREE-28", "R-ARR-15", "R-LIM-17", "R-RDR-12", "R-WTR-7"} <= ids
    assert len(ids) >= 200


def test_an_uncovered_requirement_is_reported(tmp_path: Path) -> None:
    exemptions = json.loads((CONFORMANCE / "exemptions.json").read_text())
    dropped = next(iter(exemptions))
    del exemptions[dropped]
    path = tmp_path / "exemptions.json"
    path.write_text(json.dumps(exemptions))
    assert f"{dropped}: no case and no exemption" in trace.problems(exempt_path=path)


def test_exempting_a_covered_requirement_is_reported(tmp_path: Path) -> None:
    exemptions = json.loads((CONFORMANCE / "exemptions.json").read_text())
    exemptions["R-ARR-5"] = "pretending that alignment cannot be tested by a case"
    path = tmp_path / "exemptions.json"
    path.write_text(json.dumps(exemptions))
    assert any(p.startswith("R-ARR-5: exempt but also covered") for p in trace.problems(exempt_path=path))


def test_exemptions_stay_few() -> None:
    exempt = json.loads((CONFORMANCE / "exemptions.json").read_text())
    assert len(exempt) <= len(trace.requirements()) // 4


def test_readme_table_is_current() -> None:
    text = (CONFORMANCE / "README.md").read_text(encoding="utf-8")
    start = text.index(trace.BEGIN) + len(trace.BEGIN)
    end = text.index(trace.END)
    assert text[start:end].strip() == trace.table_markdown().strip(), (
        "run: .venv/bin/python conformance/traceability.py --write")


def test_case_sections_name_real_requirements() -> None:
    ids = {r.id for r in trace.requirements()}
    for case_json in CASES.glob("*/case.json"):
        for section in json.loads(case_json.read_text())["spec_sections"]:
            assert not section.startswith("R-") or section in ids, (case_json.parent.name, section)


def test_each_requirement_is_defined_in_exactly_one_part_of_the_spec() -> None:
    """The spec is split into parts that share rule IDs: each ID is defined once, in the part that owns its area."""
    owners: dict[str, list[str]] = {}
    for part in trace.SPEC_PARTS:
        for line in (trace.SPEC_DIR / part).read_text(encoding="utf-8").splitlines():
            match = trace._REQUIREMENT.match(line.strip())
            if match:
                owners.setdefault(match.group(1), []).append(part)
    assert {rid: parts for rid, parts in owners.items() if len(parts) > 1} == {}
    assert {owners[rid][0] for rid in owners if rid.startswith("R-ZIP-")} == {"opencheckpoint-v1-archive.md"}
    assert owners["R-RDR-3"] == ["opencheckpoint-v1-conformance.md"]
    assert owners["R-RDR-1"] == ["opencheckpoint-v1.md"]
