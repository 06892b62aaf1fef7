"""Notebooks are kept as jupytext percent-format text paired with their .ipynb copies."""

from __future__ import annotations

import re
from pathlib import Path

import jupytext
import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
PAIRS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def test_every_notebook_has_a_text_source() -> None:
    assert PAIRS, "no notebooks found"
    texts = {p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.py")}
    assert texts == {p.stem for p in PAIRS}


@pytest.mark.parametrize("ipynb", PAIRS, ids=lambda p: p.stem)
def test_text_and_notebook_agree(ipynb: Path) -> None:
    """Same cells, same sources: run `jupytext --sync notebooks/*.py` after editing either side."""
    text = jupytext.read(ipynb.with_suffix(".py"))
    nb = jupytext.read(ipynb)
    assert [(c.cell_type, c.source.strip()) for c in text.cells] == [
        (c.cell_type, c.source.strip()) for c in nb.cells
    ], f"{ipynb.name} and {ipynb.stem}.py differ; run: jupytext --sync notebooks/{ipynb.stem}.py"


@pytest.mark.parametrize("py", sorted(NOTEBOOKS.glob("[0-9][0-9]_*.py")), ids=lambda p: p.stem)
def test_every_notebook_ends_on_a_sentence(py: Path) -> None:
    """A class sees a closing sentence last, not a dump of numbers or a cell that stops servers."""
    last = jupytext.read(py).cells[-1]
    assert last.cell_type == "markdown", f"{py.name} ends on a code cell; add a closing sentence"
    text = last.source.strip()
    assert text.endswith(".") and not text.lstrip("# ").startswith(("{", "[")), text[-200:]


def test_the_notebooks_text_names_only_what_the_repository_holds() -> None:
    texts = {p.name: p.read_text(encoding="utf-8") for p in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.py"))}
    assert not [name for name, text in texts.items() if "essay" in text.lower()]
    tour = texts["01_tour.py"]
    where = tour[tour.index("**Where next:**") :]
    others = sorted(int(p.name[:2]) for p in NOTEBOOKS.glob("[0-9][0-9]_*.py"))[1:]
    for n in others:  # every other notebook, 7 and later included
        assert re.search(rf"\b{n}\b", where), f"'Where next' skips notebook {n}"
    assert "json.dumps(session.stats" not in tour  # no raw dump at the end


@pytest.mark.parametrize("name", ["01_tour.py", "04_gateway_caps.py"])
def test_the_gateway_notebooks_draw_what_the_session_knows(name: str) -> None:
    text = (NOTEBOOKS / name).read_text(encoding="utf-8")
    assert "gateway=" in text and "known to pass" in text and "known to fail" in text
