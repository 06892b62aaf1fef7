"""Offline chart output: static SVG/PNG through vl-convert, and the offline Jupyter renderer.

Nothing here touches the network: vl-convert bundles the Vega/Vega-Lite engine, and the
``jupyter`` renderer with ``offline=True`` inlines its JavaScript instead of loading a CDN.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import altair as alt

__all__ = ["chart_png", "chart_svg", "enable_offline_renderer", "save_chart"]

_FORMATS = ("svg", "png")


def _spec(chart: Any) -> dict[str, Any]:
    to_dict = getattr(chart, "to_dict", None)
    if not callable(to_dict):
        raise TypeError(f"expected an altair chart, got {type(chart).__name__}")
    spec = to_dict()
    if not isinstance(spec, dict):
        raise TypeError("chart.to_dict() did not return a Vega-Lite spec")
    return spec


def _vl_version() -> str:
    major, minor, *_ = alt.SCHEMA_VERSION.lstrip("v").split(".")
    return f"v{major}_{minor}"


def chart_svg(chart: Any) -> str:
    """The chart rendered to an SVG document string, offline."""
    import vl_convert

    return str(vl_convert.vegalite_to_svg(_spec(chart), vl_version=_vl_version()))


def chart_png(chart: Any, *, scale: float = 2.0) -> bytes:
    """The chart rendered to PNG bytes, offline."""
    import vl_convert

    return bytes(vl_convert.vegalite_to_png(_spec(chart), vl_version=_vl_version(), scale=scale))


def save_chart(chart: Any, path: str | Path, *, format: str | None = None, scale: float = 2.0) -> Path:
    """Write ``chart`` to ``path`` as SVG or PNG (from the suffix unless ``format`` is given).

    Returns the path written. Parent directories are created.
    """
    target = Path(path)
    fmt = (format or target.suffix.lstrip(".")).lower()
    if fmt not in _FORMATS:
        raise ValueError(
            f"cannot save a chart as {fmt or 'a file without suffix'!r}; use a .svg or .png path (or format='svg'/'png')"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "svg":
        target.write_text(chart_svg(chart), encoding="utf-8")
    else:
        target.write_bytes(chart_png(chart, scale=scale))
    return target


def enable_offline_renderer(kind: str = "jupyter") -> str:
    """Make altair render charts without a CDN; returns the renderer name enabled.

    ``jupyter`` (default): interactive JupyterChart with its JS bundle inlined (needs anywidget,
    which contextkit depends on). ``svg`` / ``png``: static images through vl-convert. This
    changes altair's global renderer, like ``alt.renderers.enable`` does.
    """
    if kind == "jupyter":
        alt.renderers.enable("jupyter", offline=True)
    elif kind in _FORMATS:
        alt.renderers.enable(kind)
    else:
        raise ValueError(f"unknown offline renderer {kind!r}; use 'jupyter', 'svg' or 'png'")
    return kind
