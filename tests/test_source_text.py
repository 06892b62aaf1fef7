"""Text a reader of this repository can follow: comments, docstrings and messages cite no document
the repository does not contain, and every ``Limits`` field says what it limits where it is defined."""

from __future__ import annotations

import ast
import re
from dataclasses import MISSING, fields
from pathlib import Path

import pytest

from contextkit.settings import ENV_PREFIX, Limits

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve()

# Section numbers of a specification ("S4.6", "SPEC S5.3", "(S10.1)"), issue numbers ("issue 14",
# "issue-12", "issue #3"), research notes ("research §9.10", "feasibility.md") and documents that
# live elsewhere ("the essay", "the source doc", "DEVELOPERS.md"). README.md and ARCHITECTURE.md
# are in the repository and may be cited.
OUTSIDE = re.compile(
    r"\bSPEC\b|\bS\d{1,2}(?:\.\d+)*\b"
    r"|(?i:\bissues? ?[-#]?\d+|\bresearch (?:doc|note)s?\b|§\s?\d|\bthe essay\b|\bsource doc\b"
    r"|\bDEVELOPERS\.md\b|\bfeasibility(?:\.md)?\b|shared/research)"
)


def outside_references(text: str) -> list[tuple[int, str]]:
    """(line number, match) of every citation of an outside document in ``text``. Lines that define a
    regular expression (a check like this one) are patterns, not citations."""
    return [
        (number, m.group(0))
        for number, line in enumerate(text.splitlines(), 1)
        if "re.compile(" not in line
        for m in OUTSIDE.finditer(line)
    ]


def _sources() -> list[Path]:
    files = [p for folder in ("contextkit", "tests", "benchmarks", "scripts") for p in (ROOT / folder).rglob("*")
             if p.is_file() and p.suffix in (".py", ".sh", "")]  # fmt: skip
    files += sorted((ROOT / "notebooks").glob("*.py"))
    return sorted(p for p in files if p.resolve() != HERE and "__pycache__" not in p.parts)


@pytest.mark.parametrize(
    "sample",
    [
        "LEARNED_CAP_SHARE = 0.75  # S5.3: a learned cap is 3/4 of the rejected size",
        '"""Level 2 of the compaction pipeline (SPEC S4.4-S4.6)."""',
        "# Prompt cache (S10.1), as the provider reported it",
        "the behaviour before issue 14 (rewrite on every request)",
        "Property test over random fault sequences (Issue 12 acceptance).",
        "the pre-issue-14 behaviour",
        "Order per request (research §9.10): turn-boundary rewrites",
        "Read the table with the essay's questions in mind:",
        "as measured in feasibility.md §2-3",
        "see DEVELOPERS.md for the set-up",
    ],
)
def test_the_check_flags_each_kind_of_outside_reference(sample: str) -> None:
    assert outside_references(sample), sample


@pytest.mark.parametrize(
    "sample",
    [
        "see README.md and ARCHITECTURE.md",
        "a 413 from the gateway; 3/4 of 128 KB is 96 KB",
        "test_issue12_audit.py is a name a layout test rejects",
        "Session.stats, the SSE stream, HTTP 403, utf-8",
        'OUTSIDE = re.compile(r"\\bSPEC\\b|issue \\d+")',
    ],
)
def test_the_check_leaves_ordinary_text_alone(sample: str) -> None:
    assert outside_references(sample) == []


def test_no_comment_docstring_or_message_cites_a_document_outside_the_repository() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {match}"
        for path in _sources()
        for number, match in outside_references(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert found == [], "say the reason in the sentence itself instead of citing:\n" + "\n".join(found)


# -- every Limits field documented where it is defined ------------------------------------------------


def _field_docstrings() -> dict[str, str]:
    """Attribute docstrings of ``Limits``: the string literal right under each field, as mkdocstrings
    (griffe) reads them."""
    source = (ROOT / "contextkit" / "settings.py").read_text(encoding="utf-8")
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "Limits")
    docs: dict[str, str] = {}
    for node, after in zip(cls.body, [*cls.body[1:], None], strict=True):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            is_doc = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
            docs[node.target.id] = str(after.value.value) if is_doc else ""  # type: ignore[union-attr]
    return docs


def _other_value(name: str, default: object) -> str:
    """A valid CONTEXTKIT_* value for ``name`` that differs from its default."""
    if name == "max_payload":
        return "3MB"
    if name == "compact_model":
        return "openai/some-summarizer"
    if isinstance(default, bool):
        return "true" if not default else "false"
    if isinstance(default, int):
        return str(default + 1)
    if isinstance(default, float):
        return str(round(default / 2, 3))
    return "7"


@pytest.mark.parametrize("field", [f.name for f in fields(Limits)])
def test_every_limits_field_says_what_it_limits_its_default_and_its_variable(field: str) -> None:
    doc = " ".join(_field_docstrings().get(field, "").split())
    assert len(doc) > 60, f"Limits.{field} needs an attribute docstring under it (what it limits, its unit)"
    default = next(f.default for f in fields(Limits) if f.name == field)
    assert default is not MISSING
    stated = re.search(r"Default: ``([^`]+)``", doc)
    assert stated, f"Limits.{field}: say its default as 'Default: ``VALUE``'"
    assert ast.literal_eval(stated.group(1)) == default, f"Limits.{field}: the docstring's default is stale"
    variable = ENV_PREFIX + field.upper()
    read = Limits.from_env({variable: _other_value(field, default)})
    from_env = getattr(read, field) != default  # the environment variable really sets the field
    if from_env:
        assert f"``{variable}``" in doc, f"Limits.{field} is set by {variable}: say so"
    else:
        assert "No environment variable" in doc and ENV_PREFIX not in doc, f"Limits.{field}: no variable sets it"


def test_the_docstring_check_sees_a_missing_docstring() -> None:
    source = "class Limits:\n    a: int = 1\n    b: int = 2\n    '''b.'''\n"
    cls = ast.parse(source).body[0]
    assert isinstance(cls, ast.ClassDef)
    documented = [
        node.target.id
        for node, after in zip(cls.body, [*cls.body[1:], None], strict=True)
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
        and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
    ]  # fmt: skip
    assert documented == ["b"]  # "a" has none: the real test would fail on it
