"""The package's layers, read from its import graph, and the layer map of ``docs/development.md``.

``python docs/scripts/layer_map.py`` writes ``docs/img/layer-map.svg``; ``--check`` exits 1 when the
committed picture differs from the one the current source gives (``tests/core/test_import_graph.py``
runs the same check, and asserts the rules below).

The graph counts every import of the package's own modules: at module level, inside functions and
under ``if TYPE_CHECKING:`` alike, plus ``importlib.import_module`` with a literal name. ``from P
import name`` is an edge to ``P.name`` when that is a module, else to ``P`` (a package's
``__init__`` runs code too). The layers (:data:`LAYERS`, lowest first) say which may import which:
a module imports its own layer and layers below it, never one above.
"""

from __future__ import annotations

import argparse
import ast
import sys
from html import escape
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "reference_impl" / "opencheckpoint"
PICTURE = REPO / "docs" / "img" / "layer-map.svg"
ROOT = "opencheckpoint"

#: The layers, lowest first, each with the folders and top-level modules it holds. A module belongs to
#: the layer of its longest listed prefix.
LAYERS = ["format", "storage", "tree", "sharding", "read", "adapters", "write", "api", "run", "integrations",
          "conformance",
          "tools", "facade", "testing", "examples", "cli"]
MEMBERS: dict[str, list[str]] = {
    # progress (a byte counter every layer advances, from tree/'s data files up) and manifest_builder
    # (the manifest body every writer commits) are write-side modules at the top for now: they import no
    # layer above the format core, and must stay importable from tree/ and adapters/ wherever they move.
    "format": ["format", "rules", "progress", "manifest_builder"],
    "storage": ["container", "remote", "location"],
    "tree": ["tree"],
    "sharding": ["sharding"],
    "read": ["read"],
    "adapters": ["adapters", "options"],
    "write": ["write"],
    "api": ["checkpoint", "loading"],
    "run": ["run"],
    "integrations": ["integrations"],
    "conformance": ["conformance"],
    "tools": ["tools"],
    "facade": [""],  # the package root: `import opencheckpoint` and its public names
    "testing": ["testing"],
    "examples": ["examples"],
    "cli": ["cli", "__main__"],
}
#: What each layer is, in a few words (the picture's captions).
CAPTIONS = {
    "format": "what a checkpoint is: errors, limits, models, manifest, dtypes, checksums, migrations, rule tables",
    "storage": "where it is: directory, ZIP archive, object stores; publication and staging",
    "tree": "the tree payload: msgpack document + data file, encode and decode",
    "sharding": "format version 2: regions, layout, collectives, sharded saves",
    "read": "bytes to verified arrays: the steps of spec §15, readers, validate, restore plans",
    "adapters": "live objects to components and back: torch, JAX, NumPy, dataclasses, state dicts",
    "write": "saving: staging, snapshots, async saves (the one save pipeline)",
    "api": "Checkpoint: save and load named components",
    "run": "training runs: RunCheckpointer, rotation, stop on signal, RNG state",
    "integrations": ("trainers' own checkpoint hooks (Lightning, Hugging Face, orbax, torchrl) pointed at "
                     "OpenCheckpoint"),
    "conformance": "canonical rendering, protocol command, runner",
    "tools": "convert, export, diff, ls, inspect, interchange, schema export",
    "facade": "import opencheckpoint: the public names",
    "testing": "kit for adapter authors: behaviour tests, strategies, hostile ZIPs",
    "examples": "CartPole actor-critic, training run, demo",
    "cli": "the opencheckpoint command",
}
#: Import cycles still expected: none (tests/core/test_import_graph.py asserts the list stays empty; a cycle is
#: broken by moving code or a small protocol module, as tree/planner.py does for tree/encode <-> tree/per_rank).
EXPECTED_CYCLES: list[list[str]] = []
#: Upward imports still expected: none (the test asserts the list stays empty; container/output_file.py moved
#: down from tools/ so conformance/runner imports it downward).
EXPECTED_UPWARD: list[tuple[str, str]] = []
#: Modules outside adapters/ that may import torch/JAX (lazily): the examples train torch and Flax models,
#: GlobalRNGState reads the frameworks' process-global generators, and the test kit's tensor-kinds matrix
#: builds the torch and JAX values it checks; each integration plugs into its trainer's library.
FRAMEWORK_IMPORTERS = (f"{ROOT}.examples.", f"{ROOT}.run.rng", f"{ROOT}.testing.tensor_kinds", f"{ROOT}.integrations.")
#: Layer packages whose ``__init__`` docstring says what the layer owns and may import.
LAYER_PACKAGES = ["format", "rules", "container", "remote", "tree", "sharding", "read", "adapters", "write", "run",
                  "integrations", "conformance", "tools", "testing", "examples", "cli"]
#: Top-level modules, each with its layer (a new one is a decision, not an accident).
TOP_LEVEL = {f"{ROOT}.{name}" for names in MEMBERS.values() for name in names if name and "." not in name
             and (PACKAGE / f"{name}.py").exists()} | {f"{ROOT}.__main__"}


def _module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join([ROOT, *parts]), is_package


def _files() -> dict[str, tuple[Path, bool]]:
    return {name: (path, is_package) for path in sorted(PACKAGE.rglob("*.py"))
            for name, is_package in [_module_name(path)]}


def _literal_import_module(node: ast.Call) -> str | None:
    func = node.func
    named = (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
        isinstance(func, ast.Name) and func.id == "import_module")
    if named and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return node.args[0].value
    return None


