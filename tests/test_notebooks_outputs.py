"""The .ipynb files shipped for Binder and GitHub carry outputs a reader can follow without running.

They are made by ``scripts/execute_notebooks.py`` from the ``.py`` sources (see its docstring):
outputs must be current (made from the .py as it is now), complete, free of live widget views
that no static viewer can draw, and free of machine-specific or secret text.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
sys.path.insert(0, str(ROOT / "scripts"))
import execute_notebooks as ex  # noqa: E402

FORBIDDEN = [
    (re.compile(r"/(?:work|root|home|tmp)/"), "an absolute path"),
    (re.compile(r"127\.0\.0\.1:\d{2,5}"), "a loopback port"),
    (re.compile(r"\b0x[0-9a-f]{6,16}\b"), "a memory address"),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), "something shaped like an API key"),
    (re.compile(r"Traceback \(most recent call last\)"), "a traceback"),
]


def _texts(output: dict[str, Any]) -> list[str]:
    parts = [output.get("text", "")]
    parts += [v for k, v in output.get("data", {}).items() if k.startswith("text/")]
    return ["".join(p) if isinstance(p, list) else str(p) for p in parts]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_outputs_are_current_complete_and_clean(path: Path) -> None:
    nb = json.loads(path.read_text(encoding="utf-8"))
    py = path.with_suffix(".py")
    assert not ex.stale(py), (
        f"{path.name} has outputs of an older {py.name}: run python scripts/execute_notebooks.py {py.relative_to(ROOT)}"
    )
    ids = [c.get("id") for c in nb["cells"]]
    assert ids == [f"{path.stem[:2]}-{i:02d}" for i in range(len(ids))], f"{path.name}: cell ids are not positional"
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    silent = [c for c in code if not c.get("outputs")]
    assert len(silent) <= len(code) // 2, f"{path.name}: {len(silent)} of {len(code)} code cells show nothing"
    for cell in code:
        source = "".join(cell["source"])
        if "NBVAL_CHECK_OUTPUT" in source:
            assert cell.get("outputs"), f"{path.name}: a checked cell has no stored output:\n{source[:200]}"
        for output in cell.get("outputs", []):
            assert ex.WIDGET_VIEW not in output.get("data", {}), f"{path.name}: a live widget view was stored"
            assert output.get("name") != "stderr", f"{path.name}: stderr in a stored output: {_texts(output)[0][:300]}"
            for text in _texts(output):
                for pattern, what in FORBIDDEN:
                    found = pattern.search(text)
                    assert found is None, (
                        f"{path.name}: {what} in an output: …{text[max(0, found.start() - 80) : found.end() + 80]}…"
                    )


def test_the_tour_shows_the_dashboard_as_a_static_snapshot() -> None:
    nb = json.loads((ROOT / "notebooks" / "01_tour.ipynb").read_text(encoding="utf-8"))
    outputs = [o for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]
    html = "".join("".join(o.get("data", {}).get("text/html", "")) for o in outputs)
    assert "ck-dashboard-static" in html and "Compaction" in html and "requests sent" in html
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the chart, rendered by vl-convert


def test_scrub_removes_what_differs_between_runs() -> None:
    text = f"saved /tmp/tmpab12cd/tour.json at http://127.0.0.1:40123/v1 (0x7f3a2b1c4d50) in {ROOT}/notebooks"
    assert ex.scrub(text) == "saved <tmp>/tour.json at http://127.0.0.1:PORT/v1 (0x…) in ./notebooks"


# What fits a 1280 px screen beside JupyterLab's prompts and margins: images up to 1000 px wide, table
# rows up to 130 characters of its 13 px monospace font (prose lines wrap, a table row that wraps is
# unreadable).
FIT_PX, FIT_CHARS = 1000, 130
TABLE_ROW = re.compile(r"\S {2,}\S.*\S {2,}\S")  # columns aligned with runs of spaces


def _too_wide(output: dict[str, Any]) -> list[str]:
    wide = []
    for mime, value in output.get("data", {}).items():
        text = "".join(value) if isinstance(value, list) else str(value)
        if mime == "image/svg+xml":
            found = re.search(r'<svg[^>]*\swidth="([\d.]+)', text)
            if found and float(found.group(1)) > FIT_PX:
                wide.append(f"an SVG {found.group(1)} px wide")
        elif mime == "image/png":
            import base64
            import struct

            raw = base64.b64decode(text[:64])
            shown = output.get("metadata", {}).get("image/png", {}).get("width")  # else its own size
            width = int(shown or struct.unpack(">I", raw[16:20])[0])
            if width > FIT_PX:
                wide.append(f"a PNG {width} px wide")
    for line in "".join(output.get("text", "")).splitlines():
        if len(line) > FIT_CHARS and TABLE_ROW.search(line):
            wide.append(f"a {len(line)}-character line: {line[:80]}…")
    return wide


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_chart_and_table_fits_a_1280_px_screen(path: Path) -> None:
    nb = json.loads(path.read_text(encoding="utf-8"))
    wide = [f"cell {i}: {w}" for i, c in enumerate(nb["cells"]) for o in c.get("outputs", []) for w in _too_wide(o)]
    assert wide == [], f"{path.name}: " + "; ".join(wide)


def test_the_width_check_can_fail() -> None:
    svg = {"data": {"image/svg+xml": '<svg class="marks" width="1082" height="400">'}}
    assert _too_wide(svg) == ["an SVG 1082 px wide"] and _too_wide({"text": "a  b  c " * 20})
    assert not _too_wide({"text": "a long sentence " * 20})  # prose wraps
