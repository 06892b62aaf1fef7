"""Live ipywidgets panels for a contextkit Session (SPEC S8).

::

    from contextkit.widgets import Dashboard
    Dashboard(session)            # gauge + stats + phase timeline + archive browser, all live

``HistoryGauge``, ``PhaseTimeline``, ``ArchiveBrowser`` and ``Dashboard`` are thin views over
``session.events``: no policy, no polling, no refresh button; updates from a background thread
or an asyncio task show up live. ``session_html`` / ``archive_html`` are the static HTML
fallbacks used by ``_repr_html_``; they (and this package) import without ipywidgets — the
panels load ipywidgets on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from contextkit.widgets.html import archive_html, session_html

if TYPE_CHECKING:
    from contextkit.widgets.browser import ArchiveBrowser
    from contextkit.widgets.dashboard import Dashboard, StatsTable
    from contextkit.widgets.gauge import HistoryGauge
    from contextkit.widgets.timeline import PhaseTimeline

_LAZY = {
    "ArchiveBrowser": "contextkit.widgets.browser",
    "Dashboard": "contextkit.widgets.dashboard",
    "HistoryGauge": "contextkit.widgets.gauge",
    "PhaseTimeline": "contextkit.widgets.timeline",
    "StatsTable": "contextkit.widgets.dashboard",
}

__all__ = [
    "ArchiveBrowser",
    "Dashboard",
    "HistoryGauge",
    "PhaseTimeline",
    "StatsTable",
    "archive_html",
    "session_html",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'contextkit.widgets' has no attribute {name!r}")
    import importlib

    from contextkit._extras import require

    require(f"contextkit.widgets.{name}", "ipywidgets", "traitlets", "anywidget", "altair", "vl_convert")
    return getattr(importlib.import_module(module), name)
