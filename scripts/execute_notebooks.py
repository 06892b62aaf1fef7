"""Execute notebooks from their text source and store the outputs in the paired .ipynb.

    .venv/bin/python scripts/execute_notebooks.py                      # every notebooks/NN_*.py
    .venv/bin/python scripts/execute_notebooks.py notebooks/03_*.py    # just these
    .venv/bin/python scripts/execute_notebooks.py --check              # exit 1 if any .ipynb is stale

The ``.py`` file (jupytext percent format) is the source; the ``.ipynb`` next to it is what Binder
and GitHub show, so it carries outputs a reader can follow without running anything. For each
notebook this script:

1. reads ``notebooks/NN_name.py`` with jupytext and runs it with nbclient in ``notebooks/``,
   always against the bundled simulator (``CONTEXTKIT_NOTEBOOK_MODEL`` and API keys are removed
   from the kernel's environment, so no secret and no real answer can land in an output);
2. replaces every live widget view (which no static viewer can draw) by a static snapshot taken
   from the kernel at the end of the run: the dashboard as HTML with its chart as a PNG rendered
   by vl-convert, altair charts as PNG, progress bars as text (``contextkit.widgets.static``);
3. scrubs what would differ between machines or runs: absolute paths, loopback ports, memory
   addresses, timing metadata, and numbers the cells by position (jupytext's ids are random);
4. writes ``notebooks/NN_name.ipynb`` (same cells as the ``.py``: tests/test_notebooks_text.py
   checks the pair; tests/test_notebooks_outputs.py checks the outputs).

Cells marked ``# NBVAL_CHECK_OUTPUT`` must print the same thing on every run: nbval compares
them (``pytest --nbval-lax``) with what this script stored.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
SNAPSHOT_MARK = "CONTEXTKIT-SNAPSHOTS "
SECRET_VARS = ("CONTEXTKIT_NOTEBOOK_MODEL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "AZURE_API_KEY", "GEMINI_API_KEY")
SOURCE_HASH = "contextkit_source_sha256"  # notebook metadata: the .py the outputs were made from


def scrub(text: str, *, root: Path = ROOT) -> str:
    """Remove what differs between machines and runs from an output text."""
    for secret in (os.environ.get(v) for v in SECRET_VARS if v.endswith("_KEY")):
        if secret:
            text = text.replace(secret, "<secret>")
    text = text.replace(str(root), ".")
    # temporary folders differ on every run: keep only the file name
    text = re.sub(r"(?<![\w.])/tmp/[^\s'\"<>)]*", lambda m: "<tmp>/" + m.group(0).rstrip("/").rsplit("/", 1)[-1], text)
    text = text.replace(str(Path.home()), "~")
    text = re.sub(r"(https?://)(127\.0\.0\.1|localhost):\d+", r"\1\2:PORT", text)
    text = re.sub(r"\b0x[0-9a-f]{6,16}\b", "0x…", text)
    return text


def source_hash(py: Path) -> str:
    return hashlib.sha256(py.read_bytes()).hexdigest()


def _scrub_outputs(nb: Any) -> None:
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        for output in cell.get("outputs", []):
            if "text" in output:
                output["text"] = scrub(output["text"])
            for mime, value in list(output.get("data", {}).items()):
                if isinstance(value, str) and (mime.startswith("text/") or mime.endswith("json")):
                    output["data"][mime] = scrub(value)
            output.get("metadata", {}).pop("execution", None)


def stable_ids(nb: Any, py: Path) -> None:
    """Cell ids by position ("01-03"): jupytext makes random ones, which would churn every diff."""
    for index, cell in enumerate(nb.cells):
        cell["id"] = f"{py.stem[:2]}-{index:02d}"


def _replace_widgets(nb: Any, snapshots: dict[str, list[dict[str, str]]]) -> None:
    import nbformat

    for cell in nb.cells:
        outputs = []
        for output in cell.get("outputs", []):
            view = output.get("data", {}).pop(WIDGET_VIEW, None)
            bundles = snapshots.get(view.get("model_id", "")) if view else None
            if bundles:  # the widget's result cell keeps its place; extra parts follow as displays
                first, *rest = bundles
                output["data"] = dict(first)
                outputs.append(output)
                outputs += [nbformat.v4.new_output("display_data", data=dict(b)) for b in rest]
                continue
            if view is not None and "text/plain" not in output["data"]:
                output["data"]["text/plain"] = "(an interactive widget: run the notebook to see it)"
            outputs.append(output)
        if "outputs" in cell:
            cell.outputs = outputs


def execute(py: Path, *, timeout: int = 600) -> Any:
    """Run ``py`` in a fresh kernel; the executed notebook with static widget snapshots, scrubbed."""
    import jupytext
    import nbformat
    from nbclient import NotebookClient

    nb = jupytext.read(py)
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", record_timing=False,
        resources={"metadata": {"path": str(py.parent)}},
    )  # fmt: skip
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)
        probe = nbformat.v4.new_code_cell("from contextkit.widgets.static import print_snapshots\nprint_snapshots()")
        nb.cells.append(probe)  # nbclient writes the executed cell back by index
        try:
            client.execute_cell(probe, len(nb.cells) - 1)
        finally:
            nb.cells.pop()
    text = "".join(o.get("text", "") for o in probe.outputs if o.get("name") == "stdout")
    line = next((x for x in text.splitlines() if x.startswith(SNAPSHOT_MARK)), None)
    snapshots = json.loads(line[len(SNAPSHOT_MARK) :]) if line else {}
    _replace_widgets(nb, snapshots)
    _scrub_outputs(nb)
    stable_ids(nb, py)
    nb.metadata.pop("widgets", None)
    nb.metadata[SOURCE_HASH] = source_hash(py)
    return nb


def write(nb: Any, py: Path) -> Path:
    import jupytext

    target = py.with_suffix(".ipynb")
    jupytext.write(nb, target, fmt="ipynb")
    return target


def stale(py: Path) -> bool:
    """True when the .ipynb's outputs were not made from the current .py."""
    target = py.with_suffix(".ipynb")
    if not target.exists():
        return True
    stored = json.loads(target.read_text(encoding="utf-8")).get("metadata", {}).get(SOURCE_HASH)
    return stored != source_hash(py)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="notebooks/NN_name.py files (default: all)")
    parser.add_argument("--check", action="store_true", help="only report notebooks whose outputs are stale")
    args = parser.parse_args(argv)
    paths = [p.with_suffix(".py") for p in args.notebooks] or sorted(NOTEBOOKS.glob("[0-9][0-9]_*.py"))
    if args.check:
        old = [p for p in paths if stale(p)]
        for p in old:
            print(f"stale outputs: {p.with_suffix('.ipynb')} (run: python scripts/execute_notebooks.py {p})")
        return 1 if old else 0
    for var in SECRET_VARS:  # outputs always come from the simulator
        os.environ.pop(var, None)
    os.environ.update(LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_OFFLINE_MODE="True", LITELLM_LOG="ERROR")
    for py in paths:
        print(f"executing {py.relative_to(ROOT) if py.is_absolute() else py} …", flush=True)
        print(f"  wrote {write(execute(py.resolve()), py.resolve()).relative_to(ROOT)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
