"""``Dashboard``: gauge, stats, timeline and archive browser for one session (S8.4).

Laid out as a grid that fits a projector: gauge and stats side by side on top, the phase
timeline below, the archive browser at the bottom. Every part follows the session's events; the
stats table re-reads ``session.stats`` only when a request, compaction result, recovery step or
history change arrives.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as W
import traitlets as T

from contextkit.events import CompactionEvent, Event, HistoryEvent, RecoveryEvent, RequestEvent
from contextkit.widgets._view import EventFeed, FeedView, call_quietly, close_view, events_of
from contextkit.widgets.browser import ArchiveBrowser
from contextkit.widgets.gauge import HistoryGauge
from contextkit.widgets.html import esc, format_stat, kv_table
from contextkit.widgets.timeline import PhaseTimeline


class StatsTable(FeedView, W.VBox):
    """``session.stats.to_dict()`` as a key/value table; ``stats`` holds the last dict read."""

    stats = T.Dict()

    def __init__(self, session: Any, **kwargs: Any) -> None:
        events = events_of(session, panel="StatsTable")
        self._session = session
        self.table = W.HTML()
        super().__init__(children=[W.HTML("<b>Stats</b>"), self.table], **kwargs)
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
            self.table.value = "<div class='ck-stats-empty'>no stats available</div>"
            return
        self.table.value = kv_table(((k, format_stat(v)) for k, v in data.items()), css="ck-stats-table")


class Dashboard(W.VBox):
    """The three panels plus the stats table, all live."""

    def __init__(self, session: Any, **kwargs: Any) -> None:
        events_of(session, panel="Dashboard")
        self.gauge = HistoryGauge(session)
        self.stats = StatsTable(session)
        self.timeline = PhaseTimeline(session)
        self.browser = ArchiveBrowser(session)
        self.gauge.layout = W.Layout(flex="3 1 380px", padding="4px 12px 4px 0")
        self.stats.layout = W.Layout(flex="2 1 320px", padding="4px")
        title = (
            f"<div class='ck-dashboard-title' style='font-size:14px'><b>contextkit</b> · "
            f"{esc(getattr(session, 'model', ''))} · session {esc(getattr(session, 'session_id', ''))}</div>"
        )
        self.title = W.HTML(title)
        top = W.HBox([self.gauge, self.stats], layout=W.Layout(flex_flow="row wrap", align_items="flex-start"))
        sections = [
            self.title,
            top,
            _section("Compaction phases and recovery", self.timeline),
            _section("Recall archive", self.browser),
        ]
        super().__init__(children=sections, **kwargs)
        self.add_class("ck-dashboard")
        self.layout.border = "1px solid #cfd8dc"
        self.layout.padding = "8px"

    @property
    def panels(self) -> tuple[HistoryGauge, StatsTable, PhaseTimeline, ArchiveBrowser]:
        return (self.gauge, self.stats, self.timeline, self.browser)

    @property
    def last_error(self) -> str | None:
        return next((p.last_error for p in self.panels if p.last_error), None)

    def close(self) -> None:
        close_view(self)
        super().close()


def _section(title: str, body: W.Widget) -> W.Widget:
    box = W.Accordion(children=[body], titles=(title,), selected_index=0)
    box.add_class("ck-section")
    return box
