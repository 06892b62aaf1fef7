"""The package's import graph has no cycles, counting every import statement.

Imports under ``if TYPE_CHECKING:`` and inside functions count too: a cycle hidden that way still
ties two modules together (neither can be understood, moved or tested alone), and a lazy import
that closes a cycle is one refactoring away from an ImportError at run time.
"""

from __future__ import annotations

import ast
from pathlib import Path

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
    assert "contextkit.session.core" in graph and "contextkit.session.persist" in graph["contextkit.session.core"]
    cycles = import_cycles(graph)
    assert cycles == [], "import cycles (break them; see ARCHITECTURE.md for the allowed direction):\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


# The folders from the ground up: a module may import the vocabulary modules at the package root,
# its own folder and the folders listed before its own, never one listed after it.
LAYERS = (
    "vocabulary",  # errors, messages, markers, events, sizing (a folder), settings, tools, backend
    "serving",  # the local HTTP service that sim/ and integrations/ (the proxy) both run
    "failures",
    "display",
    "policy",
    "prompt",
    "archive",
    "compaction",
    "limits",
    "context_engines",
    "engine",
    "session",
    "sim",
    "analysis",
    "widgets",
    "experiments",
    "replay",
    "integrations",
    "cli",
    "api",  # contextkit/__init__.py and __main__.py
)

# vocabulary modules that grew into a folder of their own: still the vocabulary (settings imports sizing)
VOCABULARY_FOLDERS = frozenset({"sizing"})


# Folders drawn side by side in ARCHITECTURE.md rather than above each other: the hosts other than
# Session (integrations/) stand on session/ and below, never on the simulator, the widgets or the
# experiments, so that a proxy or an adapter loads none of them.
CEILING = {"integrations": "session"}


def layer_of(module: str, package: Path = PACKAGE) -> str:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] == "__main__":
        return "api"
    if (package / (parts[1] + ".py")).exists() or parts[1] in VOCABULARY_FOLDERS:
        return "vocabulary"
    return parts[1]


def layering_violations(graph: dict[str, set[str]], package: Path = PACKAGE) -> list[str]:
    found = []
    for module, targets in sorted(graph.items()):
        here = layer_of(module, package)
        for target in sorted(targets):
            there = layer_of(target, package)
            top = LAYERS.index(CEILING[here]) if here in CEILING else LAYERS.index(here) - 1
            if there != here and LAYERS.index(there) > top:
                found.append(f"{module} ({here}/) imports {target} ({there}/)")
    return found


def test_the_layering_check_finds_an_import_that_runs_upwards(tmp_path: Path) -> None:
    pkg = tmp_path / "contextkit"
    for folder in ("failures", "engine"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "messages.py").write_text("")
    (pkg / "engine" / "flow.py").write_text("from contextkit.failures.classify import x\nfrom contextkit import messages\n")
    (pkg / "failures" / "classify.py").write_text("def later():\n    from contextkit.engine import flow\n")
    assert layering_violations(import_graph(pkg), pkg) == [
        "contextkit.failures.classify (failures/) imports contextkit.engine.flow (engine/)"
    ]


def test_the_layering_check_keeps_integrations_off_the_simulator(tmp_path: Path) -> None:
    """sim/ is listed below integrations/, yet a proxy or an adapter must not load it."""
    pkg = tmp_path / "contextkit"
    for folder in ("session", "sim", "integrations"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "integrations" / "proxy.py").write_text("from contextkit.session import core\nfrom contextkit.sim import x\n")
    assert layering_violations(import_graph(pkg), pkg) == [
        "contextkit.integrations.proxy (integrations/) imports contextkit.sim (sim/)"
    ]


def test_every_folder_is_a_known_layer() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    folders -= VOCABULARY_FOLDERS
    assert folders <= set(LAYERS), f"add {sorted(folders - set(LAYERS))} to LAYERS (and ARCHITECTURE.md)"


def test_imports_only_run_down_the_folder_layers() -> None:
    violations = layering_violations(import_graph())
    assert violations == [], "imports against the folder layering (see ARCHITECTURE.md):\n" + "\n".join(violations)


def test_the_package_root_holds_only_the_vocabulary() -> None:
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= 12, root
