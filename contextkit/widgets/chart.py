"""The dashboard's centre: a live altair chart of every request against the cap and the window.

``session_chart(series)`` is pure (a ``SessionSeries`` in, an altair chart out). ``LiveChart``
follows a session's events and redraws an ``altair.JupyterChart`` (an anywidget) with its
JavaScript inlined from vl-convert, so nothing is loaded from a CDN. It renders as SVG: every mark
is a DOM element a browser test can count. Layers are named, so each layer's marks carry a class
``<name>_marks``: ``requests_marks`` (one point per request), ``rejections_marks``,
``recoveries_marks``, ``compactions_marks`` (summary and truncation steps), ``routine_marks`` (trim
steps, one small tick each), ``limits_marks`` (the lines of what the session knows about the gateway's
limit), ``cache_breaks_marks``, ``tokens_marks``.
"""

from __future__ import annotations

from typing import Any

import altair as alt

from contextkit.display.html import STAGE_COLOURS
from contextkit.events import COMPACTION_STAGES, Event, RequestEvent
from contextkit.widgets._view import EventFeed, FeedView, events_of
from contextkit.widgets.series import (
    KNOWN_TO_FAIL,
    KNOWN_TO_PASS,
    LIMIT_LINES,
    REAL_CAP,
    SEND_LIMIT,
    SessionSeries,
    evidence_of,
    knowledge_sentence,
    real_cap_of,
)

WIDTH = 640
OUTCOME_COLOURS = alt.Scale(domain=["went through", "refused"], range=["#1565c0", "#c62828"])
LEVEL_COLOURS = alt.Scale(domain=[1, 2, 3], range=["#2e7d32", "#f9a825", "#6a1b9a"])
STAGE_SCALE = alt.Scale(domain=list(COMPACTION_STAGES), range=[STAGE_COLOURS[s] for s in COMPACTION_STAGES])
LIMIT_COLOURS = {KNOWN_TO_PASS: "#2e7d32", SEND_LIMIT: "#37474f", KNOWN_TO_FAIL: "#c62828", REAL_CAP: "#6a1b9a"}
LIMIT_DASHES = {KNOWN_TO_PASS: [1, 0], SEND_LIMIT: [6, 4], KNOWN_TO_FAIL: [1, 0], REAL_CAP: [2, 3]}
EMBED_OPTIONS = {"renderer": "svg", "actions": False}
LIMITS_TITLE = "what the session knows about the gateway's limit"
SPREAD = 0.3  # marks that share an x (several steps between two requests) spread over +-0.3 of a request


def _data(rows: list[dict[str, Any]]) -> alt.InlineData:
    return alt.InlineData(values=rows)


def spread(rows: list[dict[str, Any]], key: str = "x") -> list[dict[str, Any]]:
    """Copies of ``rows`` with ``xs``: rows that share ``key`` side by side, so none hides another."""
    groups: dict[float, int] = {}
    for row in rows:
        groups[row[key]] = groups.get(row[key], 0) + 1
    seen: dict[float, int] = {}
    out = []
    for row in rows:
        m, k = groups[row[key]], seen.get(row[key], 0)
        seen[row[key]] = k + 1
        offset = 0.0 if m == 1 else -SPREAD + 2 * SPREAD * k / (m - 1)
        out.append({**row, "xs": row[key] + offset})
    return out


def _top(series: SessionSeries) -> float:
    """The bytes panel's upper bound (KB): every value drawn fits, so no scale depends on a data extent."""
    values = [r["kb"] for r in series.requests] + [r["kb"] for r in series.recoveries]
    values += [r["kb"] for r in series.limit_rows()]
    return max(values, default=0.0) * 1.1 or 1.0


