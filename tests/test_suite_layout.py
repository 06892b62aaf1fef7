"""The test suite's own layout: files by topic, shared code in ``tests/helpers``, no test file importing another."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ISSUE_NAME = re.compile(r"(^|_)(issue|audit|task)\d*(_|$)|issue\d+", re.IGNORECASE)


def _test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if "helpers" not in p.parts)


def named_after_an_issue(name: str) -> bool:
    return bool(ISSUE_NAME.search(Path(name).stem))


def imported_test_modules(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [n for n in names if n.split(".")[-1].startswith("test_") or n.startswith("tests.test_")]
    return found


def test_the_checks_can_fail() -> None:
    assert named_after_an_issue("test_issue12_audit.py") and named_after_an_issue("test_audit.py")
    assert not named_after_an_issue("test_trust_edges.py") and not named_after_an_issue("test_tissue.py")
    sample = TESTS / "helpers" / "__init__.py"
    assert imported_test_modules(sample) == []


def test_no_test_file_is_named_after_an_issue() -> None:
    assert [p.name for p in _test_files() if named_after_an_issue(p.name)] == []


def test_test_files_import_shared_code_from_helpers_only() -> None:
    offending = {p.name: imported_test_modules(p) for p in _test_files()}
    assert {name: mods for name, mods in offending.items() if mods} == {}
