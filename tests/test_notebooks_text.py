"""Notebooks are kept as jupytext percent-format text paired with their .ipynb copies."""

from __future__ import annotations

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
