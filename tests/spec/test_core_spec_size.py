"""The core spec reads in half an hour and keeps every rule (issue 21, item 3).

``spec/opencheckpoint-v1.md`` holds the normative core in at most 9,000 words (``wc -w``); rationale, examples
and notes to implementers live in the informative companion ``spec/opencheckpoint-v1-notes.md``, which
carries the section numbers of the core and is linked from it section by section. Cutting the core must
never drop a requirement: every ID the core defined when it was cut stays defined there, and every ID that
the rule tables of the package or the conformance cases name is defined in a normative part.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "spec"
CORE = SPEC / "opencheckpoint-v1.md"
NOTES = SPEC / "opencheckpoint-v1-notes.md"
OVERVIEW = SPEC / "overview.md"
#: The normative parts: format version 1 (core, archive profile, conformance) and the version 2 delta.
NORMATIVE = ("opencheckpoint-v1.md", "opencheckpoint-v1-archive.md", "opencheckpoint-v1-conformance.md",
             "opencheckpoint-v2.md")
CORE_WORD_LIMIT = 9_000
OVERVIEW_WORD_LIMIT = 1_000

#: Every requirement ID the core defined when it was cut to 9,000 words (195 IDs). A later text revision may
#: add IDs or mark one withdrawn (§2.2), but never drops one from the core.
_CORE_NUMBERS = {
    "CON": range(1, 8), "PATH": range(1, 6), "MAN": range(1, 24), "CHK": range(1, 15), "CMP": range(1, 22),
    "EXT": range(1, 12), "TREE": range(1, 29), "ARR": range(1, 16), "DT": range(1, 3), "PUB": range(1, 25),
    "RDR": (1, 2, 11, 13, 14), "VER": range(1, 16), "LIM": range(0, 20), "ERR": range(1, 6),
}
CORE_IDS = frozenset(f"R-{area}-{n}" for area, numbers in _CORE_NUMBERS.items() for n in numbers)

_DEFINED = re.compile(r"^\*\*\[(R-[A-Z]+-[0-9]+)\]\*\*", re.MULTILINE)
_ID = re.compile(r"R-[A-Z]+-[0-9]+")
_KEYWORD = re.compile(r"\b(MUST|SHALL|SHOULD|REQUIRED|RECOMMENDED|MAY|OPTIONAL)\b")
_HEADING = re.compile(r"^(#{1,6}) +(.+?) *$", re.MULTILINE)
_LINK = re.compile(r"\]\(([A-Za-z0-9._-]+\.md)?#([^)\s]+)\)")
_SECTION = re.compile(r"^(?:Appendix )?((?:[0-9]+|[A-Z])(?:\.[0-9]+)*)\.? ")


def words(text: str) -> int:
    """What ``wc -w`` counts: runs of non-whitespace."""
    return len(text.split())


def defined_ids(text: str) -> set[str]:
    """The IDs a spec text defines: ``**[R-...]**`` at the start of a line (as tests/spec/test_rule_coverage)."""
    return set(_DEFINED.findall(text))


def package_rule_ids() -> set[str]:
    """The IDs the package names as string literals (its rule tables and what raises their errors)."""
    out = set()
    for source in (ROOT / "reference_impl" / "opencheckpoint").rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _ID.fullmatch(node.value):
                out.add(node.value)
    return out


def lost_core_ids(core_text: str) -> list[str]:
    return sorted(CORE_IDS - defined_ids(core_text))


def slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def headings(text: str) -> list[tuple[int, str]]:
    """(level, text) of every heading outside fenced code blocks."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    return [(len(m.group(1)), m.group(2)) for m in _HEADING.finditer(prose)]


def anchors(path: Path) -> set[str]:
    return {slug(text) for _, text in headings(path.read_text(encoding="utf-8"))}


def broken_links(path: Path) -> list[str]:
    """Links ``file.md#anchor`` (or ``#anchor``) in a spec document whose target heading does not exist."""
    out = []
    for target, anchor in _LINK.findall(path.read_text(encoding="utf-8")):
        doc = SPEC / target if target else path
        if not doc.exists() or anchor not in anchors(doc):
            out.append(f"{path.name}: {target}#{anchor}")
    return out