def session_chart(series: SessionSeries, *, projector: bool = False) -> alt.VConcatChart:
    """Request size (KB) against what the session knows about the gateway's limit (known to pass,
    its send limit, known to fail; the simulator's real cap when given), and tokens against the
    window, over requests. ``projector``: larger text for a projected screen.

    Every scale has an explicit domain (computed here), so an empty layer never asks Vega for the
    extent of a field without values.
    """
    requests = series.requests
    last = max(len(requests), 1)
    xscale = alt.Scale(domain=[0.5, last + 0.5], nice=False)
    x = alt.X("n:Q", title="request (in the order sent)", scale=xscale, axis=alt.Axis(tickMinStep=1))
    xs = alt.X("xs:Q", scale=xscale)
    yscale = alt.Scale(domain=[0, _top(series)], nice=False)
    y = alt.Y("kb:Q", title="request size (KB)", scale=yscale)
    tip = [alt.Tooltip("explain:N", title="what happened")]
    # placeholder rows keep every layer (and its class) in the SVG even before it has data
    empty: list[dict[str, Any]] = []
    lines = list(LIMIT_LINES if series.real_cap else LIMIT_LINES[:-1])
    limits_legend = alt.Legend(orient="bottom", direction="vertical", labelLimit=0, titleLimit=0, symbolStrokeWidth=2)

    points = (
        alt.Chart(_data(requests or empty), name="requests")
        .mark_point(filled=True, size=70, opacity=0.9)
        .encode(
            x=x,
            y=y,
            color=alt.Color("result:N", scale=OUTCOME_COLOURS, title="request", legend=alt.Legend(orient="top")),
            tooltip=tip,
        )
    )
    size_line = alt.Chart(_data(requests or empty)).mark_line(color="#90a4ae", strokeWidth=1).encode(x=x, y=y)
    limits = (
        alt.Chart(_data(series.limit_rows() or empty), name="limits")
        .mark_line(interpolate="step-after", strokeWidth=2)
        .encode(
            x=alt.X("x:Q", scale=xscale),
            y=y,
            # one legend: colour and dash of the same field, with the same title and legend
            color=alt.Color(
                "line:N",
                scale=alt.Scale(domain=lines, range=[LIMIT_COLOURS[n] for n in lines]),
                title=LIMITS_TITLE,
                legend=limits_legend,
            ),
            strokeDash=alt.StrokeDash(
                "line:N",
                scale=alt.Scale(domain=lines, range=[LIMIT_DASHES[n] for n in lines]),
                title=LIMITS_TITLE,
                legend=limits_legend,
            ),
            detail="line:N",
            tooltip=tip,
        )
    )
    rejections = (
        alt.Chart(_data(series.rejections or empty), name="rejections")
        .mark_point(shape="cross", size=260, color="#c62828", strokeWidth=3, filled=True)
        .encode(x=x, y=y, tooltip=tip)
    )
    # a recovery step happens before the request it retries: drawn just left of it, not on top of it
    recoveries = (
        alt.Chart(_data([{**r, "xs": r["n"] - 0.3} for r in series.recoveries] or empty), name="recoveries")
        .mark_point(shape="triangle-up", size=200, filled=True, opacity=0.9)
        .encode(
            x=xs,
            y=y,
            color=alt.Color(
                "level:O", scale=LEVEL_COLOURS, title="recovery level", legend=alt.Legend(orient="top")
            ),
            tooltip=tip,
        )
    )
    compactions = (
        alt.Chart(_data(spread(series.major) or empty), name="compactions")
        .mark_rule(strokeWidth=3, opacity=0.7)
        .encode(
            x=xs,
            color=alt.Color("stage:N", scale=STAGE_SCALE, title="compaction stage", legend=alt.Legend(orient="right")),
            tooltip=tip,
        )
    )
    # routine trims (tool output capped or aged, no model call) fold into one small tick style
    routine = (
        alt.Chart(_data(spread(series.routine) or empty), name="routine")
        .mark_tick(thickness=2, size=10, color=STAGE_COLOURS["trim"], orient="vertical")
        .encode(x=xs, y=alt.value(184), tooltip=tip)
    )
    cache_breaks = (
        alt.Chart(_data(series.cache_breaks or empty), name="cache_breaks")
        .mark_point(shape="diamond", size=120, color="#ef6c00", filled=False, strokeWidth=2)
        .encode(x=x, y=y, tooltip=tip)
    )
    sentence = knowledge_sentence(series.known_to_pass, series.known_to_fail, series.send_limit, series.real_cap)
    bytes_panel = (
        alt.layer(compactions, routine, size_line, limits, points, rejections, recoveries, cache_breaks)
        .resolve_scale(color="independent", strokeDash="independent")
        .properties(
            width=WIDTH,
            height=190,
            title=alt.TitleParams(
                "Request size against what the session knows about the gateway's limit",
                subtitle=_wrap(sentence + " Grey ticks at the bottom: routine trims of tool output (no model call)."),
                anchor="start",
            ),
        )
    )

    tscale = alt.Scale(domain=[0, _top_tokens(series)], nice=False)
    tokens = (
        alt.Chart(_data(requests or empty), name="tokens")
        .mark_bar(size=6, color="#5c6bc0", opacity=0.8)
        .encode(x=x, y=alt.Y("tokens:Q", title="tokens", scale=tscale), tooltip=tip)
    )
    cached = (
        alt.Chart(_data([r for r in requests if r["cached_tokens"]] or empty), name="cached")
        .mark_bar(size=6, color="#43a047")
        .encode(x=x, y=alt.Y("cached_tokens:Q", scale=tscale), tooltip=tip)
    )
    window_rows = [{"window": series.window}] if series.window else empty
    window = (
        alt.Chart(_data(window_rows), name="window")
        .mark_rule(strokeDash=[6, 4], color="#37474f")
        .encode(
            y=alt.Y("window:Q", scale=tscale),
            tooltip=[alt.Tooltip("window:Q", title="context window (tokens)", format=",")],
        )
    )
    tokens_panel = alt.layer(tokens, cached, window).properties(
        width=WIDTH, height=110, title="Tokens per request (green: read from the prompt cache) against the window"
    )
    chart = alt.vconcat(bytes_panel, tokens_panel, spacing=12).resolve_scale(color="independent")
    if projector:
        chart = chart.configure_axis(labelFontSize=16, titleFontSize=17).configure_legend(
            labelFontSize=15, titleFontSize=16, symbolSize=160
        ).configure_title(fontSize=19, subtitleFontSize=15)
    return chart