def imports_of(tree: ast.AST, module: str, *, is_package: bool, modules: set[str]) -> set[str]:
    """Every name ``module`` imports (its own package's modules resolved; others as written)."""
    base = module.split(".") if is_package else module.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):  # every node: module level, functions, TYPE_CHECKING blocks
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            anchor = base[: len(base) - node.level + 1] if node.level else []
            target = ".".join([*anchor, *(node.module.split(".") if node.module else [])])
            for alias in node.names:
                found.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target)
        elif isinstance(node, ast.Call) and (name := _literal_import_module(node)) is not None:
            found.add(name)
    return found


def module_graph() -> dict[str, set[str]]:
    """Module -> the package's modules (and packages) it imports, itself left out."""
    files = _files()
    graph: dict[str, set[str]] = {}
    for module, (path, is_package) in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = imports_of(tree, module, is_package=is_package, modules=set(files))
        graph[module] = {name for name in names if name in files and name != module}
    return graph


def external_imports() -> dict[str, set[str]]:
    """Module -> the top-level names of the other packages it imports (at any level)."""
    out: dict[str, set[str]] = {}
    for module, (path, is_package) in _files().items():
        names = imports_of(ast.parse(path.read_text(encoding="utf-8")), module, is_package=is_package, modules=set())
        out[module] = {name.split(".")[0] for name in names if name.split(".")[0] != ROOT}
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
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


def layer_of(module: str) -> str | None:
    """The layer of a module: that of its longest prefix in :data:`MEMBERS`."""
    best: tuple[int, str | None] = (-1, None)
    rest = module[len(ROOT):].lstrip(".")
    for layer, prefixes in MEMBERS.items():
        for prefix in prefixes:
            if prefix == "" and rest == "":
                return layer
            if prefix and (rest == prefix or rest.startswith(prefix + ".")) and len(prefix) > best[0]:
                best = (len(prefix), layer)
    return best[1]


def upward_edges(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports of a higher layer by a lower one, sorted."""
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    return sorted((source, target) for source, targets in graph.items() for target in targets
                  if rank[layer_of(target) or "cli"] > rank[layer_of(source) or "cli"])


def layer_edges(graph: dict[str, set[str]]) -> dict[str, dict[str, int]]:
    """Layer -> the lower layers it imports directly -> how many module imports."""
    out: dict[str, dict[str, int]] = {layer: {} for layer in LAYERS}
    for source, targets in graph.items():
        for target in targets:
            a, b = layer_of(source), layer_of(target)
            if a and b and a != b:
                out[a][b] = out[a].get(b, 0) + 1
    return out


def _members_text(layer: str, graph: dict[str, set[str]]) -> str:
    names = []
    for prefix in MEMBERS[layer]:
        if prefix == "":
            names.append("__init__")
        elif (PACKAGE / prefix.replace(".", "/")).is_dir():
            names.append(prefix.replace(".", "/") + "/")
        elif (PACKAGE / (prefix.replace(".", "/") + ".py")).exists():
            names.append(prefix.replace(".", "/") + ".py")
    count = sum(1 for module in graph if layer_of(module) == layer)
    return f"{', '.join(names)}  ({count} module{'' if count == 1 else 's'})"


def render_svg(graph: dict[str, set[str]]) -> str:
    """The layer map: one band per layer, highest on top; on the right, the layers each one imports."""
    edges = layer_edges(graph)
    width, band, gap, top = 1180, 58, 8, 64
    rows = list(reversed(LAYERS))
    height = top + len(rows) * (band + gap) + 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif" font-size="13">',
           '<rect width="100%" height="100%" fill="#ffffff"/>',
           '<text x="20" y="28" font-size="18" font-weight="bold">opencheckpoint: layers '
           '(each imports only layers below it)</text>',
           '<text x="20" y="48" fill="#555">generated from the import graph (every import counted: module level, '
           f'in functions, TYPE_CHECKING) by docs/scripts/layer_map.py; {len(upward_edges(graph))} upward '
           f'imports, {len(cycles(graph))} import cycles</text>']
    for i, layer in enumerate(rows):
        y = top + i * (band + gap)
        shade = "#eef3fb" if i % 2 == 0 else "#f7f9fc"
        out.append(f'<rect x="20" y="{y}" width="{width - 40}" height="{band}" rx="6" fill="{shade}" '
                   f'stroke="#7a93b8"/>')
        out.append(f'<text x="34" y="{y + 22}" font-size="15" font-weight="bold">{escape(layer)}</text>')
        out.append(f'<text x="150" y="{y + 22}">{escape(_members_text(layer, graph))}</text>')
        out.append(f'<text x="150" y="{y + 44}" fill="#444" font-style="italic">{escape(CAPTIONS[layer])}</text>')
        imported = sorted(edges[layer], key=LAYERS.index, reverse=True)
        down = [other for other in imported if LAYERS.index(other) < LAYERS.index(layer)]
        up = [other for other in imported if LAYERS.index(other) > LAYERS.index(layer)]
        text = "imports " + (", ".join(down) if down else "nothing of ours")
        warning = f'<tspan fill="#b3261e">upward (expected, to be removed): {escape(", ".join(up))}; </tspan>'
        out.append(f'<text x="{width - 34}" y="{y + 44}" text-anchor="end" fill="#2d5a8c" font-size="12">'
                   f'{warning if up else ""}{escape(text)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed picture is out of date")
    args = parser.parse_args(argv)
    picture = render_svg(module_graph())
    if args.check:
        current = PICTURE.read_text(encoding="utf-8") if PICTURE.exists() else ""
        if current != picture:
            print(f"{PICTURE.relative_to(REPO)} is out of date: run python docs/scripts/layer_map.py", file=sys.stderr)
            return 1
        return 0
    PICTURE.write_text(picture, encoding="utf-8")
    print(f"wrote {PICTURE.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
