"""Regenerate the numbered notebooks from the cell texts in ``_cells.py``.

    .venv/bin/python notebooks/_build.py            # all notebooks
    .venv/bin/python notebooks/_build.py 03 05      # some of them

Each notebook is executed once (against the simulator, no API key) and saved with every output
cleared **except** the cells marked ``# NBVAL_CHECK_OUTPUT``: those keep their (deterministic)
output, which ``pytest --nbval-lax`` compares on every run. Keeping the cells in one Python file
makes review and diffs readable; the .ipynb files are the product. Not part of the package.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _cells import NOTEBOOKS  # noqa: E402


def build(name: str, cells: list[tuple[str, str]]) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for kind, source in cells:
        text = source.strip("\n")
        cell = nbformat.v4.new_markdown_cell(text) if kind == "md" else nbformat.v4.new_code_cell(text)
        nb.cells.append(cell)
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"{name[:2]}-{i:02d}"  # stable ids: rebuilding gives byte-identical files
    _execute(nb)
    path = HERE / name
    nbformat.validate(nb)
    nbformat.write(nb, path)
    return path


def _execute(nb: nbformat.NotebookNode) -> None:
    import os

    from nbclient import NotebookClient

    env_model = os.environ.pop("CONTEXTKIT_NOTEBOOK_MODEL", None)  # stored outputs come from the simulator
    try:
        NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(HERE)}}).execute()
    finally:
        if env_model is not None:
            os.environ["CONTEXTKIT_NOTEBOOK_MODEL"] = env_model
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        if "NBVAL_CHECK_OUTPUT" not in cell.source:
            cell["execution_count"] = None
            cell["outputs"] = []
        # checked cells keep their execution count: nbval refuses outputs of an "unrun" cell
    nb.metadata.pop("widgets", None)


def main() -> None:
    only = set(sys.argv[1:])
    for name, cells in NOTEBOOKS.items():
        if not only or name in only or name[:2] in only:
            print("wrote", build(name, cells).relative_to(HERE.parent))


if __name__ == "__main__":
    main()