def snapshot_chart(session: Any, *, gateway: Any = None, projector: bool = False) -> alt.VConcatChart:
    """``session_chart`` of the session as it is now (its events so far and its evidence): a plain
    altair chart that does not change afterwards, for a notebook cell or a slide."""
    series = SessionSeries()
    for event in events_of(session, panel="snapshot_chart"):
        series.apply(event)
    series.know(*evidence_of(session), real_cap_of(gateway))
    return session_chart(series, projector=projector)


def _top_tokens(series: SessionSeries) -> float:
    values = [r["tokens"] for r in series.requests] + ([series.window] if series.window else [])
    return max(values, default=0) * 1.05 or 1.0


def _wrap(text: str, width: int = 110) -> list[str]:
    """A subtitle as lines that fit the chart's width (Vega does not wrap titles)."""
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


class LiveChart(FeedView, alt.JupyterChart):  # type: ignore[misc]
    """``session_chart`` kept up to date from the session's events (offline JupyterChart, SVG).

    ``gateway``: the ``GatewaySimulator`` the session talks to, whose real cap is drawn as the truth
    the session cannot see; ``projector``: larger text.
    """

    def __init__(self, session: Any, *, gateway: Any = None, projector: bool = False, **kwargs: Any) -> None:
        events = events_of(session, panel="LiveChart")
        alt.JupyterChart.enable_offline(True)  # the JS bundle comes from vl-convert, never a CDN
        self.series = SessionSeries()
        self.redraws = 0
        self._session = session
        self._gateway = gateway
        self.projector = projector
        super().__init__(session_chart(self.series, projector=projector), embed_options=dict(EMBED_OPTIONS), **kwargs)
        self.add_class("ck-chart")
        self._feed = EventFeed(events, self._apply)
        with self._feed.lock:
            self._feed.start()
            self._learn()
            self._redraw()

    def _learn(self) -> bool:
        return self.series.know(*evidence_of(self._session), real_cap_of(self._gateway))

    def _apply(self, event: Event) -> None:
        changed = self.series.apply(event)
        if isinstance(event, RequestEvent) and event.outcome == "ok":
            # the body that just went through is known to pass (the evidence records it right after this
            # event): drawn now, so the evidence read at the next event asks for no second redraw
            self.series.known_to_pass = max(self.series.known_to_pass or 0, event.bytes) or None
        # the evidence changes after the request event (when the flow has judged the outcome), so it
        # is read again on every event
        if (self._learn() or changed) and not self._feed.replaying:
            self._redraw()

    def _redraw(self) -> None:
        self.redraws += 1
        self.chart = session_chart(self.series, projector=self.projector)
