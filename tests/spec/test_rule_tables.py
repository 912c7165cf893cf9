"""Every requirement ID is bound to its error class in one rule table, and raised through it.

Decision record 0022. The rule tables (:mod:`opencheckpoint.rules`) bind each ID
to the class the spec assigns it; this file checks three things:

* the tables: each ID in exactly one table, every ID one the spec defines, and
  its class the one the spec names for it (Table 16-1 of the core, or the
  requirement's own text, as format version 2's rules do);
* the package, read with :mod:`ast`, outside ``rules/``: no error is constructed
  with a rule ID (``SomeError(..., rule="R-...")``, or ``rule=`` of any kind to
  an error class by name), no error's ``rule`` is assigned, every ID-shaped string
  is one a table registers (a table's ``check``/``error`` is given an ID of
  that table), and ``reported_as=`` (a writer's refusal) is never a class of
  Table 16-1. IDs in comments and docstrings (prose, doctests) are text, not
  raise sites, and are left alone;
* that the checks above can fail (a planted module breaks each).
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import opencheckpoint
import opencheckpoint.rules as rules
from opencheckpoint.format.errors import CheckpointError, ManifestError, TreeError
from opencheckpoint.rules import RuleTable, table_of

PACKAGE = Path(opencheckpoint.__file__).parent
SPEC = Path(__file__).resolve().parents[2] / "spec"
_ID = re.compile(r"R-[A-Z0-9]+-[0-9]+")
#: The methods of a rule table whose first argument is a rule ID of that table.
_TABLE_METHODS = {"check", "error", "declare"}


def rule_tables() -> dict[str, RuleTable]:
    """Every table of the package's ``rules/`` modules, by the name it is imported under (``V1``, ``TREE``...)."""
    tables: dict[str, RuleTable] = {}
    for info in pkgutil.iter_modules(rules.__path__):
        module = importlib.import_module(f"{rules.__name__}.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, RuleTable) and value.shared:
                assert tables.setdefault(name, value) is value, f"two tables are named {name}"
    return tables


def spec_rule_ids() -> set[str]:
    ids: set[str] = set()
    for path in SPEC.rglob("*.md"):
        ids.update(re.findall(r"^\*\*\[(R-[A-Z]+-[0-9]+)\]\*\*", path.read_text(encoding="utf-8"), re.MULTILINE))
    return ids


def _expand(cell: str) -> set[str]:
    """``R-MAN-1 … R-MAN-7, R-CHK-1 (a note)`` -> every ID it names, ranges expanded."""
    cell = re.sub(r"\([^)]*\)", "", cell)
    ids: set[str] = set()
    for first, last in re.findall(r"(R-[A-Z]+-\d+)(?:\s*…\s*(R-[A-Z]+-\d+))?", cell):
        if not last:
            ids.add(first)
            continue
        area, start, end = first.rsplit("-", 1)[0], int(first.rsplit("-", 1)[1]), int(last.rsplit("-", 1)[1])
        assert last.startswith(area + "-"), cell
        ids.update(f"{area}-{n}" for n in range(start, end + 1))
    return ids


def table_16_1() -> dict[str, str]:
    """Requirement ID -> class, from Table 16-1 of the core spec."""
    text = (SPEC / "opencheckpoint-v1.md").read_text(encoding="utf-8")
    table = text.split("*Table 16-1. Error classes.*", 1)[1].lstrip("\n").split("\n\n", 1)[0]
    out: dict[str, str] = {}
    for row in table.splitlines():
        cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            for rule_id in _expand(cells[2]):
                assert rule_id not in out, f"{rule_id} is in two rows of Table 16-1"
                out[rule_id] = cells[0].strip("`")
    return out


def spec_classes() -> dict[str, str]:
    """Requirement ID -> the class the spec assigns it: Table 16-1, or the requirement's own words
    ("reject ... with `TreeError`", "a violation is `LimitExceeded`") for a class of that table."""
    assigned = table_16_1()
    classes = set(assigned.values())
    for path in SPEC.rglob("*.md"):
        for rule_id, text in re.findall(r"^\*\*\[(R-[A-Z]+-[0-9]+)\]\*\*(.*)$", path.read_text(encoding="utf-8"),
                                        re.MULTILINE):
            named = {c for c in re.findall(r"(?:\bwith|\bis) `(\w+)`", text) if c in classes}
            if len(named) == 1:
                (name,) = named
                assert assigned.setdefault(rule_id, name) == name, f"{rule_id}: the spec names two classes"
    return assigned


# -- the tables -------------------------------------------------------------------------------


def test_each_id_is_bound_in_exactly_one_table_and_the_registry_agrees() -> None:
    tables = rule_tables()
    assert {"V1", "V2", "CON", "ZIP", "PUB", "TREE", "SHD", "IJSON", "PATHS"} <= set(tables)
    seen: dict[str, str] = {}
    for name, table in tables.items():
        for rule_id in table.rules:
            assert rule_id not in seen, f"{rule_id} is bound by {seen[rule_id]} and {name}"
            seen[rule_id] = name
            assert table_of(rule_id) is table
    assert len(seen) > 150


def test_every_registered_id_is_defined_by_the_spec() -> None:
    ids = spec_rule_ids()
    registered = {rule_id for table in rule_tables().values() for rule_id in table.rules}
    assert sorted(registered - ids) == [], "rule IDs the spec does not define"


def test_the_spec_parser_reads_table_16_1_and_the_requirements_own_classes() -> None:
    assigned = spec_classes()
    assert assigned["R-MAN-4"] == "ManifestError" and assigned["R-ARR-13"] == "ArrayLayoutError"  # ranges
    assert assigned["R-VER-1"] == "UnsupportedVersion"  # a row's note in parentheses is dropped
    assert assigned["R-SHD-4"] == "TreeError" and assigned["R-LIM-20"] == "LimitExceeded"  # in the text
    assert "R-PUB-16" not in assigned  # a writer's refusal: no class of Table 16-1


def test_each_id_has_the_class_the_spec_assigns_it() -> None:
    assigned = spec_classes()
    wrong = {rule_id: (rule.error.error_class, assigned[rule_id])
             for table in rule_tables().values() for rule_id, rule in table.rules.items()
             if rule_id in assigned and rule.error.error_class != assigned[rule_id]}
    assert wrong == {}, "ID: (the table's class, the spec's class)"


def test_an_id_the_spec_gives_no_class_is_not_raised_as_a_file_defect() -> None:
    """Spec §16: a failure that is not a property of a file (a writer's refusal, a checkpoint replaced while
    it is read) is never reported as a class of Table 16-1."""
    assigned = spec_classes()
    defects = set(table_16_1().values())
    # R-VER-4 (a reader of version N reads 1 … N): a version below the oldest a reader migrates is reported
    # like R-VER-2/R-VER-3's, UnsupportedVersion, though Table 16-1 does not list R-VER-4 (left to the spec).
    expected = {"R-VER-4"}
    found = {rule_id for table in rule_tables().values() for rule_id, rule in table.rules.items()
             if rule_id not in assigned and rule.error.error_class in defects}
    assert found == expected


def test_a_table_refuses_an_id_another_table_binds() -> None:
    table = RuleTable(version=0, file=None)
    with pytest.raises(ValueError, match="R-MAN-4 is already bound to ManifestError by another rule table"):
        table.declare("R-MAN-4", ManifestError)
    assert "R-MAN-4" not in table.rules and table_of("R-MAN-4") is not table


def test_error_builds_the_rules_class_with_its_file_field_and_id() -> None:
    tables = rule_tables()
    error = tables["TREE"].error("R-TREE-2", "3 bytes after the end of the root object", field="$")
    assert type(error) is TreeError
    assert str(error) == "TreeError: $: 3 bytes after the end of the root object [R-TREE-2]"
    manifest = tables["V1"].error("R-MAN-10", "required member 'format_version' is missing", field="$.format_version")
    assert str(manifest) == ("ManifestError: manifest.json: $.format_version: required member 'format_version' is "
                             "missing [R-MAN-10]")  # V1's file, as its checks name it


# -- the package's raise sites ----------------------------------------------------------------


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def error_class_names(trees: dict[str, ast.Module]) -> set[str]:
    """The names of every CheckpointError subclass the modules define (followed through their bases)."""
    bases: dict[str, set[str]] = {}
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases.setdefault(node.name, set()).update(
                    b.id if isinstance(b, ast.Name) else b.attr for b in node.bases
                    if isinstance(b, (ast.Name, ast.Attribute)))
    found = {"CheckpointError"}
    while True:
        more = {name for name, parents in bases.items() if parents & found} - found
        if not more:
            return found
        found |= more


def raise_site_problems(sources: dict[str, str], tables: dict[str, RuleTable]) -> list[str]:
    """What breaks "every rule ID raised from its rule table" in ``sources`` (module path -> text)."""
    trees = {module: ast.parse(source) for module, source in sorted(sources.items())}
    errors = error_class_names(trees)
    defects = set(table_16_1().values())
    registered = {rule_id for table in tables.values() for rule_id in table.rules}
    problems: list[str] = []
    for module, tree in trees.items():
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            where = f"{module}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _ID.fullmatch(node.value):
                if id(node) not in docstrings and node.value not in registered:
                    problems.append(f"{where}: {node.value} is in no rule table")
            elif isinstance(node, ast.Call):
                problems.extend(_call_problems(node, where, errors, defects, tables))
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Attribute) and t.attr == "rule" and not
                       (isinstance(t.value, ast.Name) and t.value.id == "self") for t in targets):
                    problems.append(f"{where}: assigns an error's rule (report it through its table)")
    return problems


