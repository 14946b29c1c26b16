"""No import cycles in the package: every `import` counts, wherever it is.

The graph is read from the source with `ast` (nothing is imported): an edge
for each `import` / `from ... import` anywhere in a module (top level,
inside a function, under `if TYPE_CHECKING:`), to the deepest package
module the name resolves to. A function-level or type-checking import is
a cycle a reader still has to untangle, so none is allowed.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = "tfdist_opt"
ROOT = pathlib.Path(__file__).resolve().parents[1] / PACKAGE

# Known cycles still present, each as a sorted tuple of module names.
ALLOWED_CYCLES: set[tuple[str, ...]] = set()


def _modules(root: pathlib.Path) -> dict[str, pathlib.Path]:
    mods = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


def import_graph(root: pathlib.Path = ROOT) -> dict[str, set[str]]:
    """module -> the package modules it imports (by dotted name)."""
    mods = _modules(root)

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: climb level-1 packages
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                names = [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                target = resolve(name)
                if target is not None and target != mod:
                    graph[mod].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[tuple[str, ...]] = set()

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.add(tuple(sorted(component)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_checker_finds_function_level_and_type_checking_cycles(tmp_path):
    pkg = tmp_path / PACKAGE
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tfdist_opt.a import A\n"
    )
    (pkg / "a.py").write_text("from tfdist_opt.sub import x\n")
    (pkg / "b.py").write_text("def f():\n    from . import c\n")
    (pkg / "c.py").write_text("import tfdist_opt.b\n")
    (pkg / "d.py").write_text("from tfdist_opt import a\n")
    assert cycles(import_graph(pkg)) == {
        ("tfdist_opt.a", "tfdist_opt.sub"),
        ("tfdist_opt.b", "tfdist_opt.c"),
    }


def test_no_import_cycles():
    found = cycles(import_graph())
    assert found - ALLOWED_CYCLES == set(), (
        "import cycles (each: modules that import each other, directly or "
        f"through others): {sorted(found - ALLOWED_CYCLES)}"
    )
    stale = ALLOWED_CYCLES - found
    if stale:
        pytest.fail(
            f"allowed cycles no longer present; delete them from ALLOWED_CYCLES: {sorted(stale)}"
        )


# Package layers, lowest first: a module may import its own layer and the
# layers below it, never one above. Each entry lists the top-level modules
# and packages of one layer (a package stands for all its modules). The
# training packages share one layer: they are still entangled (strategy,
# gradients, callbacks, stall and parameter_server import one another).
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "_lazy",
        "_logging",
        "_class_swap",
        "validation",
        "versions",
        "resources",
        "config_files",
        "private_api",
        "seam",
        "runtime",
    ),
    ("cluster",),  # cluster description: TF_CONFIG, sources, ports
    ("coordination",),  # in-worker: KV store, start-up guard, faults, watchdog
    (
        "data",
        "gradients",
        "strategy",
        "keras",
        "callbacks",
        "stall",
        "parameter_server",
        "evaluation",
        "model_parallel",
    ),  # training
    ("launch",),  # layout, restart policy, local and Ray backends
    ("", "__main__", "cli", "examples"),  # the package root, CLI, examples
)


def layer_of(module: str, layers=LAYERS) -> int | None:
    """The layer index of a dotted module name (None: not in any layer)."""
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    for i, names in enumerate(layers):
        if top in names:
            return i
    return None


def layer_violations(
    graph: dict[str, set[str]], layers=LAYERS
) -> tuple[set[tuple[str, str]], set[str]]:
    """(imports from a lower layer to a higher one, modules in no layer)."""
    upward, unplaced = set(), set()
    for mod, targets in graph.items():
        here = layer_of(mod, layers)
        if here is None:
            unplaced.add(mod)
            continue
        for target in targets:
            there = layer_of(target, layers)
            if there is not None and there > here:
                upward.add((mod, target))
    return upward, unplaced


def test_the_layer_check_finds_an_upward_import(tmp_path):
    pkg = tmp_path / PACKAGE
    (pkg / "cluster").mkdir(parents=True)
    (pkg / "launch").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "cluster" / "__init__.py").write_text("")
    (pkg / "launch" / "__init__.py").write_text("from tfdist_opt.cluster import ports\n")
    (pkg / "cluster" / "ports.py").write_text("def f():\n    from tfdist_opt.launch import local\n")
    (pkg / "launch" / "local.py").write_text("")
    (pkg / "newpkg.py").write_text("")
    upward, unplaced = layer_violations(import_graph(pkg))
    assert upward == {("tfdist_opt.cluster.ports", "tfdist_opt.launch.local")}
    assert unplaced == {"tfdist_opt.newpkg"}


def test_no_import_runs_from_a_lower_layer_to_a_higher_one():
    upward, unplaced = layer_violations(import_graph())
    assert not unplaced, f"modules in no layer (add their package to LAYERS): {sorted(unplaced)}"
    assert not upward, (
        "imports from a lower layer to a higher one (move the name down, or "
        f"the importer up): {sorted(upward)}"
    )
