"""Static stand-ins for live widgets, for notebooks stored with their outputs.

A saved notebook opened on GitHub, nbviewer or in a JupyterLab without a running kernel cannot
draw a live widget: it shows "model not found" or nothing. ``scripts/execute_notebooks.py`` runs
each notebook, then asks the kernel for ``snapshots()``: for every widget still alive, a MIME
bundle of what it shows at the end of the run (HTML, with altair charts rendered to PNG by
vl-convert; plain text for the rest). The script puts those bundles in place of the widget views:
a widget may stand for several outputs (the dashboard: header, chart image, details), so a
snapshot is a list of bundles.
"""

from __future__ import annotations

import base64
import json
from typing import Any


def _chart_png(chart: Any, scale: float = 1.0) -> bytes:
    from contextkit.analysis.export import chart_png

    return chart_png(chart, scale=scale)


Bundle = dict[str, str]


def _png_bundle(chart: Any, text: str) -> Bundle:
    return {"image/png": base64.b64encode(_chart_png(chart)).decode("ascii"), "text/plain": text}


def dashboard_bundles(dashboard: Any) -> list[Bundle]:
    """The dashboard as it looks now: header (HTML), chart (PNG), what happened and the numbers (HTML)."""
    counts = dashboard.chart.series.counts()
    gauge = dashboard.gauge
    def n(count: int, word: str) -> str:
        return f"{count} {word}{'' if count == 1 else 's'}"

    summary = (
        f"contextkit dashboard (snapshot at the end of the run): {n(counts['requests'], 'request')}, "
        f"{counts['rejections']} refused, {n(counts['recoveries'], 'recovery step')}, "
        f"{n(counts['compactions'], 'compaction step')}"
    )
    header = "".join(
        [
            "<div class='ck-dashboard-static'>",
            dashboard.title.value,
            "<div style='display:flex;flex-wrap:wrap;gap:16px'>",
            f"<div style='flex:1 1 300px'>{gauge.bytes_bar.value}</div>",
            f"<div style='flex:1 1 300px'>{gauge.tokens_bar.value}</div></div>",
            gauge.info.value,
            "<p style='font-size:11px;color:#777'>A static snapshot of the live dashboard at the end of the run; "
            "run the notebook to see it update.</p></div>",
        ]
    )
    details = "".join(
        [
            "<div class='ck-dashboard-static'><h4 style='margin:6px 0'>What happened: compactions and recoveries</h4>",
            dashboard.timeline.status.value,
            dashboard.timeline.table.value,
            "<h4 style='margin:6px 0'>The numbers</h4>",
            dashboard.stats.table.value,
            "<h4 style='margin:6px 0'>Recall archive</h4>",
            dashboard.browser.header.value,
            "</div>",
        ]
    )
    return [
        {"text/html": header, "text/plain": summary},
        _png_bundle(dashboard.chart.chart, "requests over time against the payload cap and the context window"),
        {"text/html": details, "text/plain": f"{len(dashboard.timeline.rows)} compactions and recoveries"},
    ]


def widget_bundles(widget: Any) -> list[Bundle]:
    """Static bundles for one widget; empty when it has no meaningful static form."""
    from contextkit.widgets.dashboard import Dashboard

    if isinstance(widget, Dashboard):
        return dashboard_bundles(widget)
    chart = getattr(widget, "chart", None)
    if chart is not None and hasattr(chart, "to_dict") and type(widget).__name__ in ("JupyterChart", "LiveChart"):
        return [_png_bundle(chart, "altair chart (static snapshot)")]
    value = getattr(widget, "value", None)
    description = getattr(widget, "description", "") or ""
    if isinstance(value, int | float) and hasattr(widget, "max"):  # progress bars (tqdm's notebook bar)
        return [{"text/plain": f"{description} {value}/{widget.max}".strip()}]
    children = getattr(widget, "children", None)
    if children:  # a box: what its children show, as one line (tqdm's bar is an HBox)
        texts = [b.get("text/plain", "") for c in children for b in widget_bundles(c)]
        texts += [str(getattr(c, "value", "")) for c in children if isinstance(getattr(c, "value", None), str)]
        text = " ".join(t for t in texts if t).strip()
        return [{"text/plain": text}] if text else []
    return []


def snapshots() -> dict[str, list[Bundle]]:
    """``{model_id: [bundle, ...]}`` for every live widget that has a static form."""
    from ipywidgets.widgets.widget import _instances

    out: dict[str, list[Bundle]] = {}
    for model_id, widget in list(_instances.items()):
        try:
            bundles = widget_bundles(widget)
        except Exception as exc:  # noqa: BLE001 - one broken snapshot must not lose the others
            bundles = [{"text/plain": f"(no static snapshot: {type(exc).__name__}: {exc})"}]
        if bundles:
            out[model_id] = bundles
    return out


def print_snapshots() -> None:
    """Print ``snapshots()`` as one JSON line (what the notebook executor reads back)."""
    print("CONTEXTKIT-SNAPSHOTS " + json.dumps(snapshots()))