def _call_problems(call: ast.Call, where: str, errors: set[str], defects: set[str],
                   tables: dict[str, RuleTable]) -> list[str]:
    problems = []
    func = call.func
    for keyword in call.keywords:
        value = keyword.value
        if keyword.arg == "rule" and isinstance(value, ast.Constant) and isinstance(value.value, str):
            problems.append(f"{where}: an error made with rule={value.value!r} (use its table's error())")
        elif keyword.arg == "rule" and isinstance(func, ast.Name) and func.id in errors:
            problems.append(f"{where}: {func.id}(..., rule=...) binds a rule ID to a class outside rules/")
        elif keyword.arg == "reported_as" and isinstance(value, ast.Name) and value.id in defects:
            problems.append(f"{where}: reported_as={value.id}, a class of Table 16-1 (a refusal is not a defect)")
    if (isinstance(func, ast.Attribute) and func.attr in _TABLE_METHODS and isinstance(func.value, ast.Name)
            and func.value.id in tables and call.args and isinstance(call.args[0], ast.Constant)):
        rule_id = call.args[0].value
        if rule_id not in tables[func.value.id].rules:
            problems.append(f"{where}: {func.value.id}.{func.attr}({rule_id!r}): not a rule of {func.value.id}")
    return problems


def package_sources() -> dict[str, str]:
    return {path.relative_to(PACKAGE).as_posix(): path.read_text(encoding="utf-8")
            for path in sorted(PACKAGE.rglob("*.py")) if not path.relative_to(PACKAGE).as_posix().startswith("rules/")}