def test_core_spec_is_at_most_9000_words() -> None:
    count = words(CORE.read_text(encoding="utf-8"))
    assert count <= CORE_WORD_LIMIT, f"{CORE.name} has {count} words: move rationale and examples to {NOTES.name}"


def test_overview_stays_a_five_minute_read() -> None:
    assert words(OVERVIEW.read_text(encoding="utf-8")) <= OVERVIEW_WORD_LIMIT


def test_the_core_keeps_every_requirement_id_it_had() -> None:
    assert len(CORE_IDS) == 195
    assert lost_core_ids(CORE.read_text(encoding="utf-8")) == []


def test_a_dropped_requirement_is_reported() -> None:
    text = CORE.read_text(encoding="utf-8")
    line = next(line for line in text.splitlines() if line.startswith("**[R-TREE-21]**"))
    assert lost_core_ids(text.replace(line, "A big int's bin is minimal.")) == ["R-TREE-21"]
    assert words("**[R-MAN-3]** The manifest MUST be  JSON.\n") == 6


def test_every_rule_of_the_package_and_the_cases_is_defined_in_a_normative_part() -> None:
    normative: dict[str, set[str]] = {part: defined_ids((SPEC / part).read_text(encoding="utf-8"))
                                      for part in NORMATIVE}
    defined = set().union(*normative.values())
    named = package_rule_ids()
    for case_json in (ROOT / "conformance" / "cases").glob("*/*/case.json"):
        named |= {s for s in json.loads(case_json.read_text(encoding="utf-8"))["spec_sections"] if s[:2] == "R-"}
    named |= set(json.loads((ROOT / "conformance" / "exemptions.json").read_text(encoding="utf-8")))
    assert {"R-MAN-13", "R-ZIP-22", "R-SHD-4", "R-RDR-12"} <= named  # the scan found the tables and cases
    assert sorted(named - defined) == []


def test_the_notes_are_informative_and_define_no_rule() -> None:
    text = NOTES.read_text(encoding="utf-8")
    assert "*This document is informative.*" in text.split("\n## ")[0]
    assert defined_ids(text) == set()
    assert sorted(set(_KEYWORD.findall(text))) == [], "requirement key words belong in the core"


def test_each_chapter_of_the_notes_is_a_chapter_of_the_core_and_both_link_to_each_other() -> None:
    core_text = CORE.read_text(encoding="utf-8")
    core_chapters = {text for level, text in headings(core_text) if level == 2}
    notes_text = NOTES.read_text(encoding="utf-8")
    chapters = re.split(r"^## ", notes_text, flags=re.MULTILINE)[1:]
    assert len(chapters) >= 10
    for chapter in chapters:
        title = chapter.splitlines()[0].strip()
        assert title in core_chapters, f"notes chapter {title!r} has no chapter of that title in the core"
        assert f"(opencheckpoint-v1.md#{slug(title)})" in chapter, f"notes chapter {title!r} does not link back"
        inner = {slug(title)} | {slug(text) for _, text in headings(chapter)}
        linked = set(re.findall(r"\(opencheckpoint-v1-notes\.md#([^)]+)\)", core_text))
        assert inner & linked, f"the core does not link to the notes of {title!r}"


@pytest.mark.parametrize("name", sorted(p.name for p in SPEC.glob("*.md")))
def test_links_between_spec_documents_resolve(name: str) -> None:
    assert broken_links(SPEC / name) == []


def test_a_broken_anchor_is_reported(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("## 1. Intro\n\n[ok](#1-intro) [gone](#2-missing)\n", encoding="utf-8")
    assert broken_links(doc) == ["doc.md: #2-missing"]


def test_section_numbers_that_cases_name_are_headings_of_the_spec() -> None:
    numbers = set()
    for part in NORMATIVE:
        for _, text in headings((SPEC / part).read_text(encoding="utf-8")):
            match = _SECTION.match(text)
            if match:
                numbers.add(match.group(1))
    named = set()
    for case_json in (ROOT / "conformance" / "cases").glob("*/*/case.json"):
        named |= {s for s in json.loads(case_json.read_text(encoding="utf-8"))["spec_sections"] if s[:2] != "R-"}
    assert {"8.8", "12.3", "B.6", "S.4"} <= named
    assert sorted(named - numbers) == []
