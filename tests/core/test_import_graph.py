"""The package's import graph: one-way layers, no cycles, and a format core that never imports adapters.

Read from the source with :mod:`ast` (every ``import``, also inside functions, except those
under ``if TYPE_CHECKING:``, which never run), so a lazy import cannot hide a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import opencheckpoint

PACKAGE = Path(opencheckpoint.__file__).parent
ROOT = "opencheckpoint"

#: The format core: containers, manifest, rules, tree codec, the read path up to NumPy arrays,
#: validate and inspect. None of it may reach ``opencheckpoint.adapters``, even lazily.
CORE = (
    "format.errors", "format.limits", "format.paths", "format.strict_json", "format.integrity", "format.crc_combine",
    "read.parallel_crc", "format.dtypes", "format.models", "format.manifest", "format.migrations", "location", "rules",
    "container", "tree", "read.opening", "read.steps", "read.arrays", "read.validate", "tools.inspect", "sharding",
    "read.file_scan",
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([ROOT, *parts])


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    found: set[str] = set()
    base = module.split(".") if is_package else module.split(".")[:-1]
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            anchor = base[: len(base) - node.level + 1] if node.level else []
            target = ".".join([*anchor, *(node.module.split(".") if node.module else [])])
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)  # a submodule, if it is one
        stack.extend(ast.iter_child_nodes(node))
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (package ``__init__`` modules left out as targets:
    importing a submodule always runs its parents, so they say nothing about layering)."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    packages = {_module_name(p) for p in PACKAGE.rglob("__init__.py")}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        names = _imports(ast.parse(path.read_text(encoding="utf-8")), module, path.name == "__init__.py")
        graph[module] = {n for n in names if n in files and n not in packages and n != module}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def _is_core(module: str) -> bool:
    return any(module == f"{ROOT}.{c}" or module.startswith(f"{ROOT}.{c}.") for c in CORE)


def test_the_graph_sees_lazy_imports_and_skips_type_checking_ones() -> None:
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import X\n"
                     "def f():\n    from .c import Y\n")
    found = _imports(tree, "opencheckpoint.a", False)
    assert "opencheckpoint.c" in found and "opencheckpoint.b" not in found


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles_anywhere_in_the_package() -> None:
    # The adapters package included: its modules import each other one way (base re-exports the
    # others; the framework modules reach base's helpers through the modules that own them).
    graph = import_graph()
    adapters = [m for m in graph if m.startswith(f"{ROOT}.adapters.")]
    assert len(adapters) > 10 and any(graph[m] & set(adapters) for m in adapters)  # the adapters are in the graph
    assert _cycles(graph) == []


def test_the_core_never_imports_adapters_even_indirectly() -> None:
    graph = import_graph()
    core = sorted(m for m in graph if _is_core(m))
    assert f"{ROOT}.read.opening" in core and f"{ROOT}.container.archive" in core
    for module in core:
        seen, todo = {module}, [module]
        while todo:
            for nxt in graph[todo.pop()]:
                assert not nxt.startswith(f"{ROOT}.adapters"), f"{module} reaches {nxt}"
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