def test_no_module_outside_the_rule_tables_raises_with_a_rule_id() -> None:
    sources = package_sources()
    assert len(sources) > 100 and "tree/exact.py" in sources
    assert raise_site_problems(sources, rule_tables()) == []


def test_the_raise_site_check_finds_each_kind_of_inline_rule() -> None:
    planted = '''
"""A docstring naming R-NOT-1 is prose: [R-NOT-2] too."""
from opencheckpoint.format.errors import ManifestError, TreeError
from opencheckpoint.rules.v1 import V1


class MyError(TreeError):
    pass


def bad(exc, rule):
    """Docstring R-NOT-3."""
    raise ManifestError("x", rule="R-MAN-4")


def bad_variable(rule):
    raise MyError("x", rule=rule)


def bad_assignment(exc):
    exc.rule = "R-CMP-18"


def bad_table():
    V1.error("R-TREE-2", "x")
    V1.check("R-NOT-9", "$")


def bad_refusal():
    V1.check("R-MAN-13", "$", 1, reported_as=ManifestError)


def fine(exc):
    return V1.error("R-MAN-10", "x", field="$")  # R-NOT-4 in a comment


def documented():
    """R-NOT-5"""
'''
    problems = raise_site_problems({"planted.py": planted, "format/errors.py": "class TreeError(CheckpointError): ..."},
                                   rule_tables())
    assert sorted(p.split(": ", 1)[1] for p in problems) == sorted([
        "an error made with rule='R-MAN-4' (use its table's error())",
        "MyError(..., rule=...) binds a rule ID to a class outside rules/",
        "assigns an error's rule (report it through its table)",
        "V1.error('R-TREE-2'): not a rule of V1",
        "R-NOT-9 is in no rule table",
        "V1.check('R-NOT-9'): not a rule of V1",
        "reported_as=ManifestError, a class of Table 16-1 (a refusal is not a defect)",
    ])
    assert all(issubclass(c, CheckpointError) for c in (ManifestError, TreeError))
