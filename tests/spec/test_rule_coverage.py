"""Every requirement ID of the spec maps to exactly one check, or to a reasoned exemption.

A *check site* of a rule is a function of the package that names the rule ID
as a literal (an error raised with ``rule="R-..."``, a rule table entry, a
table of rule IDs), found with :mod:`ast`. The dispatch calls of the
manifest walker (``found.check("R-MAN-13", ...)``) only name which rule runs
and are not sites. Rules of a per-version rule table (:mod:`opencheckpoint.rules`)
must have their table function as their only site; a rule a table only
declares (``TABLE.declare("R-...", Class)``, not a site) is checked where its
facts are, and that one function is its site. Rules not in a table yet
are held to the same standard, except those listed in :data:`SPREAD`, whose
checks still sit in several functions (the list may only shrink: a listed rule
that has become one check fails the test until it is removed from the list).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import opencheckpoint
from opencheckpoint.rules.archive import ZIP
from opencheckpoint.rules.container import CON
from opencheckpoint.rules.ijson import IJSON
from opencheckpoint.rules.paths import PATHS
from opencheckpoint.rules.publication import PUB
from opencheckpoint.rules.sharded import SHD
from opencheckpoint.rules.tree import TREE
from opencheckpoint.rules.v1 import V1
from opencheckpoint.rules.v2 import V2

PACKAGE = Path(opencheckpoint.__file__).parent
SPEC = Path(__file__).resolve().parents[2] / "spec"
_ID = re.compile(r"R-[A-Z]+-[0-9]+")
#: Method names whose first argument names the rule to dispatch to (not a check of its own).
_DISPATCH = {"check", "first", "integer", "members", "declare"}
#: Parts of the package that are not the reader: the conformance harness and the kit for adapter authors.
_NOT_CHECKS = ("conformance/", "testing/")

_WRITER = "a writer obligation: the reference writer meets it by construction; the conformance suite's writer mode "
_WRITER += "reads back what a writer wrote (tests/conformance), and tests/publish covers publication"
_BEHAVIOUR = "a reader behaviour, not a property of a file: no single check can raise it; tests pin the behaviour"
_PROTOCOL = "a rule of the conformance protocol, implemented by opencheckpoint.conformance (impl, runner)"
_ORDER = "the validation order itself: opening -> steps -> arrays run the steps in order (tests/core/test_order_*)"
_CHAIN = "a rule of the migration-chain declaration: a model validator of MigrationChain (tests/spec/test_migrations)"
_COLLECTIVE = ("the collective save procedure (format version 2, §S.7): a writer obligation met by the save engine "
               "of opencheckpoint.sharding; its multi-process tests (rank death, no publication) pin the behaviour")
_META = "a rule about other rules (it names the error class or itemsize they use); each of those has its check"
_REMOTE = "a writer obligation on object stores: remote/publish.py and run/remote_store.py meet it by construction; "
_REMOTE += "tests/remote covers it (memory:// and an S3 server, a writer killed before its manifest)"

#: Rule ID -> why it has no check site of its own.
EXEMPT: dict[str, str] = {
    **dict.fromkeys(["R-ARR-15", "R-EXT-6", "R-EXT-10", "R-EXT-11", "R-TREE-5", "R-TREE-6", "R-PUB-1", "R-PUB-2",
                     "R-PUB-3", "R-PUB-4", "R-PUB-5", "R-PUB-6", "R-PUB-7", "R-PUB-8", "R-PUB-9", "R-PUB-17",
                     "R-PUB-18", "R-PUB-19", "R-WTR-1", "R-WTR-2", "R-WTR-8", "R-VER-1", "R-VER-6"], _WRITER),
    **dict.fromkeys(["R-CHK-9", "R-CHK-10", "R-CHK-11", "R-CHK-12", "R-CHK-13", "R-CHK-14", "R-CMP-12", "R-CMP-20",
                     "R-CON-5", "R-CON-6", "R-CON-7", "R-EXT-8", "R-EXT-9", "R-LIM-0", "R-LIM-19", "R-PUB-13",
                     "R-PUB-15", "R-TREE-4", "R-TREE-7", "R-TREE-8", "R-TREE-12", "R-ZIP-23", "R-VER-5", "R-VER-7",
                     "R-ERR-4", "R-ERR-5"], _BEHAVIOUR),
    **dict.fromkeys(["R-RDR-5", "R-RDR-6", "R-RDR-7", "R-RDR-8", "R-RDR-9", "R-RDR-10", "R-RDR-12", "R-WTR-4",
                     "R-WTR-5", "R-WTR-6", "R-WTR-7"], _PROTOCOL),
    **dict.fromkeys(["R-RDR-1", "R-RDR-2", "R-RDR-3", "R-RDR-4", "R-RDR-11"], _ORDER),
    **dict.fromkeys(["R-VER-8", "R-VER-9", "R-VER-10", "R-VER-11", "R-VER-12", "R-VER-13", "R-VER-14"], _CHAIN),
    **dict.fromkeys(["R-DT-2", "R-ERR-1", "R-ERR-2", "R-ERR-3", "R-VER-15"], _META),
    **dict.fromkeys(["R-SHD-13", "R-SHD-14"], _WRITER),
    **dict.fromkeys(["R-SHD-16", "R-SHD-17", "R-SHD-18", "R-SHD-19", "R-SHD-20", "R-SHD-21"], _COLLECTIVE),
    "R-SHD-15": "a reader behaviour (verify each shard used, open no other): opencheckpoint.read.sharded "
                "verifies through R-ARR-14's check; tests/core/test_sharded.py pins which shards a region read opens",
    **dict.fromkeys(["R-PUB-22", "R-PUB-23", "R-PUB-24"], _REMOTE),
}

#: Rules whose check still sits in more than one function (not yet in a rule table). May only shrink; empty now.
SPREAD: frozenset[str] = frozenset()


def spec_rule_ids() -> set[str]:
    """Every requirement ID the spec defines (``**[R-...]**`` at the start of a line), in any spec file."""
    ids: set[str] = set()
    for path in SPEC.rglob("*.md"):
        ids.update(re.findall(r"^\*\*\[(R-[A-Z]+-[0-9]+)\]\*\*", path.read_text(encoding="utf-8"), re.MULTILINE))
    return ids


def _is_dispatch(node: ast.Call) -> bool:
    return isinstance(node.func, ast.Attribute) and node.func.attr in _DISPATCH


def _names_rule(node: ast.AST) -> bool:
    """A rule ID literal, or ``"R-A-1" if ... else "R-A-2"``."""
    if isinstance(node, ast.IfExp):
        return _names_rule(node.body) and _names_rule(node.orelse)
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and bool(_ID.fullmatch(node.value))


def _dispatched_values(call: ast.Call) -> list[ast.AST]:
    """The arguments of a dispatch call other than the rule IDs it names.

    ``found.check("R-MAN-13", where, value)``, ``found.members(obj, ..., "R-MAN-11", "R-MAN-12")`` and
    ``V1.first(where, ("R-MAN-7", args), ...)`` name rules; what else they pass is visited as usual.
    """
    out: list[ast.AST] = []
    for child in [*call.args, *(k.value for k in call.keywords)]:
        if isinstance(child, ast.Tuple) and child.elts and _names_rule(child.elts[0]):
            out.extend(child.elts[1:])
        elif not _names_rule(child):
            out.append(child)
    return out


def check_sites() -> dict[str, set[str]]:
    """Rule ID -> ``module:function`` of every function that names it (dispatch references left out)."""
    sites: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        module = path.relative_to(PACKAGE).as_posix()
        if module.startswith(_NOT_CHECKS):
            continue

        def visit(node: ast.AST, scope: str, module: str = module) -> None:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = f"{scope}.{node.name}" if scope else node.name
                for child in [*node.decorator_list, *node.body]:
                    visit(child, inner)
                return
            if isinstance(node, ast.Call) and _is_dispatch(node):
                for child in _dispatched_values(node):
                    visit(child, scope)
                return
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _ID.fullmatch(node.value):
                sites[node.value].add(f"{module}:{scope}")
            for child in ast.iter_child_nodes(node):
                visit(child, scope)

        visit(ast.parse(path.read_text(encoding="utf-8")), "")
    return sites


def test_the_spec_defines_rules_and_the_table_checks_some() -> None:
    ids = spec_rule_ids()
    assert {"R-MAN-13", "R-ZIP-24", "R-ARR-14"} <= ids and len(ids) > 200
    assert "R-MAN-13" in V1.rules


def test_every_rule_id_is_checked_or_exempt_with_a_reason() -> None:
    ids = spec_rule_ids()
    sites = check_sites()
    unchecked = sorted(i for i in ids if i not in sites and i not in EXEMPT)
    assert unchecked == [], "rules with no check and no exemption"
    assert sorted(set(sites) - ids) == [], "checks naming a rule the spec does not define"
    assert sorted(set(EXEMPT) - ids) == [], "exemptions of rules the spec does not define"
    assert sorted(set(EXEMPT) & set(sites)) == [], "exempt rules that have a check now: drop the exemption"


def test_each_rule_of_a_rule_table_is_checked_by_its_table_function_only() -> None:
    sites = check_sites()
    tables = (("rules/v1.py", V1), ("rules/v2.py", V2), ("rules/sharded.py", SHD), ("rules/archive.py", ZIP),
              ("rules/container.py", CON), ("rules/publication.py", PUB), ("rules/tree.py", TREE),
              ("rules/ijson.py", IJSON), ("rules/paths.py", PATHS))
    for module, table in tables:
        for rule_id, rule in table.rules.items():
            if rule.check is None:  # declared: its raise site, outside the rule tables, is its one check
                assert len(sites[rule_id]) == 1 and not next(iter(sites[rule_id])).startswith("rules/"), rule_id
            else:
                assert sites[rule_id] == {f"{module}:{rule.check.__name__}"}, rule_id


def test_every_other_rule_has_one_check_site_unless_listed_as_spread() -> None:
    sites = check_sites()
    spread = {rule_id for rule_id, where in sites.items() if len(where) > 1}
    assert sorted(spread - SPREAD) == [], "rules checked in several functions"
    assert sorted(SPREAD - spread) == [], "rules now checked in one place: remove them from SPREAD"


def test_a_second_check_for_one_rule_is_refused() -> None:
    from opencheckpoint.format.errors import ManifestError
    from opencheckpoint.rules import RuleTable

    table = RuleTable(version=0, file="x.json", shared=False)
    table.rule("R-X-1", ManifestError)(lambda value: None)
    try:
        table.rule("R-X-1", ManifestError)(lambda value: None)
    except ValueError as exc:
        assert "R-X-1 already has a check" in str(exc)
    else:
        raise AssertionError("a second check for R-X-1 was accepted")


def test_one_check_serves_reader_and_writer_and_names_the_file_it_is_given() -> None:
    from opencheckpoint.format.errors import IntegrityError, UnknownDtype, UnsupportedValue

    reader = TREE.check("R-DT-1", "$.w", None, "float128")
    writer = TREE.check("R-DT-1", "$.w", None, "float128", reported_as=UnsupportedValue)
    assert type(reader) is UnknownDtype and type(writer) is UnsupportedValue
    assert reader.message == writer.message and (reader.rule, writer.rule) == ("R-DT-1", "R-DT-1")
    assert TREE.check("R-DT-1", "$.w", "float32", "float32") is None
    size = CON.check("R-CHK-6", "size", 3, 8, file="components/m/data.bin")
    assert isinstance(size, IntegrityError) and (size.file, size.field) == ("components/m/data.bin", "size")
    assert "truncated" in size.message and CON.check("R-CHK-6", "size", 8, 8, file="x") is None
