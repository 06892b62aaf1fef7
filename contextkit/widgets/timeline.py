"""``PhaseTimeline``: compaction phases and recovery attempts as they happen (S8.2, S4.12).

One row per ``CompactionEvent`` phase and per ``RecoveryEvent`` step. A phase first arrives with
``outcome="running"`` (a long summary can take minutes): its row is shown as running, and the
result event for the same phase replaces it in place. A recovery step that is retried and then
recovers (or fails) updates its own row the same way.

``timeline_rows(rows, event)`` is the pure reducer; the widget only renders its output.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as W
import traitlets as T

from contextkit.events import CompactionEvent, Event, RecoveryEvent
from contextkit.sizing import format_size
from contextkit.widgets._view import EventFeed, FeedView, events_of
from contextkit.widgets.html import esc, table_html

Row = dict[str, Any]

COLUMNS = (
    ("n", "#"),
    ("what", "what"),
    ("trigger", "trigger / failure"),
    ("phase", "phase / level"),
    ("size", "bytes before → after"),
    ("msgs", "messages"),
    ("outcome", "outcome"),
    ("cost", "summarizer"),
    ("detail", "detail"),
)
_STYLE = (
    "<style>.ck-timeline tr.ck-running td{background:#fff8e1;font-weight:600}"
    ".ck-timeline tr.ck-applied td,.ck-timeline tr.ck-recovered td{background:#e8f5e9}"
    ".ck-timeline tr.ck-failed td,.ck-timeline tr.ck-rejected td,.ck-timeline tr.ck-floor td{background:#ffebee}"
    ".ck-timeline tr.ck-retrying td{background:#e3f2fd}"
    ".ck-timeline tr.ck-skipped td,.ck-timeline tr.ck-ended td{color:#8a8a8a}"
    ".ck-timeline td:nth-child(5),.ck-timeline td:nth-child(6){white-space:nowrap}</style>"
)
FINAL_RECOVERY = ("recovered", "failed", "floor")
_DOT = "<span style='display:inline-block;width:9px;height:9px;border-radius:50%;background:#f9a825'></span>"


def _sizes(before: int, after: int, running: bool) -> str:
    if running or (before and not after):
        return f"{format_size(before)} → …"
    return f"{format_size(before)} → {format_size(after)}"


def compaction_row(event: CompactionEvent) -> Row:
    running = event.outcome == "running"
    cost = ""
    if event.summarizer_prompt_tokens or event.summarizer_completion_tokens or event.summarizer_cost:
        cost = (
            f"${event.summarizer_cost:.4f} ({event.summarizer_prompt_tokens}+{event.summarizer_completion_tokens} tok)"
        )
    detail = event.status
    if not running and event.detail and event.detail not in detail:
        detail = f"{detail} ({event.detail})" if detail else event.detail
    if event.identifier_retention is not None:
        detail = f"{detail} · ids kept {event.identifier_retention:.0%}".strip(" ·")
    return {
        "seq": event.seq,
        "turn": event.turn,
        "what": "compaction",
        "trigger": event.trigger,
        "phase": event.phase + (f" (L{event.level})" if event.level else ""),
        "phase_name": event.phase,
        "level": event.level,
        "size": _sizes(event.bytes_before, event.bytes_after, running),
        "bytes_before": event.bytes_before,
        "bytes_after": event.bytes_after,
        "msgs": f"{event.messages_before} → {'…' if running else event.messages_after}",
        "outcome": event.outcome,
        "failure_kind": "",
        "cost": cost,
        "summarizer_cost": event.summarizer_cost,
        "detail": detail,
    }


def recovery_row(event: RecoveryEvent) -> Row:
    return {
        "seq": event.seq,
        "turn": event.turn,
        "what": "recovery",
        "trigger": event.failure_kind + (f": {event.reason}" if event.reason else ""),
        "phase": f"level {event.level} · attempt {event.attempt}",
        "phase_name": "",
        "level": event.level,
        "attempt": event.attempt,
        "size": _sizes(event.bytes_before, event.bytes_after, False),
        "bytes_before": event.bytes_before,
        "bytes_after": event.bytes_after,
        "msgs": f"{event.messages_before} → {event.messages_after}",
        "outcome": event.outcome,
        "failure_kind": event.failure_kind,
        "cost": "",
        "summarizer_cost": 0.0,
        "detail": f"{len(event.archived_keys)} archived" if event.archived_keys else "",
    }


def _merge_recovery(retrying: Row, final: Row, event: RecoveryEvent) -> Row:
    """The final step of a retried level keeps what the retrying step knew (kind, sizes)."""
    merged = dict(retrying, outcome=final["outcome"], seq=final["seq"])
    if event.failure_kind:
        merged.update(trigger=final["trigger"], failure_kind=final["failure_kind"])
    if event.bytes_after:
        merged.update(size=final["size"], bytes_after=final["bytes_after"], msgs=final["msgs"])
    if final["detail"]:
        merged["detail"] = final["detail"]
    return merged


def _find(rows: list[Row], match: Any) -> int | None:
    for index in range(len(rows) - 1, -1, -1):
        if match(rows[index]):
            return index
    return None


def timeline_rows(rows: list[Row], event: Event, *, max_rows: int = 200) -> list[Row]:
    """Rows after ``event``: a new list (the input is not changed); unrelated events return ``rows``."""
    if isinstance(event, CompactionEvent):
        row = compaction_row(event)
        if event.outcome == "running":
            # a status update of a phase already running ("Summarizing… 30 s") refreshes its row
            index = _find(
                rows,
                lambda r: (
                    r["what"] == "compaction"
                    and r["outcome"] == "running"
                    and r["phase_name"] == event.phase
                    and r["trigger"] == event.trigger
                ),
            )
        else:
            opened = "start" if event.phase == "done" else event.phase
            index = _find(
                rows,
                lambda r: (
                    r["what"] == "compaction" and r["outcome"] == "running" and r["phase_name"] in (event.phase, opened)
                ),
            )
    elif isinstance(event, RecoveryEvent):
        row = recovery_row(event)
        index = None
        if event.outcome in FINAL_RECOVERY:
            index = _find(
                rows,
                lambda r: (
                    r["what"] == "recovery"
                    and r["outcome"] == "retrying"
                    and r["level"] == event.level
                    and r.get("attempt") == event.attempt
                ),
            )
            if index is not None:
                row = _merge_recovery(rows[index], row, event)
    else:
        return rows
    new = list(rows)
    if index is None:
        row["n"] = (rows[-1]["n"] + 1) if rows else 1
        new.append(row)
    else:
        row["n"] = rows[index]["n"]
        new[index] = row
    if isinstance(event, CompactionEvent) and event.phase == "done":
        # a phase that never reported its own result ends with the run ("ended"), or shares
        # the run's failure when the run failed or was cancelled
        ended = event.outcome if event.outcome in ("failed", "cancelled", "rejected") else "ended"
        new = [
            dict(r, outcome=ended, size=r["size"].replace("→ …", "→ ?"), msgs=r["msgs"].replace("→ …", "→ ?"))
            if r["outcome"] == "running" and r["what"] == "compaction"
            else r
            for r in new
        ]
    return new[-max_rows:]


class PhaseTimeline(FeedView, W.VBox):
    """Live table of compaction phases and recovery attempts; ``rows`` and ``running`` for tests."""

    rows: T.List[Row] = T.List(help="one dict per phase / recovery step, oldest first")
    running = T.Unicode("", help="the phase running right now, empty when idle")

    def __init__(self, session: Any, *, max_rows: int = 200, **kwargs: Any) -> None:
        events = events_of(session, panel="PhaseTimeline")
        self.max_rows = max_rows
        self.status = W.HTML()
        self.table = W.HTML()
        super().__init__(children=[self.status, self.table], **kwargs)
        self.add_class("ck-timeline")
        self._feed = EventFeed(events, self._apply)
        with self._feed.lock:
            self._feed.start()
            self._render()

    def _apply(self, event: Event) -> None:
        new = timeline_rows(self.rows, event, max_rows=self.max_rows)
        if new is not self.rows:
            self.rows = new
            if not self._feed.replaying:
                self._render()

    def _render(self) -> None:
        live = [r for r in self.rows if r["outcome"] == "running"]
        if live:
            r = live[-1]
            self.running = f"{r['phase']}: {r['detail']}".rstrip(": ")
            self.status.value = (
                f"<div class='ck-running-line' style='color:#8d6e00;font-weight:600'>{_DOT} running "
                f"{esc(self.running)}</div>"
            )
        else:
            self.running = ""
            done = sum(r["what"] == "compaction" for r in self.rows)
            rec = sum(r["what"] == "recovery" for r in self.rows)
            self.status.value = (
                f"<div class='ck-idle-line' style='font-size:12px'>idle · {done} compaction phase"
                f"{'' if done == 1 else 's'}, {rec} recovery step{'' if rec == 1 else 's'}</div>"
            )
        # newest first in a scroll box: the live end stays in view during a long run
        table = table_html(
            self.rows[::-1],
            COLUMNS,
            css="ck-timeline-table",
            row_class="ck-row",
            row_class_key="outcome",
            empty="no compaction or recovery yet",
        )
        self.table.value = f"{_STYLE}<div class='ck-scroll' style='max-height:360px;overflow-y:auto'>{table}</div>"
