"""The dashboard's centre: a live altair chart of every request against the cap and the window.

``session_chart(series)`` is pure (a ``SessionSeries`` in, an altair chart out). ``LiveChart``
follows a session's events and redraws an ``altair.JupyterChart`` (an anywidget) with its
JavaScript inlined from vl-convert, so nothing is loaded from a CDN. It renders as SVG: every mark
is a DOM element a browser test can count. Layers are named, so each layer's marks carry a class
``<name>_marks``: ``requests_marks`` (one point per request), ``rejections_marks``,
``recoveries_marks``, ``compactions_marks``, ``cache_breaks_marks``, ``tokens_marks``.
"""

from __future__ import annotations

from typing import Any

import altair as alt

from contextkit.events import Event
from contextkit.widgets._view import EventFeed, FeedView, events_of
from contextkit.widgets.series import SessionSeries

WIDTH = 640
OUTCOME_COLOURS = alt.Scale(domain=["went through", "refused"], range=["#1565c0", "#c62828"])
LEVEL_COLOURS = alt.Scale(domain=[1, 2, 3], range=["#2e7d32", "#f9a825", "#6a1b9a"])
EMBED_OPTIONS = {"renderer": "svg", "actions": False}


def _data(rows: list[dict[str, Any]]) -> alt.InlineData:
    return alt.InlineData(values=rows)


def session_chart(series: SessionSeries) -> alt.VConcatChart:
    """Request size (KB) against the payload cap, and tokens against the window, over requests."""
    requests = series.requests
    last = max(len(requests), 1)
    x = alt.X(
        "n:Q",
        title="request (in the order sent)",
        scale=alt.Scale(domain=[0.5, last + 0.5], nice=False),
        axis=alt.Axis(tickMinStep=1),
    )
    tip = [alt.Tooltip("explain:N", title="what happened")]
    # placeholder rows keep every layer (and its class) in the SVG even before it has data
    empty: list[dict[str, Any]] = []

    points = (
        alt.Chart(_data(requests or empty), name="requests")
        .mark_point(filled=True, size=70, opacity=0.9)
        .encode(
            x=x,
            y=alt.Y("kb:Q", title="request size (KB)"),
            color=alt.Color("result:N", scale=OUTCOME_COLOURS, title="request", legend=alt.Legend(orient="top")),
            tooltip=tip,
        )
    )
    size_line = alt.Chart(_data(requests or empty)).mark_line(color="#90a4ae", strokeWidth=1).encode(x=x, y="kb:Q")
    cap = (
        alt.Chart(_data([r for r in requests if r["cap_kb"] is not None] or empty), name="cap")
        .mark_line(strokeDash=[6, 4], color="#37474f", interpolate="step-after")
        .encode(x=x, y="cap_kb:Q", tooltip=[alt.Tooltip("cap_kb:Q", title="payload cap in force (KB)", format=",.1f")])
    )
    rejections = (
        alt.Chart(_data(series.rejections or empty), name="rejections")
        .mark_point(shape="cross", size=260, color="#c62828", strokeWidth=3, filled=True)
        .encode(x=x, y="kb:Q", tooltip=tip)
    )
    recoveries = (
        alt.Chart(_data(series.recoveries or empty), name="recoveries")
        .mark_point(shape="triangle-up", size=200, filled=True, opacity=0.9)
        .encode(
            x=x,
            y="kb:Q",
            color=alt.Color("level:O", scale=LEVEL_COLOURS, title="recovery level", legend=alt.Legend(orient="top")),
            tooltip=tip,
        )
    )
    compactions = (
        alt.Chart(_data(series.compactions or empty), name="compactions")
        .mark_rule(strokeWidth=3, opacity=0.55)
        .encode(
            x=alt.X("x:Q", scale=alt.Scale(domain=[0.5, last + 0.5], nice=False)),
            color=alt.Color("phase_name:N", title="compaction", legend=alt.Legend(orient="right")),
            tooltip=tip,
        )
    )
    cache_breaks = (
        alt.Chart(_data(series.cache_breaks or empty), name="cache_breaks")
        .mark_point(shape="diamond", size=120, color="#ef6c00", filled=False, strokeWidth=2)
        .encode(x=x, y=alt.Y("kb:Q"), tooltip=tip)
    )
    bytes_panel = (
        alt.layer(compactions, size_line, cap, points, rejections, recoveries, cache_breaks)
        .resolve_scale(color="independent")
        .properties(width=WIDTH, height=190, title="Request size against the gateway's payload cap")
    )

    tokens = (
        alt.Chart(_data(requests or empty), name="tokens")
        .mark_bar(size=6, color="#5c6bc0", opacity=0.8)
        .encode(x=x, y=alt.Y("tokens:Q", title="tokens"), tooltip=tip)
    )
    cached = (
        alt.Chart(_data([r for r in requests if r["cached_tokens"]] or empty), name="cached")
        .mark_bar(size=6, color="#43a047")
        .encode(x=x, y="cached_tokens:Q", tooltip=tip)
    )
    window_rows = [{"window": series.window}] if series.window else empty
    window = (
        alt.Chart(_data(window_rows), name="window")
        .mark_rule(strokeDash=[6, 4], color="#37474f")
        .encode(y="window:Q", tooltip=[alt.Tooltip("window:Q", title="context window (tokens)", format=",")])
    )
    tokens_panel = alt.layer(tokens, cached, window).properties(
        width=WIDTH, height=110, title="Tokens per request (green: read from the prompt cache) against the window"
    )
    return alt.vconcat(bytes_panel, tokens_panel, spacing=12).resolve_scale(color="independent")


class LiveChart(FeedView, alt.JupyterChart):  # type: ignore[misc]
    """``session_chart`` kept up to date from the session's events (offline JupyterChart, SVG)."""

    def __init__(self, session: Any, **kwargs: Any) -> None:
        events = events_of(session, panel="LiveChart")
        alt.JupyterChart.enable_offline(True)  # the JS bundle comes from vl-convert, never a CDN
        self.series = SessionSeries()
        self.redraws = 0
        super().__init__(session_chart(self.series), embed_options=dict(EMBED_OPTIONS), **kwargs)
        self.add_class("ck-chart")
        self._feed = EventFeed(events, self._apply)
        with self._feed.lock:
            self._feed.start()
            self._redraw()

    def _apply(self, event: Event) -> None:
        if self.series.apply(event) and not self._feed.replaying:
            self._redraw()

    def _redraw(self) -> None:
        self.redraws += 1
        self.chart = session_chart(self.series)
