"""The package's layers (docs/design.md): no module imports one from a layer above it, and no import circle.

Imports are read from the source (every ``import``/``from`` statement, also those inside functions, which run
sooner or later), so a lazy import that climbs a layer fails here as an eager one would.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "specpar"

# from the top down: a package may import its own modules and those of any layer below it
LAYERS = [
    "entrypoints",
    "experiments",
    "scheduling",
    "prediction",
    "algorithms",
    "runtimes",
    "backends",
    "planning",
    "core",
]


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    path = SRC.parent / name.replace(".", "/")
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def imports_of(path: Path) -> set[str]:
    """The specpar modules ``path`` imports (``from specpar.x import y`` counts as specpar.x, or specpar.x.y when
    that is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("specpar"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("specpar"):
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                if is_module(sub):
                    found.add(sub)  # ``from package import module``: the module, not the package's __init__
                else:
                    found.add(node.module)
    return found


MODULES = {module_name(p): p for p in SRC.rglob("*.py")}
GRAPH = {m: {i for i in imports_of(p) if i in MODULES} for m, p in MODULES.items()}


def layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def test_every_module_is_in_a_layer():
    loose = sorted(m for m in MODULES if layer(m) is None and m not in ("specpar", "specpar.__main__"))
    assert not loose, f"modules outside the layers' packages: {loose}"


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{m} -> {i}"
        for m, deps in graph.items()
        for i in deps
        if layer(m) is not None and layer(i) is not None and layer(i) < layer(m)
    )


def test_no_import_from_a_layer_above():
    upward = upward_imports(GRAPH)
    assert not upward, "imports from a layer above:\n" + "\n".join(upward)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v), on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_circle():
    # a package's __init__ importing its own modules, which import the package's siblings, is not a circle of
    # meaning; only circles between modules count
    found = cycles(GRAPH)
    assert not found, f"import circles: {found}"


def test_the_checks_see_an_upward_import_and_a_circle():
    """Controls: the same checks flag an upward import and a circle in a made-up graph."""
    graph = {
        "specpar.core.calls": {"specpar.algorithms.dsi"},
        "specpar.algorithms.dsi": {"specpar.algorithms.generation"},
        "specpar.algorithms.generation": {"specpar.algorithms.dsi"},
    }
    assert upward_imports(graph) == ["specpar.core.calls -> specpar.algorithms.dsi"]
    assert cycles(graph) == [["specpar.algorithms.dsi", "specpar.algorithms.generation"]]
    assert "specpar.runtimes.ray_actors" in imports_of(SRC / "runtimes" / "ray_runtime.py")
