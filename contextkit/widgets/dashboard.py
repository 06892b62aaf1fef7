"""``Dashboard``: one session, live.

Laid out for a projector: a compact header (how full the next request is, the learned cap, the
cached share, the answer streaming in), the live chart of every request in the centre, then what
happened in plain words (compactions and recoveries, one expandable row each), the numbers with
explanations, the recall archive, and the status log (collapsed). Every part follows the
session's events; the numbers re-read ``session.stats`` only when a request, compaction result,
recovery step or history change arrives.

While a dashboard is shown, the session's notebook status sink stays quiet: its lines are in the
status-log panel.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as W
import traitlets as T

from contextkit.display.html import esc
from contextkit.display.status import show_in_panel
from contextkit.events import CompactionEvent, Event, HistoryEvent, RecoveryEvent, RequestEvent
from contextkit.widgets._view import EventFeed, FeedView, call_quietly, close_view, events_of
from contextkit.widgets.browser import ArchiveBrowser
from contextkit.widgets.chart import LiveChart
from contextkit.widgets.gauge import HistoryGauge
from contextkit.widgets.labels import stat_label, stat_value
from contextkit.widgets.log import StatusLog
from contextkit.widgets.timeline import PhaseTimeline

_CELL = "padding:2px 8px;border-bottom:1px solid #eee;text-align:left;vertical-align:top"


def stats_html(data: dict[str, Any]) -> str:
    """The session's counters as "plain label: value" rows, each with a tooltip saying what it counts."""
    rows = []
    for key, value in data.items():
        label, help_text = stat_label(key)
        rows.append(
            f"<tr class='ck-stat' data-key='{esc(key)}' title='{esc(help_text)}'><th style='{_CELL};font-weight:600;"
            f"cursor:help;text-decoration:underline dotted'>{esc(label)}</th><td style='{_CELL}'>"
            f"{esc(stat_value(key, value))}</td></tr>"
        )
    return f"<table class='ck-stats-table' style='border-collapse:collapse;font-size:12px'>{''.join(rows)}</table>"


class StatsTable(FeedView, W.VBox):
    """``session.stats`` in plain words with tooltips; ``stats`` holds the last dict read."""

    stats = T.Dict()

    def __init__(self, session: Any, **kwargs: Any) -> None:
        events = events_of(session, panel="StatsTable")
        self._session = session
        self.table = W.HTML()
        super().__init__(children=[self.table], **kwargs)
        self.add_class("ck-stats")
        self._shown = 0
        self._feed = EventFeed(events, self._apply)
        self._feed.start()  # replayed events do not re-read the stats: one read below covers them
        first = self._read()  # outside the view lock (see HistoryGauge)
        with self._feed.lock:
            if not self._shown:  # a live event may have shown newer stats meanwhile
                self._show(first)

    def _apply(self, event: Event) -> None:
        if self._feed.replaying or (isinstance(event, CompactionEvent) and event.outcome == "running"):
            return
        if isinstance(event, RequestEvent | RecoveryEvent | CompactionEvent | HistoryEvent):
            self._refresh()

    def _refresh(self) -> None:
        self._show(self._read())

    def _read(self) -> dict[str, Any]:
        stats = call_quietly(lambda: self._session.stats)
        to_dict = getattr(stats, "to_dict", None)
        return dict(call_quietly(to_dict, {}) or {}) if callable(to_dict) else {}

    def _show(self, data: dict[str, Any]) -> None:
        self._shown += 1
        self.stats = data
        if not data:
            self.table.value = "<div class='ck-stats-empty'>no numbers available</div>"
            return
        self.table.value = stats_html(data)


PROJECTOR_CSS = (
    "<style>.ck-projector,.ck-projector div,.ck-projector span,.ck-projector td,.ck-projector th,"
    ".ck-projector summary,.ck-projector .ck-episode{font-size:17px !important;line-height:1.45}"
    ".ck-projector .ck-dashboard-title{font-size:20px !important}</style>"
)


class Dashboard(W.VBox):
    """Header, live chart, what happened, numbers, archive and status log; all live.

    ``gateway``: the ``GatewaySimulator`` the session talks to, if it is one: its real cap is drawn
    and named as the truth the session cannot see. ``projector=True``: larger text in every panel
    and the chart, for a projected screen.
    """

    def __init__(self, session: Any, *, gateway: Any = None, projector: bool = False, **kwargs: Any) -> None:
        events_of(session, panel="Dashboard")
        self.projector = projector
        self.gauge = HistoryGauge(session, gateway=gateway)
        self.chart = LiveChart(session, gateway=gateway, projector=projector)
        self.stats = StatsTable(session)
        self.timeline = PhaseTimeline(session)
        self.browser = ArchiveBrowser(session)
        self.status_log = StatusLog(session)
        title = (
            f"<div class='ck-dashboard-title' style='font-size:14px'><b>contextkit</b> · "
            f"{esc(getattr(session, 'model', ''))} · session {esc(getattr(session, 'session_id', ''))}</div>"
        )
        self.title = W.HTML((PROJECTOR_CSS if projector else "") + title)
        sections = [
            self.title,
            self.gauge,
            self.chart,
            _section("What happened: compactions and recoveries", self.timeline),
            _section("The numbers (hover a label for what it counts)", self.stats),
            _section("Recall archive: everything removed, and what the model saw instead", self.browser, open_=False),
            _section("Status log", self.status_log, open_=False),
        ]
        super().__init__(children=sections, **kwargs)
        self.add_class("ck-dashboard")
        if projector:
            self.add_class("ck-projector")
        self.layout.border = "1px solid #cfd8dc"
        self.layout.padding = "8px"
        # The notebook status handler (and a NotebookStatus passed as status=) stays quiet for this
        # session while this log shows its lines.
        session_id = getattr(session, "session_id", None)
        if isinstance(session_id, str):
            show_in_panel(session_id, self.status_log)
        attach = getattr(getattr(session, "status_sink", None), "attach", None)
        if callable(attach):
            attach(self.status_log)

    @property
    def panels(self) -> tuple[Any, ...]:
        return (self.gauge, self.chart, self.stats, self.timeline, self.browser, self.status_log)

    @property
    def last_error(self) -> str | None:
        return next((p.last_error for p in self.panels if p.last_error), None)

    def close(self) -> None:
        close_view(self)
        super().close()


def _section(title: str, body: W.Widget, *, open_: bool = True) -> W.Widget:
    box = W.Accordion(children=[body], titles=(title,), selected_index=0 if open_ else None)
    box.add_class("ck-section")
    return box
