"""The package's import graph has no cycles, counting every import statement.

Imports under ``if TYPE_CHECKING:`` and inside functions count too: a cycle hidden that way still
ties two modules together (neither can be understood, moved or tested alone), and a lazy import
that closes a cycle is one refactoring away from an ImportError at run time.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "contextkit"


def _modules(package: Path) -> dict[str, Path]:
    out = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imported(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every contextkit module named by an import statement anywhere in ``path``."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if is_package else module.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join([*here, base] if base else here)
            # "from pkg import name": a submodule when one exists, else the package itself
            names = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    known = _modules(package)
    return {module: _imported(module, path, known) for module, path in known.items()}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_the_checker_finds_a_cycle_hidden_behind_type_checking(tmp_path: Path) -> None:
    pkg = tmp_path / "contextkit"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from contextkit.b import thing\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from contextkit import a\n")
    (pkg / "c.py").write_text("def later():\n    from . import c2\n")
    (pkg / "c2.py").write_text("from .c import later\n")
    (pkg / "d.py").write_text("import contextkit.a\n")
    cycles = import_cycles(import_graph(pkg))
    assert cycles == [["contextkit.a", "contextkit.b"], ["contextkit.c", "contextkit.c2"]]


def test_contextkit_has_no_import_cycles() -> None:
    graph = import_graph()
    assert "contextkit.session" in graph and "contextkit.persist" in graph["contextkit.session"]
    cycles = import_cycles(graph)
    assert cycles == [], "import cycles (break them; see ARCHITECTURE.md for the allowed direction):\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


@pytest.mark.parametrize("leaf", ["contextkit.widgets", "contextkit.analysis"])
def test_leaf_packages_are_only_imported_where_architecture_allows(leaf: str) -> None:
    """widgets/ and analysis/ are leaves; the core loads only the stdlib-only fallbacks lazily."""
    allowed_from_core = {"contextkit.widgets.html", "contextkit.widgets.status"}
    users = {
        module: sorted(t for t in targets if t == leaf or t.startswith(leaf + "."))
        for module, targets in import_graph().items()
        if not module.startswith(("contextkit.widgets", "contextkit.analysis", "contextkit.experiments"))
    }
    offending = {m: [t for t in ts if t not in allowed_from_core] for m, ts in users.items()}
    assert {m: ts for m, ts in offending.items() if ts} == {}
