"""``StatusLog``: the session's status lines (compaction phases, notices) inside the dashboard.

In a notebook these lines would otherwise flood the cell's output; the dashboard collects them in
a collapsible panel instead (the notebook status sink stays quiet while one is shown). The lines
come from the events — the same text the status sink receives: each ``NoticeEvent`` and the
status of every ``CompactionEvent`` except trim-stage steps that changed nothing.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as W
import traitlets as T

from contextkit.display.html import esc
from contextkit.events import CompactionEvent, Event, NoticeEvent
from contextkit.widgets._view import EventFeed, FeedView, events_of


def status_line(event: Event) -> str | None:
    """The status text an event stands for, or None."""
    if isinstance(event, NoticeEvent):
        return event.text or None
    if isinstance(event, CompactionEvent):
        if not event.status or (event.outcome == "skipped" and event.stage == "trim"):
            return None
        return event.status
    return None


class StatusLog(FeedView, W.VBox):
    """The last ``max_lines`` status lines, oldest first; ``lines`` for tests."""

    lines: T.List[str] = T.List(help="status lines shown, oldest first")

    def __init__(self, session: Any, *, max_lines: int = 300, **kwargs: Any) -> None:
        events = events_of(session, panel="StatusLog")
        self.max_lines = max_lines
        self.view = W.HTML()
        super().__init__(children=[self.view], **kwargs)
        self.add_class("ck-log")
        self._feed = EventFeed(events, self._apply)
        with self._feed.lock:
            self._feed.start()
            self._render()

    def _apply(self, event: Event) -> None:
        line = status_line(event)
        if line is None:
            return
        self.lines = [*self.lines, f"[turn {event.turn}] {line}" if event.turn else line][-self.max_lines :]
        if not self._feed.replaying:
            self._render()

    def _render(self) -> None:
        text = "\n".join(self.lines) or "no status lines yet"
        self.view.value = (
            "<pre class='ck-log-lines' style='max-height:200px;overflow:auto;font-size:11px;line-height:1.35;"
            f"margin:0;white-space:pre-wrap'>{esc(text)}</pre>"
        )
