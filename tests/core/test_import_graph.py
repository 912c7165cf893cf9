"""The package's import graph: one-way layers, no cycles, a top level that holds only the public API.

Read from the source with :mod:`ast`: every ``import`` counts, at module level, inside functions and
under ``if TYPE_CHECKING:`` alike, and so does ``importlib.import_module("opencheckpoint....")`` with
a literal name, so neither a lazy import nor an annotation-only one can hide a cycle. The graph and
the layer table live in ``docs/scripts/layer_map.py``, which also draws the layer map of
``docs/development.md`` from them.
"""

from __future__ import annotations

import ast

import layer_map
from layer_map import (
    EXPECTED_CYCLES,
    EXPECTED_UPWARD,
    FRAMEWORK_IMPORTERS,
    LAYERS,
    PACKAGE,
    ROOT,
    cycles,
    imports_of,
    layer_of,
    module_graph,
    upward_edges,
)


def test_the_graph_sees_lazy_type_checking_and_import_module_imports() -> None:
    tree = ast.parse("from typing import TYPE_CHECKING\nimport importlib\nif TYPE_CHECKING:\n    from .b import X\n"
                     "def f():\n    from .c import Y\n    importlib.import_module('opencheckpoint.d')\n"
                     "from . import e, VALUE\n")
    found = imports_of(tree, "opencheckpoint.a", is_package=False, modules={
        f"opencheckpoint.{m}" for m in "abcde"})
    assert found == {"opencheckpoint.b", "opencheckpoint.c", "opencheckpoint.d", "opencheckpoint.e", "opencheckpoint",
                     "typing", "importlib"}


def test_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles_anywhere_in_the_package() -> None:
    graph = module_graph()
    adapters = [m for m in graph if m.startswith(f"{ROOT}.adapters.")]
    assert len(adapters) > 10 and any(graph[m] & set(adapters) for m in adapters)  # the adapters are in the graph
    assert f"{ROOT}.adapters.jax" in graph[f"{ROOT}.adapters.base"]  # import_module("...jax") is an edge
    assert EXPECTED_CYCLES == [], "no cycle is expected: break it (move code, or a small protocol module)"
    assert cycles(graph) == [], "import cycles (count every import)"


def test_every_module_belongs_to_a_layer() -> None:
    graph = module_graph()
    assert [m for m in graph if layer_of(m) is None] == []
    assert layer_of(f"{ROOT}.read.reader") == "read" and layer_of(f"{ROOT}.location") == "storage"


def test_layers_import_only_downward() -> None:
    """A layer imports only layers listed before it in :data:`layer_map.LAYERS` (and itself)."""
    assert EXPECTED_UPWARD == [], "no upward import is expected: move the imported code down a layer"
    assert upward_edges(module_graph()) == [], "upward imports (see LAYERS in docs/scripts)"


def test_the_layer_check_fails_on_an_upward_import() -> None:
    graph = {f"{ROOT}.format.errors": {f"{ROOT}.read.reader"}, f"{ROOT}.read.reader": {f"{ROOT}.format.errors"}}
    assert upward_edges(graph) == [(f"{ROOT}.format.errors", f"{ROOT}.read.reader")]


def test_the_read_path_and_the_format_core_never_reach_adapters() -> None:
    """Framework conversion finds a framework's module by name in the table of frameworks; nothing below
    ``adapters/`` imports an adapter, even indirectly."""
    graph = module_graph()
    below = LAYERS[: LAYERS.index("adapters")]
    low = sorted(m for m in graph if layer_of(m) in below)
    assert f"{ROOT}.read.to_framework" in low and f"{ROOT}.container.archive" in low
    for module in low:
        seen, todo = {module}, [module]
        while todo:
            for nxt in graph[todo.pop()]:
                assert not nxt.startswith(f"{ROOT}.adapters"), f"{module} reaches {nxt}"
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)


def test_only_adapters_import_frameworks() -> None:
    """torch, JAX, Flax, optax and orbax are imported (lazily) by adapters, and by nothing else but the listed
    modules; ``import opencheckpoint`` itself imports none (``tests/test_import_light.py``)."""
    outside = sorted(module for module, names in layer_map.external_imports().items()
                     if names & {"torch", "jax", "flax", "optax", "orbax"} and layer_of(module) != "adapters"
                     and not module.startswith(FRAMEWORK_IMPORTERS))
    assert outside == []


def test_the_top_level_keeps_only_the_public_api() -> None:
    top = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert len(top) <= 12, top
    # Every top-level module is named in the layer table (a new one is a decision, not an accident).
    assert [m for m in top if f"{ROOT}.{m}" not in layer_map.TOP_LEVEL and m not in ("__init__",)] == []


def test_the_committed_layer_map_is_current() -> None:
    """docs/img/layer-map.svg (the picture in docs/development.md) is what the script draws from the source now."""
    assert layer_map.main(["--check"]) == 0, "run: .venv/bin/python docs/scripts/layer_map.py"


def test_every_layer_package_says_what_it_owns_and_may_import() -> None:
    for name in layer_map.LAYER_PACKAGES:
        doc = ast.get_docstring(ast.parse((PACKAGE / name / "__init__.py").read_text(encoding="utf-8"))) or ""
        assert "may import" in doc.lower() and len(doc) > 200, f"{name}/__init__.py: say what it owns and may import"
