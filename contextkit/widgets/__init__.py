"""Live ipywidgets panels for a contextkit Session.

::

    from contextkit.widgets import Dashboard
    Dashboard(session)   # header, live chart, what happened, numbers, archive, status log

``HistoryGauge`` (the header), ``LiveChart``, ``PhaseTimeline``, ``StatsTable``, ``ArchiveBrowser``,
``StatusLog`` and ``Dashboard`` are thin views over
``session.events``: no policy, no polling, no refresh button; updates from a background thread
or an asyncio task show up live. ``session_html`` / ``archive_html`` are the static HTML
fallbacks used by ``_repr_html_``; they (and this package) import without the ``[notebook]`` extra
— the panels need it and say so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from contextkit.display.html import archive_html, session_html

if TYPE_CHECKING:
    from contextkit.widgets.browser import ArchiveBrowser
    from contextkit.widgets.chart import LiveChart
    from contextkit.widgets.dashboard import Dashboard, StatsTable
    from contextkit.widgets.gauge import HistoryGauge
    from contextkit.widgets.log import StatusLog
    from contextkit.widgets.timeline import PhaseTimeline

_LAZY = {
    "ArchiveBrowser": "contextkit.widgets.browser",
    "Dashboard": "contextkit.widgets.dashboard",
    "HistoryGauge": "contextkit.widgets.gauge",
    "LiveChart": "contextkit.widgets.chart",
    "StatusLog": "contextkit.widgets.log",
    "PhaseTimeline": "contextkit.widgets.timeline",
    "StatsTable": "contextkit.widgets.dashboard",
}

__all__ = [
    "ArchiveBrowser",
    "Dashboard",
    "HistoryGauge",
    "LiveChart",
    "PhaseTimeline",
    "StatsTable",
    "StatusLog",
    "archive_html",
    "session_html",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'contextkit.widgets' has no attribute {name!r}")
    import importlib

    from contextkit.errors import require_extra

    require_extra(f"contextkit.widgets.{name}", "ipywidgets", "traitlets", "anywidget", "altair", "vl_convert")
    return getattr(importlib.import_module(module), name)
